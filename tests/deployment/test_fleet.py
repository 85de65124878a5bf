"""Three `serve --http` instances behind HAProxy (`tests/helpers/fleet.py`), reached
by the official clients through the balancer: round robin spreads their
requests over every instance and each answer is right; an event stream's
progress passes through unbuffered; an instance killed or stopped leaves
the rotation by the health check and calls keep succeeding, and it comes
back once restarted or resumed; one draining after SIGTERM leaves it while
its call in flight is still answered. The instances have `auth` (every
client sends a bearer token) and the balancer checks `GET /ready`, which
needs none.

These instances are on the file store and share nothing (each has its own
journal directory; tests/deployment/test_fleet_shared.py and test_fleet_journals.py
run them on the shared PostgreSQL store), so these tools need no shared
state; each
instance's copy of the echo program names its instance, so an answer shows
which instance ran it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest
from mcp import Client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

from staal.protocol.mcp.revisions import LEGACY, MODERN
from staal.supervisor.store.ledger import read_ledger
from tests.clients.test_client_typescript import JS, node, require_node_modules
from tests.helpers.fleet import Fleet, ManifestWriter, fleet
from tests.helpers.flood import call_request, classify
from tests.helpers.haproxy import INSTANCE_HEADER, Backend, config
from tests.helpers.recorder import Recorder, serving
from tests.helpers.servers import WAIT, Site

INSTANCES = ("i1", "i2", "i3")
ECHO = """
def main(text: str) -> dict:
    return {{"echo": text, "by": "{name}"}}
"""
REFUSE = """
from staal import fail
def main(order: str) -> dict:
    fail("validation", "refund exceeds what was paid")
"""
HELD = """
from staal.caps import HttpGet

def main(url: str, get: HttpGet) -> dict:
    return {{"status": get.get(url).status_code, "by": "{name}"}}
"""


def writer(service: Recorder | None = None) -> ManifestWriter:
    """Each instance's manifest: echo (naming its instance), refuse and,
    with a service, `held` (one GET to it)."""
    def write(site: Site, server: dict[str, Any]) -> None:
        name = site.root.name
        site.program("echo.py", ECHO.format(name=name))
        site.program("refuse.py", REFUSE)
        tools: list[dict[str, Any]] = [{"name": "echo", "program": "echo.py"},
                                       {"name": "refuse", "program": "refuse.py"}]
        if service is not None:
            site.program("held.py", HELD.format(name=name))
            tools.append({"name": "held", "program": "held.py",
                          "grants": {"get": {"cap": "net.http.get", "only": [service.base + "/*"]}}})
        site.write(tools, **server)
    return write


@pytest.fixture(scope="module")
def service() -> Iterator[Recorder]:
    with serving("GET", "/held", 200, {"ok": True}) as recorder:
        yield recorder


@pytest.fixture(scope="module")
def three(service, authorization) -> Iterator[Fleet]:
    with fleet(3, writer(service), authorization) as running:
        yield running


def served_during(running: Fleet, action: Callable[[], Any]) -> tuple[Any, Counter[str]]:
    """What `action()` returns and how many of its requests each instance
    served, by the balancer's log (nothing else calls this fleet meanwhile)."""
    before = running.lb.served()
    value = action()
    after = running.lb.served()
    return value, after - before


def spread_evenly(served: Counter[str]) -> None:
    """Round robin: every instance served, none more than one request more than another."""
    assert set(served) == set(INSTANCES), served
    assert max(served.values()) - min(served.values()) <= 1, served


@pytest.mark.parametrize("mode", ["auto", "legacy", "2026-07-28"])
def test_the_python_sdk_through_the_balancer_gets_right_answers_from_all_three_instances(three, mode):
    async def session() -> list:
        transport = streamable_http_client(
            three.url, http_client=create_mcp_http_client(headers=three.headers))
        async with Client(transport, mode=mode) as client:
            listed = await client.list_tools()
            echoed = [await client.call_tool("echo", {"text": f"t{i}"}) for i in range(9)]
            refused = await client.call_tool("refuse", {"order": "o1"})
            return [listed, echoed, refused]

    (listed, echoed, refused), served = served_during(three, lambda: anyio.run(session))
    assert sorted(t.name for t in listed.tools) == ["echo", "held", "refuse", "staal_run_status"]
    assert [e.structured_content["result"]["echo"] for e in echoed] == [f"t{i}" for i in range(9)]
    assert {e.structured_content["result"]["by"] for e in echoed} == set(INSTANCES)
    assert refused.is_error is True
    assert refused.content[0].text == "validation: refund exceeds what was paid"
    spread_evenly(served)


def typescript_session(sdk: str, mode: str, url: str, headers: dict[str, str]) -> dict[str, Any]:
    """tests/js/sdk_session.mjs over Streamable HTTP, without the run's
    resource read: the instances share no runs until the shared store lands,
    so a run is known only to the instance that ran it."""
    require_node_modules()
    plan = {"sdk": sdk, "mode": mode, "url": url, "headers": headers,
            "echo": {"name": "echo", "good": {"text": "hello"}, "bad": {"text": 5}},
            "refuse": {"name": "refuse", "arguments": {"order": "pi_1"}},
            "unknown": "no_such_tool", "timeoutMs": 30000}
    done = subprocess.run([node(), str(JS / "sdk_session.mjs")], input=json.dumps(plan), cwd=JS,
                          check=False, capture_output=True, text=True, timeout=4 * WAIT)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert "fatal" not in out and out["steps"][-1] == "closed", out
    return out


@pytest.mark.parametrize(("sdk", "mode", "version"), [("client", "auto", MODERN),
                                                      ("client", "legacy", LEGACY),
                                                      ("sdk1", "legacy", LEGACY)])
def test_the_typescript_sdks_through_the_balancer_get_right_answers(three, sdk, mode, version):
    out, served = served_during(three, lambda: typescript_session(sdk, mode, three.url,
                                                                      three.headers))
    if sdk == "client":
        assert out["protocolVersion"] == version
    assert sorted(t["name"] for t in out["tools"]) == ["echo", "held", "refuse", "staal_run_status"]
    assert out["good"]["structuredContent"]["result"]["echo"] == "hello"
    assert out["badArguments"]["text"] == ["text: expected a string, not 5"]
    assert out["refused"]["text"] == ["validation: refund exceeds what was paid"]
    assert out["unknown"]["error"]["code"] == -32602
    spread_evenly(served)


def test_progress_events_pass_through_the_balancer_while_the_run_is_still_going(three, service):
    hold = service.hold("/held")
    body, headers = call_request(1, "held", {"url": service.base + "/held"}, MODERN)
    message = orjson.loads(body)
    message["params"]["_meta"]["progressToken"] = "p1"
    with httpx.Client(timeout=WAIT, trust_env=False) as http, \
            http.stream("POST", three.url, content=orjson.dumps(message),
                        headers={**headers, **three.headers}) as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        lines = answer.iter_lines()
        first = next(orjson.loads(line[5:]) for line in lines if line.startswith("data:"))
        # The run is still held at the service: the event came through unbuffered.
        assert hold.arrived.wait(WAIT) and not hold.release.is_set()
        assert first["method"] == "notifications/progress"
        assert first["params"]["progressToken"] == "p1"
        assert first["params"]["message"].startswith("run ")
        hold.release.set()
        rest = "\n".join(lines)
        instance = answer.headers[INSTANCE_HEADER]
    done = classify(1, 200, rest.encode())
    assert done.kind == "done" and done.result == {"status": 200, "by": instance}


def echo_through(running: Fleet, calls: int) -> list[str]:
    """`calls` echo calls through the balancer, every one done: the
    instances that ran them."""
    by = []
    with httpx.Client(timeout=WAIT, trust_env=False) as http:
        for i in range(calls):
            body, headers = call_request(i, "echo", {"text": f"k{i}"}, LEGACY)
            answer = http.post(running.url, content=body, headers={**headers, **running.headers})
            got = classify(i, answer.status_code, answer.content, answer.headers.get(INSTANCE_HEADER))
            assert got.kind == "done" and got.result["echo"] == f"k{i}", got
            assert got.result["by"] == got.instance
            by.append(got.instance)
    return by


def test_a_killed_or_stopped_instance_leaves_the_rotation_and_rejoins_when_back(tmp_path,
                                                                              authorization):
    with fleet(3, writer(), authorization, root=tmp_path) as running:
        assert set(echo_through(running, 6)) == set(INSTANCES)

        assert running.instance("i2").kill() == -9
        running.lb.wait_state("i2", "DOWN")
        assert set(echo_through(running, 6)) == {"i1", "i3"}

        running.instance("i3").pause()
        running.lb.wait_state("i3", "DOWN")
        assert set(echo_through(running, 4)) == {"i1"}

        running.instance("i3").resume()
        running.lb.wait_state("i3", "UP")
        running.instance("i2").restart()
        running.lb.wait_state("i2", "UP")
        # Both are back in the rotation (HAProxy's weighted round robin first
        # evens out what the returning ones missed, so i1 may wait its turn).
        assert {"i2", "i3"} <= set(echo_through(running, 9))
        assert running.lb.state_changes("i2") == ["DOWN", "UP"]
        assert running.lb.state_changes("i3") == ["DOWN", "UP"]
        # Every call ran once, on the instance that answered it: 25 runs in all.
        runs = [len(read_ledger(i.site.ledger_path).runs()) for i in running.instances]
        assert sum(runs) == 25


def test_an_instance_draining_after_sigterm_leaves_the_rotation_while_its_call_is_answered(
        tmp_path, authorization):
    with serving("GET", "/held", 200, {"ok": True}) as service, \
            fleet(3, writer(service), authorization, root=tmp_path) as running:
        hold = service.hold("/held")
        draining = running.instance("i2")
        body, headers = call_request(1, "held", {"url": service.base + "/held"}, LEGACY)
        answers: list[Any] = []

        def call() -> None:
            with httpx.Client(timeout=4 * WAIT, trust_env=False) as http:
                got = http.post(draining.url, content=body, headers={**headers, **running.headers})
            answers.append(classify(1, got.status_code, got.content))

        calling = threading.Thread(target=call, daemon=True)
        calling.start()
        try:
            assert hold.arrived.wait(WAIT)
            draining.signal(signal.SIGTERM)
            draining.server.stderr.wait_event("readiness", state="draining", ready=False)
            running.lb.wait_state("i2", "DOWN")
            # Out of the rotation while its call is still held at the service.
            assert calling.is_alive() and not answers
            after = echo_through(running, 4)
        finally:
            hold.release.set()
        calling.join(4 * WAIT)
        assert draining.server.wait_exit() == 0
    assert set(after) == {"i1", "i3"}
    (answer,) = answers
    assert answer.kind == "done" and answer.result == {"status": 200, "by": "i2"}, answer
    assert running.lb.state_changes("i2") == ["DOWN"]


def test_the_operators_guide_shows_the_haproxy_config_the_tests_use():
    guide = (Path(__file__).resolve().parents[2] / "docs" / "operators.md").read_text()
    section = guide.split("## Several instances behind a load balancer\n", 1)[1]
    shown = section.split("```\n", 2)[1]
    used = config(3, "127.0.0.1:8080", [Backend(f"i{i}", 8100 + i) for i in (1, 2, 3)])
    assert shown == used.replace("bind fd@3", "bind 127.0.0.1:8080")
