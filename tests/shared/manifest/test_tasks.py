"""The manifest's task keys: a tool's `task` ("forbidden", the default,
"optional" or "required": MCP's execution.taskSupport) and the server's
`task_poll_interval` and `task_ttl`, never longer than `keep` (a task is kept
only as long as its run's journal)."""

from __future__ import annotations

from pathlib import Path

import pytest

from staal.manifest.check import load_manifest
from staal.manifest.model import DEFAULT_TASK_POLL_INTERVAL
from tests.helpers.manifests import broken, seed_example, write_manifest, write_programs


@pytest.fixture
def here(tmp_path: Path) -> Path:
    write_programs(tmp_path)
    return tmp_path


def loaded(here: Path, tool: dict | None = None, **server: object):
    data = seed_example()
    data["tools"][0].update(tool or {})
    data["server"].update(server)
    return load_manifest(write_manifest(here, data))


def test_a_tool_is_never_a_task_unless_it_says_so(here: Path) -> None:
    manifest = loaded(here)
    assert manifest.tools[0].task == "forbidden"
    assert manifest.server.task_poll_interval == DEFAULT_TASK_POLL_INTERVAL
    assert manifest.server.task_ttl is None and manifest.server.task_ttl_ms == 90 * 86_400_000


@pytest.mark.parametrize("support", ["forbidden", "optional", "required"])
def test_a_tool_names_its_task_support(here: Path, support: str) -> None:
    assert loaded(here, {"task": support}).tools[0].task == support


@pytest.mark.parametrize("value", ["always", True, None, 1])
def test_a_task_support_not_one_of_the_three_is_refused_naming_its_key_path(
        here: Path, value: object) -> None:
    problems = broken(here, lambda d: d["tools"][0].__setitem__("task", value))
    assert len(problems) == 1 and problems[0].startswith("tools[0].task: "), problems
    assert "forbidden, optional, required" in problems[0]


def test_the_poll_interval_and_ttl_are_durations(here: Path) -> None:
    server = loaded(here, task_poll_interval="5s", task_ttl="2d", keep=30).server
    assert server.task_poll_interval.ms == 5_000 and server.task_ttl_ms == 2 * 86_400_000


def test_a_task_ttl_longer_than_retention_is_refused(here: Path) -> None:
    def longer(data: dict) -> None:
        data["server"].update(keep=30, task_ttl="31d")

    problems = broken(here, longer)
    assert len(problems) == 1 and problems[0].startswith("server.task_ttl: 31d is longer than "
                                                        "server.keep (30 days)"), problems


def test_kept_for_ever_a_task_has_no_ttl(here: Path) -> None:
    assert loaded(here, keep="forever").server.task_ttl_ms is None


def test_a_poll_interval_that_is_not_a_duration_is_refused(here: Path) -> None:
    problems = broken(here, lambda d: d["server"].__setitem__("task_poll_interval", "soon"))
    assert len(problems) == 1 and problems[0].startswith("server.task_poll_interval: "), problems
