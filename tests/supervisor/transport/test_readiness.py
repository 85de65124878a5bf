"""The readiness decision (issue 24 item 5): an instance is ready only while
serving with its lease renewing (supervisor/transport/readiness.py), and the check
at `GET /ready` answers that one bit and nothing more (protocol/http/readiness.py),
before any credential is asked for (supervisor/transport/http_serving.py's app,
driven here in process with a guard that refuses every request and counts
what reaches it)."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx
import pytest

from staal.protocol.http.endpoint import Endpoint, HttpSettings
from staal.protocol.http.messages import Head, HttpResponse
from staal.protocol.http.readiness import is_readiness_check, not_serving_answer, readiness_answer
from staal.protocol.mcp.dispatch import Dispatcher
from staal.protocol.mcp.revisions import ServerInfo
from staal.runtime.transitions import IllegalTransition
from staal.supervisor.transport.http_serving import McpApp
from staal.supervisor.transport.not_ready import answering_not_ready
from staal.supervisor.transport.readiness import Readiness, ReadyState
from tests.helpers.manifests import broken, write_programs
from tests.helpers.servers import WAIT


class Logged:
    """A log that keeps what it was told."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def __call__(self, event: str, level: str = "info", **fields: Any) -> None:
        self.records.append({"event": event, "level": level, **fields})


def state_after(*events: str) -> ReadyState:
    state = ReadyState(Logged())
    for event in events:
        state.note(event)
    return state


@pytest.mark.parametrize(("events", "ready"), [
    ((), False),  # starting
    (("started",), True),
    (("started", "renewed"), True),
    (("started", "store_failed"), False),
    (("started", "store_failed", "store_failed"), False),
    (("started", "store_failed", "renewed"), True),
    (("started", "stopping"), False),
    (("started", "stopping", "renewed"), False),
    (("started", "store_failed", "fenced"), False),
    (("started", "fenced", "stopping", "renewed"), False),
    (("stopping",), False),  # SIGTERM during start
])
def test_an_instance_is_ready_only_while_serving_with_its_store_in_reach(events, ready):
    assert state_after(*events).ready is ready


def test_draining_and_fenced_are_for_good_whatever_a_renewal_says():
    assert state_after("started", "stopping", "renewed").state is Readiness.DRAINING
    assert state_after("started", "stopping", "fenced", "renewed").state is Readiness.FENCED
    assert state_after("started", "fenced", "stopping").state is Readiness.FENCED


def test_renewals_while_starting_leave_the_instance_not_ready_and_a_lost_lease_fences_it_for_good():
    # The lease is renewed from its registration on, through start-up.
    assert state_after("renewed", "store_failed", "renewed").state is Readiness.STARTING
    assert state_after("renewed", "started").state is Readiness.SERVING
    assert state_after("fenced", "started").state is Readiness.FENCED
    with pytest.raises(IllegalTransition, match=r"^started is not allowed in state serving$"):
        state_after("started", "started")


def test_each_change_is_logged_once_and_an_unreachable_store_as_a_warning():
    log = Logged()
    state = ReadyState(log)
    for event in ("started", "renewed", "store_failed", "store_failed", "renewed", "stopping"):
        state.note(event)
    assert [(r["state"], r["ready"], r["level"]) for r in log.records] == [
        ("serving", True, "info"), ("store_unreachable", False, "warning"),
        ("serving", True, "info"), ("draining", False, "info")]
    assert {r["event"] for r in log.records} == {"readiness"}


def head(method: str = "GET", path: str = "/ready", **headers: str) -> Head:
    return Head.of(method, path, headers.items())


def test_the_check_answers_200_ready_or_503_not_ready_and_nothing_else():
    ready = readiness_answer(head(), True)
    assert ready == HttpResponse(200, (("content-type", "text/plain; charset=utf-8"),
                                       ("cache-control", "no-store"), ("content-length", "6")),
                                 b"ready\n")
    # The same answer for every reason: it reveals no state but not ready.
    answers = {readiness_answer(head(), state_after(*events).ready)
               for events in ((), ("started", "store_failed"), ("started", "stopping"),
                              ("started", "fenced"))}
    (not_ready,) = answers
    assert not_ready.status == 503 and not_ready.body == b"not ready\n"
    assert ("cache-control", "no-store") in not_ready.headers


def test_the_check_takes_get_and_head_and_no_other_method_or_path():
    assert readiness_answer(head("HEAD"), True).status == 200
    refused = readiness_answer(head("POST"), True)
    assert refused.status == 405 and ("allow", "GET, HEAD") in refused.headers
    assert is_readiness_check(head()) and is_readiness_check(head("POST"))
    assert not any(is_readiness_check(head(path=p)) for p in ("/mcp", "/ready/", "/mcp/ready", "/"))


def test_a_manifest_putting_the_mcp_endpoint_at_the_readiness_path_is_refused(tmp_path):
    write_programs(tmp_path)
    problems = broken(tmp_path, lambda d: d["server"].__setitem__("http", {"path": "/ready"}))
    assert problems == ['server.http.path: "/ready" is the load balancers\' readiness check '
                        '(GET /ready); the MCP endpoint needs another path (such as "/mcp")']


# -- in the application, before the guard -------------------------------------------


class RefusingGuard:
    """Refuses every request 401 and counts those that reached it."""

    def __init__(self) -> None:
        self.checked = 0

    def metadata(self, head: Head) -> None:
        return None

    async def check(self, head: Head) -> HttpResponse:
        self.checked += 1
        return HttpResponse(401, (("www-authenticate", 'Bearer error="invalid_token"'),))


class Instance:
    """What the application reads of a server for the check."""

    def __init__(self, readiness: ReadyState) -> None:
        self.readiness = readiness


@pytest.mark.parametrize(("events", "status", "body"), [
    (("started",), 200, "ready\n"),
    (("started", "stopping"), 503, "not ready\n"),
    (("started", "fenced"), 503, "not ready\n"),
    (("started", "store_failed"), 503, "not ready\n"),
    ((), 503, "not ready\n"),
])
def test_the_check_is_answered_without_a_token_while_every_mcp_request_meets_the_guard(
        events, status, body):
    guard = RefusingGuard()
    endpoint = Endpoint(Dispatcher(ServerInfo("t", "0"), []),
                        HttpSettings(hosts=frozenset({"staal.test"})))
    app = McpApp(Instance(state_after(*events)), {None: endpoint}, guard)  # type: ignore[arg-type]

    async def ask() -> tuple[httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://staal.test") as client:
            checked = await client.get("/ready", headers={"host": "elsewhere.example"})
            mcp = await client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                    headers={"accept": "application/json, text/event-stream",
                                             "mcp-protocol-version": "2025-11-25"})
        return checked, mcp

    checked, mcp = asyncio.run(ask())
    assert (checked.status_code, checked.text) == (status, body)
    assert checked.headers["cache-control"] == "no-store"
    assert mcp.status_code == 401 and guard.checked == 1  # only the MCP request met the guard


def test_while_not_serving_the_check_is_503_not_ready_and_anything_else_503_retry_after():
    ready = not_serving_answer(b"GET /ready?probe=1 HTTP/1.1\r\nHost: x\r\n\r\n")
    headed = not_serving_answer(b"HEAD /ready HTTP/1.1\r\n\r\n")
    posted = not_serving_answer(b"POST /ready HTTP/1.1\r\n\r\n")
    mcp = not_serving_answer(b"POST /mcp HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
    assert ready is not None and headed is not None and posted is not None and mcp is not None
    assert ready.startswith(b"HTTP/1.1 503 ") and ready.endswith(b"\r\n\r\nnot ready\n")
    assert b"cache-control: no-store\r\n" in ready and b"connection: close\r\n" in ready
    assert b"retry-after: 1\r\n" in ready
    assert headed.startswith(b"HTTP/1.1 503 ") and headed.endswith(b"\r\n\r\n")
    assert posted.startswith(b"HTTP/1.1 405 ") and b"allow: GET, HEAD\r\n" in posted
    assert mcp.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1\r\n" in mcp


def test_while_not_serving_a_head_is_answered_once_whole_or_too_long():
    assert not_serving_answer(b"GET /ready HTTP/1.1\r\nHost: x\r\n") is None
    too_long = not_serving_answer(b"GET /" + b"x" * 9000)
    unreadable = not_serving_answer(b"\x00\xff garbage\r\n\r\n")
    assert too_long is not None and too_long.startswith(b"HTTP/1.1 503 ")
    assert unreadable is not None and unreadable.startswith(b"HTTP/1.1 503 ")


def test_while_not_serving_a_connection_past_the_bound_is_closed_unanswered_until_one_held_ends():
    async def scenario() -> tuple[bytes, bytes, bytes]:
        with socket.create_server(("127.0.0.1", 0)) as sock:
            address = sock.getsockname()[:2]
            async with answering_not_ready(sock, most=2):
                held = [await asyncio.open_connection(*address) for _ in range(2)]
                past_reader, past_writer = await asyncio.open_connection(*address)
                past_writer.write(b"GET /ready HTTP/1.1\r\n\r\n")
                try:  # closed, nothing said (reset, if it closed with the request unread)
                    past = await asyncio.wait_for(past_reader.read(), WAIT)
                except ConnectionResetError:
                    past = b""
                first_reader, first_writer = held[0]
                first_writer.write(b"GET /ready HTTP/1.1\r\n\r\n")
                first = await asyncio.wait_for(first_reader.read(), WAIT)
                # The answered one is no longer held: the next connection is answered.
                next_reader, next_writer = await asyncio.open_connection(*address)
                next_writer.write(b"GET /ready HTTP/1.1\r\n\r\n")
                after = await asyncio.wait_for(next_reader.read(), WAIT)
                for writer in (past_writer, first_writer, next_writer, held[1][1]):
                    writer.close()
        return past, first, after

    past, first, after = asyncio.run(scenario())
    assert past == b""
    assert first.startswith(b"HTTP/1.1 503 ") and first.endswith(b"not ready\n")
    assert after.startswith(b"HTTP/1.1 503 ") and after.endswith(b"not ready\n")
