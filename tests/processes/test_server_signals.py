"""Ctrl-C and SIGTERM are a clean stop (issue 24, item 7). A terminal sends
Ctrl-C to its whole foreground process group, the zygote included; a
`kill` names the supervisor alone. Either signal, either way, over stdio or
Streamable HTTP: the call in flight is answered, `terminated` is logged
naming the signal, no line is at level error, no child is restarted (no
zygote or verifier replaced, no run resumed), the exit code is 0 and
standard error holds no traceback.

Each server is started in a session (so a process group) of its own, as a
shell starts a foreground job, and the call in flight is held at the test
service until the signal was taken."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from typing import Any

import httpx
import psutil
import pytest

from staal.supervisor.store.ledger import read_ledger
from tests.helpers.http_servers import HttpServer
from tests.helpers.recorder import Hold, Recorder
from tests.helpers.servers import WAIT, RawServer, Site, Stderr
from tests.helpers.verifiers import new_key, verifier_site

LOOKUP = """
from staal.caps import HttpGet

def main(url: str, get: HttpGet) -> dict:
    return {"status": get.get(url).status_code}
"""
# What a restart of a child, or a crash taken for one, logs.
RESTARTS = {"zygote_exited", "zygote_replacing", "zygote_started", "worker_lost",
            "verifier_exited", "verifier_replacing", "verifier_killed"}
SIGNALS = [pytest.param(signal.SIGINT, id="SIGINT"), pytest.param(signal.SIGTERM, id="SIGTERM")]
TARGETS = ["supervisor-alone", "whole-group"]


def lookup_tool(service: Recorder) -> dict[str, Any]:
    return {"name": "lookup", "program": "lookup.py",
            "grants": {"get": {"cap": "net.http.get", "only": [service.base + "/**"]}}}


def lookup_site(root, service: Recorder) -> Site:
    site = Site(root)
    site.program("lookup.py", LOOKUP)
    site.write([lookup_tool(service)])
    return site


def zygote_of(process: subprocess.Popen) -> psutil.Process:
    (zygote,) = [p for p in psutil.Process(process.pid).children()
                 if "staal.worker.processes.zygote" in p.cmdline()]
    return zygote


def stop(process: subprocess.Popen, number: signal.Signals, target: str) -> None:
    """`number` to the supervisor alone; to its whole process group as a
    terminal sends Ctrl-C (the zygote is in that group and gets it too); or
    to every process of the server, as systemd stops a service (its default
    KillMode, control-group): workers and the verifier, in groups of their
    own, included."""
    if target == "supervisor-alone":
        os.kill(process.pid, number)
        return
    group = os.getpgid(process.pid)
    assert group == process.pid and os.getpgid(zygote_of(process).pid) == group
    children = psutil.Process(process.pid).children(recursive=True)
    os.killpg(group, number)
    if target == "every-process":
        own_groups = 0  # workers and the verifier: beyond the group's signal
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                own_groups += os.getpgid(child.pid) != group
                os.kill(child.pid, number)
        assert own_groups > 0


def assert_clean_stop(stderr: Stderr, code: int, number: signal.Signals, site: Site) -> None:
    text = stderr.wait_closed()
    assert code == 0, text
    records = stderr.records()
    assert [r["signal"] for r in records if r.get("event") == "terminated"] == [number.name]
    assert [r for r in records if r.get("level") == "error"] == []
    assert [r["event"] for r in records if r.get("event") in RESTARTS] == []
    started = [r for r in records if r.get("event") == "run_started"]
    assert len(started) == 1 and not started[0].get("resume"), started
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert [e.state for e in read_ledger(site.ledger_path).runs()] == ["settled"]


def held_call(service: Recorder) -> tuple[Hold, dict[str, Any]]:
    return service.hold("/slow"), {"name": "lookup", "arguments": {"url": service.base + "/slow"}}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("number", SIGNALS)
def test_over_stdio_a_stop_signal_answers_the_call_in_flight_and_exits_cleanly(
        tmp_path, service, number, target):
    held, params = held_call(service)
    site = lookup_site(tmp_path, service)
    with RawServer(site, new_session=True) as server:
        server.initialize()
        request = server.request("tools/call", params)
        assert held.arrived.wait(WAIT)
        stop(server.process, number, target)
        server.stderr.wait_event("terminated")
        held.release.set()
        answer = server.answer(request)
        assert answer["result"]["structuredContent"] == {"result": {"status": 404}}
        code = server.wait_exit()
    assert_clean_stop(server.stderr, code, number, site)


def call_while_stopped(server: HttpServer, service: Recorder, number: signal.Signals,
                       target: str, headers: dict[str, str] | None = None) -> httpx.Response:
    """A call held at the service, the signal sent and taken, the call let
    go: its answer."""
    held, params = held_call(service)
    answered: dict[str, httpx.Response] = {}
    thread = threading.Thread(target=lambda: answered.update(answer=server.modern(
        "tools/call", params, headers=headers)))
    thread.start()
    try:
        assert held.arrived.wait(WAIT)
        stop(server.process, number, target)
        server.stderr.wait_event("terminated")
    finally:
        held.release.set()
        thread.join(WAIT)
    return answered["answer"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("number", SIGNALS)
def test_over_http_a_stop_signal_answers_the_call_in_flight_and_exits_cleanly(
        tmp_path, service, number, target):
    site = lookup_site(tmp_path, service)
    with HttpServer(site, new_session=True) as server:
        answer = call_while_stopped(server, service, number, target)
        assert answer.json()["result"]["structuredContent"] == {"result": {"status": 404}}
        code = server.wait_exit()
    assert_clean_stop(server.stderr, code, number, site)


@pytest.mark.parametrize("target", ["whole-group", "every-process"])
@pytest.mark.parametrize("number", SIGNALS)
def test_behind_a_provider_verifier_a_stop_signal_to_the_group_or_every_process_stops_cleanly(
        tmp_path, service, number, target):
    key = new_key()
    site = verifier_site(Site(tmp_path), key, tools=[lookup_tool(service)])
    site.program("lookup.py", LOOKUP)
    with HttpServer(site, new_session=True) as server:
        (verifier,) = [p for p in psutil.Process(server.process.pid).children()
                       if "staal.worker.processes.verifier" in p.cmdline()]
        answer = call_while_stopped(server, service, number, target,
                                    headers={"x-api-key": key})
        assert answer.json()["result"]["structuredContent"] == {"result": {"status": 404}}
        code = server.wait_exit()
        assert not verifier.is_running()
    assert_clean_stop(server.stderr, code, number, site)


def test_a_zygote_signalled_while_its_interpreter_starts_outlives_it_and_exits_when_told(
        tmp_path, capfd):
    """The zygote starts with the stop signals blocked and ignores them
    first thing: a Ctrl-C that reaches it before any of its code runs is
    dropped, not a KeyboardInterrupt in the middle of its imports."""
    from staal.supervisor.workers.zygote import spawn

    site = Site(tmp_path)
    site.program("lookup.py", LOOKUP)
    site.write([{"name": "lookup", "program": "lookup.py"}])
    spawned = spawn(site.manifest, f"ipc://{tmp_path / 'workers'}", dict(os.environ))
    process = spawned.process
    try:
        process.send_signal(signal.SIGINT)  # long before its interpreter has started
        process.send_signal(signal.SIGTERM)
        with os.fdopen(spawned.report_fd, "rb") as report:
            assert report.readline() == b"ready\n"
            assert process.poll() is None
            process.stdin.close()  # the supervisor's word to stop
            assert process.wait(WAIT) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(WAIT)
    written = capfd.readouterr()
    assert "Traceback" not in written.err + written.out


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_ctrl_c_before_the_server_serves_stops_it_at_once_without_a_traceback(
        tmp_path, service, transport):
    """While it waits for the journal directory's lock (another server holds
    it), the server is not serving yet: Ctrl-C stops it there and then,
    exit 130, its zygote with it, no traceback."""
    from staal.supervisor.store.lockfile import ServerLock

    site = lookup_site(tmp_path, service)
    # A wait for the lock far longer than a loaded machine's delays, so the
    # Ctrl-C comes while it waits; it must not wait that wait out.
    env = {"STAAL_TEST_KILL_POINTS": "1", "STAAL_TEST_LOCK_WAIT_S": "600"}
    with ServerLock.acquire(site.journals, wait_s=0):
        server = (RawServer(site, env, new_session=True) if transport == "stdio"
                  else HttpServer(site, env, new_session=True))
        try:
            server.stderr.wait_event("waiting_for_lock")
            zygote = zygote_of(server.process)  # started early, before the lock
            os.killpg(server.process.pid, signal.SIGINT)
            code = server.wait_exit()
        finally:
            server.stop()
    text = server.stderr.wait_closed()
    assert code == 130, text
    _, alive = psutil.wait_procs([zygote], timeout=WAIT)
    assert alive == [], "the zygote outlived the server it was started for"
    assert server.stderr.events("interrupted") and not server.stderr.events("startup_failed")
    assert [r for r in server.stderr.records() if r.get("level") == "error"] == []
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
