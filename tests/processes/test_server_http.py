"""Streamable HTTP against the real server process (`serve --http`), with
raw requests (httpx) for every rule of the transport, exact status and code,
and the same call pipeline, ledger and journals as stdio."""

from __future__ import annotations

import json
import socket
import threading

import httpx
import orjson
import pytest

from staal.protocol.mcp.revisions import LEGACY, MODERN
from staal.supervisor.store.ledger import read_ledger
from tests.helpers.http_servers import ACCEPT, HttpServer, modern_headers
from tests.helpers.servers import WAIT, Site

ECHO = """
def main(text: str) -> dict:
    return {"echo": text}
"""
LOOKUP = """
from staal.caps import HttpGet

def main(url: str, get: HttpGet) -> dict:
    return {"status": get.get(url).status_code}
"""


def site_for(tmp_path, service, **server) -> Site:
    site = Site(tmp_path)
    site.program("echo.py", ECHO)
    site.program("lookup.py", LOOKUP)
    site.write([{"name": "echo", "program": "echo.py"},
                {"name": "lookup", "program": "lookup.py",
                 "grants": {"get": {"cap": "net.http.get", "only": [service.base + "/**"]}}}],
               **server)
    return site


@pytest.fixture
def http(tmp_path, service):
    with HttpServer(site_for(tmp_path, service,
                             http={"origins": ["https://app.example.com"]})) as server:
        yield server


def error(response: httpx.Response) -> tuple[int, int]:
    return response.status_code, response.json()["error"]["code"]


def call(http: HttpServer, name: str, arguments: dict, **meta) -> httpx.Response:
    return http.modern("tools/call", {"name": name, "arguments": arguments}, **meta)


# -- 2026-07-28 --------------------------------------------------------------------------------


def test_a_call_is_answered_as_json_through_the_same_pipeline_as_stdio(http):
    answer = call(http, "echo", {"text": "hi"})
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
    result = answer.json()["result"]
    assert result["structuredContent"] == {"result": {"echo": "hi"}}
    assert result["resultType"] == "complete"
    (entry,) = read_ledger(http.site.ledger_path).runs()
    assert entry.tool == "echo" and entry.state == "settled"
    assert "mcp-session-id" not in answer.headers


@pytest.mark.parametrize("verb", ["GET", "DELETE"])
def test_get_and_delete_are_405_allowing_post(http, verb):
    answer = http.client.request(verb, http.url, headers={"accept": ACCEPT})
    assert answer.status_code == 405 and answer.headers["allow"] == "POST"


def test_accept_without_the_event_stream_is_406(http):
    answer = http.modern("tools/list", headers={"accept": "application/json"})
    assert answer.status_code == 406


def test_a_notification_is_202_with_no_body(http):
    message = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    answer = http.post(message, modern_headers("notifications/initialized", {}))
    assert answer.status_code == 202 and answer.content == b""


@pytest.mark.parametrize("headers", [
    {"mcp-protocol-version": LEGACY}, {"mcp-method": "tools/call"}, {"mcp-method": ""}])
def test_a_mirrored_header_unlike_the_body_is_400_header_mismatch(http, headers):
    assert error(http.modern("tools/list", headers=headers)) == (400, -32020)


def test_missing_mirrored_headers_are_400_header_mismatch(http):
    params = {"name": "echo", "arguments": {"text": "x"},
              "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                        "io.modelcontextprotocol/clientCapabilities": {}}}
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    base = {"content-type": "application/json", "accept": ACCEPT}
    for headers in ({**base, "mcp-method": "tools/call", "mcp-name": "echo"},
                    {**base, "mcp-protocol-version": MODERN, "mcp-name": "echo"},
                    {**base, "mcp-protocol-version": MODERN, "mcp-method": "tools/call"}):
        assert error(http.post(message, headers)) == (400, -32020)
    assert read_ledger(http.site.ledger_path).runs() == ()  # nothing ran


def test_mcp_name_is_compared_trimmed_and_base64_decoded(http):
    answer = http.modern("tools/call", {"name": "echo", "arguments": {"text": "a"}},
                         headers={"mcp-name": "=?base64?ZWNobw==?="})
    assert answer.json()["result"]["structuredContent"] == {"result": {"echo": "a"}}
    params = {"name": "echo", "arguments": {"text": "b"},
              "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                        "io.modelcontextprotocol/clientCapabilities": {}}}
    status, body = http.raw(orjson.dumps({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                                          "params": params}),
                            {**modern_headers("tools/call", params), "mcp-name": "  echo  ",
                             "mcp-method": " tools/call "})
    assert status == 200
    assert json.loads(body)["result"]["structuredContent"] == {"result": {"echo": "b"}}
    assert error(http.modern("tools/call", {"name": "echo", "arguments": {"text": "a"}},
                             headers={"mcp-name": "lookup"})) == (400, -32020)


def test_an_unsupported_version_is_400_32022_with_the_supported_and_requested(http):
    answer = http.modern("tools/list", headers={"mcp-protocol-version": "1999-01-01"},
                         **{"io.modelcontextprotocol/protocolVersion": "1999-01-01"})
    assert error(answer) == (400, -32022)
    data = answer.json()["error"]["data"]
    assert data["requested"] == "1999-01-01" and MODERN in data["supported"]


@pytest.mark.parametrize("method", ["no/such/method", "initialize", "ping"])
def test_an_unknown_method_is_404_32601(http, method):
    assert error(http.modern(method)) == (404, -32601)


def test_a_batch_is_400_32600_and_nothing_in_it_runs(http):
    one = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
           "params": {"name": "echo", "arguments": {"text": "x"}}}
    assert error(http.post([one], modern_headers("tools/call", {"name": "echo"}))) == (400, -32600)
    assert read_ledger(http.site.ledger_path).runs() == ()


def test_a_body_over_4_mib_is_413_declared_or_not(http):
    big = b'{"pad": "' + b"x" * (4 * 1024 * 1024 + 10) + b'"}'
    headers = modern_headers("tools/list", {})
    assert http.post(big, headers).status_code == 413

    def chunks():
        for start in range(0, len(big), 65536):
            yield big[start:start + 65536]

    assert http.client.post(http.url, content=chunks(), headers=headers).status_code == 413


def test_nesting_past_64_levels_is_400_32600(http):
    deep = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"a": ' + \
        b"[" * 70 + b"]" * 70 + b"}}"
    assert error(http.post(deep, modern_headers("tools/list", {}))) == (400, -32600)


def test_session_and_last_event_id_headers_are_ignored(http):
    answer = http.modern("tools/list", headers={"mcp-session-id": "s1", "last-event-id": "4"})
    assert answer.status_code == 200 and "mcp-session-id" not in answer.headers


def test_a_call_asking_for_progress_is_an_event_stream_progress_naming_the_run_then_result(http):
    with http.client.stream("POST", http.url, content=orjson.dumps({
            "jsonrpc": "2.0", "id": 5, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "p"},
                       "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                                 "io.modelcontextprotocol/clientCapabilities": {},
                                 "progressToken": "t1"}}}),
            headers=modern_headers("tools/call", {"name": "echo"})) as answer:
        assert answer.headers["content-type"] == "text/event-stream"
        assert answer.headers["x-accel-buffering"] == "no"
        events = [json.loads(line[len("data: "):]) for line in answer.iter_lines()
                  if line.startswith("data: ")]
    (entry,) = read_ledger(http.site.ledger_path).runs()
    progress, result = events
    assert progress["method"] == "notifications/progress"
    assert progress["params"]["progressToken"] == "t1" and entry.run in progress["params"]["message"]
    assert result["id"] == 5 and result["result"]["structuredContent"] == {"result": {"echo": "p"}}


# -- 2025-11-25 ----------------------------------------------------------------------------------


def test_2025_11_25_initialize_mints_no_session_and_the_header_selects_the_revision(http):
    answer = http.legacy("initialize", {"protocolVersion": LEGACY, "capabilities": {},
                                        "clientInfo": {"name": "t", "version": "1"}})
    assert answer.status_code == 200 and "mcp-session-id" not in answer.headers
    assert answer.json()["result"]["protocolVersion"] == LEGACY
    listed = http.legacy("tools/list")
    assert listed.status_code == 200 and "resultType" not in listed.json()["result"]
    echoed = http.legacy("tools/call", {"name": "echo", "arguments": {"text": "old"}})
    assert echoed.json()["result"]["structuredContent"] == {"result": {"echo": "old"}}
    assert http.client.get(http.url, headers={"accept": "text/event-stream"}).status_code == 405


def test_2025_11_25_a_call_cancelled_after_its_run_started_runs_to_its_end_unanswered(
        http, service):
    held = service.hold("/slow")
    outcome: dict = {}

    def slow_call() -> None:
        outcome["answer"] = http.legacy("tools/call", {"name": "lookup",
                                                       "arguments": {"url": service.base + "/slow"}})

    thread = threading.Thread(target=slow_call)
    thread.start()
    assert held.arrived.wait(WAIT)
    request_id = http._ids
    cancelled = http.legacy("notifications/cancelled", {"requestId": request_id},
                            notification=True)
    assert cancelled.status_code == 202
    held.release.set()
    thread.join(WAIT)
    # The run had started: it carried on to its end, and no answer was sent for it.
    assert outcome["answer"].status_code == 202 and outcome["answer"].content == b""
    (entry,) = read_ledger(http.site.ledger_path).runs()
    assert entry.state == "settled" and entry.outcome == "done"


# -- security ------------------------------------------------------------------------------------


def test_an_unlisted_origin_is_403_and_nothing_runs(http):
    answer = http.modern("tools/call", {"name": "echo", "arguments": {"text": "x"}},
                         headers={"origin": "http://evil.example.com"})
    assert answer.status_code == 403
    assert read_ledger(http.site.ledger_path).runs() == ()


def test_a_listed_origin_and_the_servers_own_are_served(http):
    port = http.url.split(":")[2].split("/")[0]
    for origin in ("https://app.example.com", f"http://127.0.0.1:{port}",
                   f"http://localhost:{port}"):
        assert http.modern("tools/list", headers={"origin": origin}).status_code == 200


def test_a_foreign_host_is_refused_against_dns_rebinding(http):
    answer = http.modern("tools/list", headers={"host": "evil.example.com"})
    assert answer.status_code == 421


def test_a_head_over_64_kib_is_431(http):
    host, port = http.url.split("//")[1].split("/")[0].split(":")
    with socket.create_connection((host, int(port)), timeout=WAIT) as sock:
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 70000 + b"\r\n\r\n")
        first = sock.recv(100)
    assert first.startswith(b"HTTP/1.1 431")


def test_listening_beyond_loopback_without_auth_is_refused_at_start(tmp_path, service):
    site = site_for(tmp_path, service)
    server = HttpServer(site, address="0.0.0.0:0")
    try:
        assert server.wait_exit() == 2
        # The process has exited; its last line may still be in the pipe.
        failed = server.stderr.wait_event("startup_failed")
        assert "--insecure-no-auth" in failed["message"]
    finally:
        server.stop()
    (tmp_path / "b").mkdir()
    with HttpServer(site_for(tmp_path / "b", service), address="0.0.0.0:0",
                    args=("--insecure-no-auth",)) as open_server:
        port = open_server.url.rsplit(":", 1)[1].split("/")[0]
        answer = open_server.client.post(
            f"http://127.0.0.1:{port}/mcp", content=orjson.dumps({
                "jsonrpc": "2.0", "id": 1, "method": "tools/list",
                "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                                     "io.modelcontextprotocol/clientCapabilities": {}}}}),
            headers=modern_headers("tools/list", {}))
        assert answer.status_code == 200


# -- lifecycle ------------------------------------------------------------------------------------


def test_sigterm_answers_the_call_in_flight_then_exits(tmp_path, service):
    held = service.hold("/slow")
    server = HttpServer(site_for(tmp_path, service)).started()
    try:
        outcome: dict = {}
        thread = threading.Thread(target=lambda: outcome.update(answer=call(
            server, "lookup", {"url": service.base + "/slow"})))
        thread.start()
        assert held.arrived.wait(WAIT)
        server.process.send_signal(__import__("signal").SIGTERM)
        server.stderr.wait_event("terminated")
        held.release.set()
        thread.join(WAIT)
        assert server.wait_exit() == 0
        answer = outcome["answer"]
        assert answer.json()["result"]["structuredContent"] == {"result": {"status": 404}}
        assert all(e.state == "settled" for e in read_ledger(server.site.ledger_path).runs())
    finally:
        server.stop()


# -- bounds on what a slow client can hold (in this process, the bounds made short) ----------


class Transport:
    """What uvicorn's protocol writes to, and whether it closed it."""

    def __init__(self) -> None:
        import asyncio

        self.written = b""
        self.closed = asyncio.Event()

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed.set()

    def is_closing(self) -> bool:
        return self.closed.is_set()

    def get_extra_info(self, name: str, default=None):
        return {"peername": ("127.0.0.1", 5555), "sockname": ("127.0.0.1", 8080)}.get(name, default)

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def set_protocol(self, protocol) -> None: ...


def test_a_head_not_whole_in_time_is_408_and_its_connection_closed(monkeypatch):
    import asyncio

    import uvicorn
    from uvicorn.server import ServerState

    from staal.supervisor.transport import http_connections
    monkeypatch.setattr(http_connections, "HEAD_TIMEOUT_S", 0.05)
    reached: list = []

    async def app(scope, receive, send):
        reached.append(scope)

    async def scenario() -> Transport:
        protocol_class = http_connections.gated_protocol(8)
        config = uvicorn.Config(app, http=protocol_class, lifespan="off", log_config=None)
        config.load()
        protocol = protocol_class(config=config, server_state=ServerState(),
                                  app_state={}, _loop=asyncio.get_running_loop())
        transport = Transport()
        protocol.connection_made(transport)
        protocol.data_received(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        await asyncio.wait_for(transport.closed.wait(), WAIT)
        protocol.connection_lost(None)
        return transport

    transport = asyncio.run(scenario())
    assert transport.written.startswith(b"HTTP/1.1 408 Request Timeout")
    assert reached == []  # the application never saw it


def test_a_body_not_whole_in_time_is_408(monkeypatch):
    import asyncio

    from staal.supervisor.transport import http_exchange
    monkeypatch.setattr(http_exchange, "BODY_TIMEOUT_S", 0.05)

    async def scenario():
        never = asyncio.Event()
        messages = [{"type": "http.request", "body": b'{"json', "more_body": True}]

        async def receive():
            if messages:
                return messages.pop()
            await never.wait()

        return await http_exchange.read_body(receive, 1000)

    answer = asyncio.run(scenario())
    assert answer.status == 408


def test_closing_the_event_stream_is_the_cancellation_and_a_started_run_still_ends(http, service):
    held = service.hold("/slow")
    body = orjson.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "lookup", "arguments": {"url": service.base + "/slow"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                  "io.modelcontextprotocol/clientCapabilities": {}, "progressToken": "c"}}})
    with http.client.stream("POST", http.url, content=body,
                            headers=modern_headers("tools/call", {"name": "lookup"})) as answer:
        lines = answer.iter_lines()
        started = next(line for line in lines if line.startswith("data: "))
        assert "started" in started
        assert held.arrived.wait(WAIT)
    # The client closed its request while the run was at the service: the run
    # is not cut in half; it carries on to its end and is settled.
    run = http.stderr.wait_event("run_started", tool="lookup")["run"]
    held.release.set()
    ended = http.stderr.wait_event("run_ended", run=run)
    assert ended["outcome"] == "done"
    assert read_ledger(http.site.ledger_path).run(run).state == "settled"
