"""The MCP conformance suite (`@modelcontextprotocol/conformance`, on Node 22,
both pinned in tests/js) against `serve --http` with the fixture tools of
tests/conformance/manifest.json, for each revision's frozen requirements.
Every scenario that applies to what staal serves passes; the others are
listed, each with its reason, in tests/conformance/expected-failures-*.yml,
and the suite itself fails an entry that starts to pass."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.clients.test_client_typescript import NODE_MODULES, node, on_node22, require_node_modules
from tests.helpers.http_servers import HttpServer
from tests.helpers.servers import Site

FIXTURES = Path(__file__).resolve().parents[1] / "conformance"
CONFORMANCE = NODE_MODULES / ".bin" / "conformance"
TIMEOUT = 600
# The scenarios about what staal serves, which must pass whole (not merely be
# run; server-stateless and caching pass but for the checks the baseline
# names, each of which the suite still judges on its own).
RICH_RESULTS = ["tools-call-image", "tools-call-audio", "tools-call-embedded-resource",
                "tools-call-mixed-content"]
# Issue 29: the operator's prompts (the fixture manifest's `prompts`) and completions.
PROMPTS = ["prompts-list", "prompts-get-simple", "prompts-get-with-args",
           "prompts-get-embedded-resource", "prompts-get-with-image", "completion-complete"]
MUST_PASS = {
    "2026-07-28": ["tools-list", "tools-call-simple-text", "tools-call-error",
                   "tools-call-with-progress", "server-sse-multiple-streams",
                   "dns-rebinding-protection", "http-header-validation", "resources-list",
                   "sep-2164-resource-not-found",
                   *RICH_RESULTS, *PROMPTS],
    "2025-11-25": ["server-initialize", "ping", "tools-list", "tools-call-simple-text",
                   "tools-call-error", "tools-call-with-progress", "dns-rebinding-protection",
                   "resources-list",
                   *RICH_RESULTS, *PROMPTS],
}


# The tasks extension's scenarios (SEP-2663), off the timeline: run with --force.
TASKS_SCENARIOS = ["tasks-lifecycle", "tasks-capability-negotiation", "tasks-wire-fields",
                   "tasks-request-state-removal", "tasks-mrtr-input", "tasks-request-headers",
                   "tasks-dispatch-and-envelope", "tasks-status-notifications",
                   "tasks-required-task-error", "tasks-mrtr-composition"]
TASKS_BASELINE = FIXTURES / "expected-failures-tasks.yml"
# How many of them run at once against the one server.
TASKS_CLIENTS = 3


def baseline(revision: str) -> Path:
    return FIXTURES / f"expected-failures-{revision}.yml"


def conformance(url: str, revision: str, out: Path) -> subprocess.CompletedProcess:
    require_node_modules()
    node()  # fails saying how to install it when it is missing
    env = {**os.environ, "PATH": on_node22(os.environ["PATH"])}
    return subprocess.run(
        [str(CONFORMANCE), "server", "--url", url, "--requirements", revision,
         "--expected-failures", str(baseline(revision)), "-o", str(out)],
        capture_output=True, text=True, timeout=TIMEOUT, env=env, check=False)


def summary(output: str) -> dict[str, tuple[bool, int, int]]:
    """scenario -> (passed, checks passed, checks failed), from the SUMMARY."""
    found = {}
    for match in re.finditer(r"^([✓✗]) (\S+): (\d+) passed, (\d+) failed", output, re.M):
        found[match[2]] = (match[1] == "✓", int(match[3]), int(match[4]))
    return found


@pytest.fixture
def served(tmp_path):
    fixtures = tmp_path / "conformance"
    shutil.copytree(FIXTURES, fixtures, ignore=shutil.ignore_patterns("journals", "*.yml"))
    with HttpServer(Site(fixtures)) as server:
        yield server


@pytest.mark.parametrize("revision", sorted(MUST_PASS))
def test_the_conformance_suite_passes_every_scenario_of_what_staal_serves(served, tmp_path,
                                                                           revision):
    done = conformance(served.url, revision, tmp_path / "results")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "Baseline check passed: all failures are expected." in output
    scenarios = summary(output)
    failing = [name for name in MUST_PASS[revision] if not scenarios.get(name, (False,))[0]]
    assert failing == [], output[-4000:]


@pytest.mark.parametrize("revision", sorted(MUST_PASS))
def test_every_expected_failure_gives_its_reason(revision):
    entries = [line.strip() for line in baseline(revision).read_text().splitlines()
               if line.strip().startswith("- ")]
    assert entries
    for entry in entries:
        name, sep, reason = entry[2:].partition("#")
        assert sep and reason.strip(), f"{entry!r} has no reason"
        assert name.strip() not in MUST_PASS[revision]


def test_the_tasks_scenarios_pass_but_for_their_listed_checks(served, tmp_path):
    require_node_modules()
    node()
    env = {**os.environ, "PATH": on_node22(os.environ["PATH"])}

    def run(scenario: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(CONFORMANCE), "server", "--url", served.url, "--scenario", scenario,
             "--spec-version", "2026-07-28", "--force", "--expected-failures", str(TASKS_BASELINE),
             "-o", str(tmp_path / "results" / scenario)],
            capture_output=True, text=True, timeout=TIMEOUT, env=env, check=False)

    # Each scenario is a client of its own (its own sessions and tasks) of the
    # one server, as clients are; a few at a time, as most of a scenario's
    # time is its tasks' waits and Node's start, not the server's work.
    with ThreadPoolExecutor(TASKS_CLIENTS) as pool:
        runs = dict(zip(TASKS_SCENARIOS, pool.map(run, TASKS_SCENARIOS), strict=True))
    for scenario, done in runs.items():
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"{scenario}:\n{output[-4000:]}"
        assert "SKIPPED" in output or re.search(r"Passed: [1-9]", output), f"{scenario}: {output[-2000:]}"


def test_every_expected_tasks_failure_gives_its_reason():
    entries = [line.strip()[2:] for line in TASKS_BASELINE.read_text().splitlines()
               if line.strip().startswith("- ")]
    assert entries
    for entry in entries:
        name, sep, reason = entry.partition("#")
        assert sep and reason.strip(), f"{entry!r} has no reason"
        assert name.strip().split(":")[0] in TASKS_SCENARIOS
