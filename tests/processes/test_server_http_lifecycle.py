"""Serving over HTTP keeps what serving over stdio promises around the
calls: the bound on calls in progress, the journal directory's lock,
recovery at start, `status`, and logs that hold nothing of a request's
headers but its method and tool name (issue 13, items 4 and 5)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx

from staal.protocol.http.endpoint import Endpoint
from staal.protocol.mcp.dispatch import Dispatcher
from staal.protocol.mcp.results import Done
from staal.supervisor.calls.busy_bound import BusyBound
from staal.supervisor.store.ledger import read_ledger
from staal.supervisor.telemetry.metrics import NO_METRICS
from staal.supervisor.transport.http_serving import McpApp, settings_for
from tests.helpers.http_servers import HttpServer, modern_headers
from tests.helpers.servers import WAIT, modern_meta
from tests.processes.test_server_http import call, site_for
from tests.protocol.test_support import SERVER, descriptor

# -- the bound on calls in progress, in this process ------------------------------------


class HeldServer:
    """What McpApp asks of the server, with every call held until released:
    the real bound (`BusyBound`, as `Server.busy`) over max_concurrent_runs 1, so 20."""

    manifest = SimpleNamespace(server=SimpleNamespace(max_concurrent_runs=1))
    busy = BusyBound(1, NO_METRICS).refuse

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = 0
        self.all_in = asyncio.Event()

    async def outcome_of(self, call, state, admitted=None) -> Done:
        self.entered += 1
        if self.entered == 20:
            self.all_in.set()
        await self.release.wait()
        return Done(run="r", result={"n": call.arguments["n"]})


async def asgi_call(app: McpApp, name: str, n: int) -> list[dict[str, Any]]:
    """One POST through the ASGI application; what it sent back."""
    params = {"name": name, "arguments": {"n": n}, "_meta": modern_meta()}
    body = json.dumps({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}).encode()
    headers = {**modern_headers("tools/call", params), "host": "127.0.0.1:8080"}
    scope = {"type": "http", "method": "POST", "path": "/mcp", "client": ("127.0.0.1", 5000 + n),
             "headers": [(k.encode(), v.encode()) for k, v in headers.items()]}
    incoming = [{"type": "http.request", "body": body, "more_body": False}]
    never = asyncio.Event()
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop()
        await never.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


def test_over_http_calls_past_four_times_the_run_limit_plus_16_in_progress_are_busy(tmp_path):
    tool = descriptor(tmp_path)
    settings = settings_for("/mcp", (), None, ("127.0.0.1", 8080))

    async def scenario() -> tuple[list, HeldServer]:
        server = HeldServer()
        app = McpApp(server, {None: Endpoint(Dispatcher(SERVER, [tool]), settings)})  # type: ignore[arg-type]
        held = [asyncio.ensure_future(asgi_call(app, tool.name, n)) for n in range(20)]
        await asyncio.wait_for(server.all_in.wait(), WAIT)
        over = await asgi_call(app, tool.name, 99)
        assert app.in_progress == 20
        server.release.set()
        answered = await asyncio.gather(*held)
        after = await asgi_call(app, tool.name, 100)
        return [over, *answered, after], server

    sent, server = asyncio.run(scenario())
    over, *answered, after = (json.loads(b"".join(m.get("body", b"") for m in s)) for s in sent)
    assert over["result"]["isError"] is True
    assert "more than 20 calls are in progress" in over["result"]["content"][0]["text"]
    assert [a["result"]["structuredContent"]["result"] for a in answered] == [{"n": n} for n in range(20)]
    # The busy call never reached the pipeline; once the others ended, calls go through again.
    assert server.entered == 21
    assert after["result"]["structuredContent"]["result"] == {"n": 100}


# -- the real server -------------------------------------------------------------------------

MARK = "zq81xv"


def files_holding(root: Path, text: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def test_no_request_header_value_reaches_the_log_or_any_file_but_method_and_name(tmp_path, service):
    site = site_for(tmp_path, service, http={"origins": ["https://app.example.com"]})
    marked = {"authorization": f"Bearer tok-{MARK}", "cookie": f"sid={MARK}",
              "user-agent": f"agent-{MARK}", "x-request-id": f"req-{MARK}",
              "mcp-session-id": f"session-{MARK}", "traceparent": f"00-{MARK}-01"}
    with HttpServer(site) as http:
        done = http.modern("tools/call", {"name": "echo", "arguments": {"text": "hello"}}, headers=marked)
        assert done.json()["result"]["structuredContent"] == {"result": {"echo": "hello"}}
        refused = http.modern("tools/list", headers={**marked, "origin": f"https://{MARK}.example"})
        assert refused.status_code == 403
        mismatched = http.modern("tools/list", headers={**marked, "mcp-method": f"x{MARK}"})
        assert mismatched.status_code == 400
        assert http.terminate() == 0
    assert MARK not in site.stderr_path.read_text()
    assert files_holding(site.root, MARK) == []
    # What the log does say of the call: its tool.
    (started,) = http.stderr.events("run_started")
    assert started["tool"] == "echo"


def unfinished(site) -> list[tuple[str, str]]:
    """`staal-supervisor status --json`'s unfinished runs."""
    report = json.loads(subprocess.run(
        [sys.executable, "-m", "staal.supervisor.app.main", "status", str(site.manifest), "--json"],
        capture_output=True, text=True, timeout=60, check=True).stdout)
    return [(r["run"], r["state"]) for r in report["runs"]]


def call_until_killed(http: HttpServer, url: str) -> None:
    try:
        call(http, "lookup", {"url": url})
    except httpx.RemoteProtocolError:
        pass  # the server was killed with the call in flight: no answer


def test_over_http_the_lock_holds_recovery_resumes_a_killed_servers_run_and_status_shows_it(
        tmp_path, service):
    held = service.hold("/slow")
    site = site_for(tmp_path, service)
    first = HttpServer(site).started()
    try:
        thread = threading.Thread(target=call_until_killed, args=(first, service.base + "/slow"),
                                  daemon=True)
        thread.start()
        assert held.arrived.wait(WAIT)
        run = first.stderr.wait_event("run_started", tool="lookup")["run"]
        # A second server on the same journal directory waits for the lock, then refuses.
        second = subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "serve",
                                 str(site.manifest), "--http", "127.0.0.1:0"], cwd=site.root,
                                capture_output=True, text=True, timeout=60, check=False)
        assert second.returncode != 0
        assert "locked by another staal-supervisor" in second.stderr
        first.process.send_signal(signal.SIGKILL)
        first.wait_exit()
    finally:
        first.stop()
    assert read_ledger(site.ledger_path).run(run).state == "unsettled"
    assert unfinished(site) == [(run, "interrupted: resumed at the next start")]
    held.release.set()
    with HttpServer(site) as again:
        again.stderr.wait_event("recovered", run=run, rule="resumed")
        assert read_ledger(site.ledger_path).run(run).state == "settled"
        answer = call(again, "staal_run_status", {"run": run}).json()["result"]
        assert answer["structuredContent"]["status"] == "done", answer
        assert again.terminate() == 0
    assert unfinished(site) == []
    # The GET is a read: resumed, it was sent again (the first died with the server).
    assert len(service.seen("GET", "/slow")) == 2
