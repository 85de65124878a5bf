"""Run configs: read from a file for `staal run`, built from a manifest tool
for the server, and hashed into the journal header."""

from __future__ import annotations

import json

import pytest

from staal.errors import ManifestError
from staal.manifest.check import check
from staal.manifest.grants import GrantReader
from staal.manifest.sizes import machine_mib
from staal.manifest.values import ValueReader
from staal.records.runconfig import (
    DEFAULT_CPU_MS,
    DEFAULT_MEMORY_MIB,
    DEFAULT_WAIT_MS,
    SCRIPT_NET,
    from_tool,
    grant_to_json,
    load_run_config,
)
from tests.helpers.manifests import seed_example, write_programs


@pytest.fixture
def manifest(tmp_path):
    write_programs(tmp_path)
    return check(seed_example(), tmp_path / "manifest.json")


def test_a_tools_deadline_becomes_the_runs_deadline_ms(manifest):
    config = from_tool(manifest, manifest.tools[0])
    assert config.limits.deadline_ms == 120_000
    assert config.limits.cpu_ms >= 2 * 120_000
    assert config.net == manifest.tools[0].net
    assert config.limits.max_steps == manifest.tools[0].max_steps


def test_only_a_tool_that_can_reach_a_model_carries_the_model(manifest):
    assert from_tool(manifest, manifest.tools[0]).model is None


def test_the_config_hash_changes_with_what_the_run_may_do(tmp_path, manifest):
    first = from_tool(manifest, manifest.tools[0]).sha256()
    assert from_tool(manifest, manifest.tools[0]).sha256() == first
    data = seed_example()
    data["tools"][0]["grants"]["pay"]["uses"] = 2
    changed = check(data, tmp_path / "manifest.json")
    assert from_tool(changed, changed.tools[0]).sha256() != first


def test_secret_names_are_every_env_a_grant_names(manifest):
    assert from_tool(manifest, manifest.tools[0]).secret_names() == ["STRIPE_SECRET_KEY"]


def test_a_grant_written_back_to_json_reads_back_the_same(manifest):
    grant = manifest.tools[0].grants["pay"]
    reader = GrantReader(ValueReader(base_dir=manifest.path.parent))
    again = reader.grant(grant_to_json(grant), "pay")
    assert again == grant


def test_a_run_config_file_is_read_relative_to_itself(tmp_path):
    write_programs(tmp_path, "prog.py")
    (tmp_path / "config.json").write_text(json.dumps({"program": "prog.py", "inputs": {"order": "o"}}))
    config, inputs = load_run_config(tmp_path / "config.json")
    assert config.program == tmp_path / "prog.py"
    assert config.tool == "prog" and config.net == SCRIPT_NET
    assert config.source == tmp_path / "config.json"
    assert inputs == {"order": "o"}


def test_every_problem_of_a_run_config_is_named_by_its_key_path(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "program": "missing.py", "limits": {"max_steps": 0, "deadline": 5},
        "grants": {"x": {"cap": "model.complete"}}, "surprise": 1}))
    with pytest.raises(ManifestError) as caught:
        load_run_config(tmp_path / "config.json")
    paths = sorted(p.split(":")[0] for p in caught.value.problems)
    assert paths == ["limits.deadline", "limits.max_steps", "model", "program", "surprise"]


def test_a_problem_reads_the_same_in_a_manifest_and_in_a_run_config(tmp_path):
    from tests.helpers.manifests import problems_of, seed_example

    write_programs(tmp_path, "prog.py")
    bad = {"cap": "net.http.get", "only": ["ftp://example.com/x"]}
    data = seed_example()
    data["tools"][0]["grants"]["get"] = bad
    (manifest_problem,) = [p for p in problems_of(tmp_path, data) if ".grants.get." in p]
    (tmp_path / "config.json").write_text(json.dumps({"program": "prog.py", "grants": {"get": bad}}))
    with pytest.raises(ManifestError) as caught:
        load_run_config(tmp_path / "config.json")
    (config_problem,) = caught.value.problems
    assert manifest_problem == "tools[0]." + config_problem


# -- the limits a tool sets: max_memory, max_wait, max_cpu -------------------------------


def test_a_tool_without_limit_keys_gets_the_defaults_and_its_deadline_bounds_its_waits(tmp_path, manifest):
    limits = from_tool(manifest, manifest.tools[0]).limits
    assert limits.memory_mib == min(DEFAULT_MEMORY_MIB, machine_mib())
    assert limits.wait_ms == 120_000  # the seed's example has "deadline": "120s"
    data = seed_example()
    del data["tools"][0]["deadline"]
    undated = check(data, tmp_path / "manifest.json")
    limits = from_tool(undated, undated.tools[0]).limits
    assert (limits.wait_ms, limits.cpu_ms) == (DEFAULT_WAIT_MS, DEFAULT_CPU_MS)


def test_max_memory_max_wait_and_max_cpu_become_the_runs_limits(tmp_path, manifest):
    data = seed_example()
    data["tools"][0].update(max_memory="1GiB", max_wait="90s", max_cpu="5m")
    limited = check(data, tmp_path / "manifest.json")
    limits = from_tool(limited, limited.tools[0]).limits
    assert (limits.memory_mib, limits.wait_ms, limits.cpu_ms) == (1024, 90_000, 300_000)


def test_a_run_configs_limits_take_memory_mib_and_wait_ms(tmp_path):
    (tmp_path / "p.py").write_text("def main() -> int:\n    return 1\n")
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"program": "p.py", "limits": {"memory_mib": 64, "deadline_ms": 5000}}))
    config, _ = load_run_config(path)
    assert (config.limits.memory_mib, config.limits.wait_ms) == (64, 5000)
    path.write_text(json.dumps({"program": "p.py", "limits": {"memory_mib": 8, "wait_ms": 0}}))
    with pytest.raises(ManifestError) as refused:
        load_run_config(path)
    assert {p.split(":")[0] for p in refused.value.problems} == {"limits.memory_mib", "limits.wait_ms"}
