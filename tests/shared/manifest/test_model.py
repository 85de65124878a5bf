"""`runs_per_worker` (issue 26): how many runs one worker process serves, per
tool (`tools[i].runs_per_worker`) or for the server (`server.runs_per_worker`);
1 is a fresh process per run. It is how runs are served, never what a run is:
it stays out of the run's config and so out of its journal's config hash."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from staal.manifest.check import check
from staal.manifest.model import DEFAULT_RUNS_PER_WORKER
from staal.records.runconfig import from_tool
from tests.helpers.manifests import broken, seed_example, write_programs


@pytest.fixture
def here(tmp_path: Path) -> Path:
    write_programs(tmp_path)
    return tmp_path


def two_tools(server: int | None = None, first: int | None = None) -> dict[str, Any]:
    """The seed's example with a second tool; `runs_per_worker` set where given."""
    data = seed_example()
    second = dict(data["tools"][0], name="refund_order_twice")
    del second["once"]
    data["tools"].append(second)
    if server is not None:
        data["server"]["runs_per_worker"] = server
    if first is not None:
        data["tools"][0]["runs_per_worker"] = first
    return data


def test_without_the_key_every_tool_gets_the_default(here: Path) -> None:
    manifest = check(two_tools(), here / "manifest.json")
    assert manifest.server.runs_per_worker == DEFAULT_RUNS_PER_WORKER
    assert manifest.tools[0].runs_per_worker is None
    assert manifest.runs_per_worker("refund_order") == DEFAULT_RUNS_PER_WORKER
    assert manifest.runs_per_worker("refund_order_twice") == DEFAULT_RUNS_PER_WORKER


def test_the_servers_setting_holds_for_every_tool_that_sets_none(here: Path) -> None:
    manifest = check(two_tools(server=250), here / "manifest.json")
    assert manifest.runs_per_worker("refund_order") == 250
    assert manifest.runs_per_worker("refund_order_twice") == 250


def test_a_tools_own_setting_wins_over_the_servers(here: Path) -> None:
    manifest = check(two_tools(server=250, first=1), here / "manifest.json")
    assert manifest.runs_per_worker("refund_order") == 1
    assert manifest.runs_per_worker("refund_order_twice") == 250


@pytest.mark.parametrize("value", [1, 100_000])
def test_both_ends_of_the_range_are_accepted(here: Path, value: int) -> None:
    manifest = check(two_tools(server=value, first=value), here / "manifest.json")
    assert manifest.server.runs_per_worker == value
    assert manifest.runs_per_worker("refund_order") == value


@pytest.mark.parametrize(("value", "said"), [
    (0, "0 is out of range (1 to 100000)"),
    (-3, "-3 is out of range (1 to 100000)"),
    (100_001, "100001 is out of range (1 to 100000)"),
    (1.5, "expected a whole number, not 1.5"),
    ("100", "expected a whole number"),
    (True, "expected a whole number"),
    (None, "expected a whole number"),
])
@pytest.mark.parametrize("where", ["server", "tools[0]"])
def test_a_value_outside_one_to_100000_is_refused_naming_its_key_path(
        here: Path, where: str, value: object, said: str) -> None:
    def change(data: dict[str, Any]) -> None:
        target = data["server"] if where == "server" else data["tools"][0]
        target["runs_per_worker"] = value

    problems = broken(here, change)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{where}.runs_per_worker: {said}"), problems


@pytest.mark.parametrize(("server", "tool"), [(None, 1), (None, 500), (100, None), (7, 100_000)])
def test_the_setting_never_changes_a_tools_config_hash(here: Path, server: int | None,
                                                       tool: int | None) -> None:
    # The hash is in every journal's header and checked at resume: a change
    # of runs_per_worker between a crash and the restart must not make the
    # crashed runs unresumable.
    plain = check(two_tools(), here / "manifest.json")
    tuned = check(two_tools(server=server, first=tool), here / "manifest.json")
    assert tuned.tools[0].runs_per_worker == tool
    assert tuned.server.runs_per_worker == (server or DEFAULT_RUNS_PER_WORKER)
    for name in ("refund_order", "refund_order_twice"):
        before, after = plain.tool(name), tuned.tool(name)
        assert before is not None and after is not None
        assert from_tool(tuned, after).sha256() == from_tool(plain, before).sha256()
        assert "runs_per_worker" not in str(from_tool(tuned, after).to_json())
