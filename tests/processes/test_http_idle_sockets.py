"""Connections without a token cannot starve callers (issue 24, item 4):
300 sockets from 127.0.0.1 that send nothing or dribble an endless head or
body, re-opened as the server closes them, while an authenticated caller calls a
tool again and again; every call is answered with its result."""

from __future__ import annotations

import asyncio
import resource

import uvicorn
from uvicorn.server import ServerState

from staal.supervisor.store.ledger import read_ledger
from staal.supervisor.transport import http_connections
from tests.helpers.http_servers import HttpServer
from tests.helpers.idle_sockets import IdleSockets
from tests.helpers.servers import WAIT
from tests.processes.test_auth_http import auth_site, bearer, lookup
from tests.processes.test_server_http import Transport

ATTACKERS = 300


def enough_descriptors() -> None:
    """In the server's process: room for the attack's sockets whatever the
    soft limit the test runs under (a descriptor per connection)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 8192 if hard == resource.RLIM_INFINITY else min(hard, 8192)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))


def test_idle_and_dribbling_sockets_without_a_token_do_not_starve_authenticated_calls(
        tmp_path, service, authorization):
    site = auth_site(tmp_path, service, authorization.issuer)
    with HttpServer(site, preexec=enough_descriptors) as http:
        token = authorization.token("ops", audience=http.url)
        port = int(http.base.rsplit(":", 1)[1])
        answers = []
        with IdleSockets(port, ATTACKERS, bound_s=WAIT * 4) as attack:
            assert attack.all_held.wait(WAIT), f"{attack.held} of {ATTACKERS} connected"
            # Calls until the server has closed (and the attacker re-opened)
            # as many connections as it holds, a body dribbler's among them:
            # the flood held throughout.
            while attack.reopened < ATTACKERS or attack.closed_with["401"] == 0:
                assert attack.error is None, attack.error
                assert not attack.over, f"the attack ended first: {dict(attack.closed_with)}"
                answer = lookup(http, service, "modern", bearer(token))
                assert answer.status_code == 200, (answer.status_code, answer.text[:300])
                answers.append(answer.json()["result"])
        assert attack.error is None, attack.error
    print(f"\n{len(answers)} calls answered while the attacker opened {attack.opens} "
          f"connections; the server closed them with {dict(attack.closed_with)}")
    assert len(answers) >= 1
    assert all(a["isError"] is False and a["structuredContent"] == {"result": {"status": 200}}
               for a in answers)
    # Each call ran once, and nothing else ran.
    assert len(service.requests) == len(answers)
    runs = read_ledger(site.ledger_path).runs()
    assert len(runs) == len(answers)
    assert {(r.state, r.outcome) for r in runs} == {("settled", "done")}
    # The server timed the attacker's connections out: a head never whole
    # (408), a body never whole after its refusal (401); none was refused
    # for want of room.
    assert "503" not in attack.closed_with, attack.closed_with
    assert set(attack.closed_with) <= {"408", "401", ""}, attack.closed_with


# -- the gate, in this process (the bounds made small) ----------------------------------------


class Peer(Transport):
    """A connection's transport from `address`; `wrote`: the server wrote to it."""

    def __init__(self, address: str) -> None:
        super().__init__()
        self.address = address
        self.wrote = asyncio.Event()

    def write(self, data: bytes) -> None:
        super().write(data)
        self.wrote.set()

    def get_extra_info(self, name: str, default=None):
        return {"peername": (self.address, 5555), "sockname": ("127.0.0.1", 8080)}.get(name, default)


class Connections:
    """One server's protocol objects, made as uvicorn makes them, and the
    application's requests (each held until `release` is set)."""

    def __init__(self, max_waiting: int, max_requests: int) -> None:
        self.protocol_class = http_connections.gated(
            http_connections.ConnectionGate(max_waiting, max_requests))
        self.reached: list[dict] = []
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()
        self.config = uvicorn.Config(self.app, http=self.protocol_class, lifespan="off",
                                     log_config=None, interface="asgi3",
                                     timeout_keep_alive=int(WAIT))
        self.config.load()
        self.state = ServerState()

    async def app(self, scope, receive, send) -> None:
        self.reached.append(scope)
        self.arrived.set()
        await self.release.wait()
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    def open(self, address: str = "127.0.0.1") -> tuple[Peer, http_connections.BoundedHttpTools]:
        protocol = self.protocol_class(config=self.config, server_state=self.state, app_state={},
                                       _loop=asyncio.get_running_loop())
        peer = Peer(address)
        protocol.connection_made(peer)
        return peer, protocol


WHOLE_HEAD = b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def test_a_connection_that_sends_nothing_is_408_after_the_first_byte_bound(monkeypatch):
    monkeypatch.setattr(http_connections, "FIRST_BYTE_S", 0.05)

    async def scenario() -> tuple[Peer, Peer]:
        connections = Connections(max_waiting=8, max_requests=8)
        silent, _ = connections.open()
        talking, protocol = connections.open()
        protocol.data_received(b"P")
        await asyncio.wait_for(silent.closed.wait(), WAIT)
        return silent, talking

    silent, talking = asyncio.run(scenario())
    assert silent.written.startswith(b"HTTP/1.1 408 Request Timeout")
    # A head begun is bound by the head's time (10 s) instead.
    assert not talking.closed.is_set() and talking.written == b""


def test_past_the_bound_on_waiting_connections_the_oldest_of_the_busiest_address_is_closed():
    async def scenario() -> tuple[dict[str, Peer], set[str], list[dict]]:
        connections = Connections(max_waiting=2, max_requests=8)
        peers = {"a1": connections.open("10.0.0.1")[0]}
        peers["in request"], protocol = connections.open()
        protocol.data_received(WHOLE_HEAD)  # no longer waiting: in the application
        await asyncio.wait_for(connections.arrived.wait(), WAIT)
        peers["a2"] = connections.open("10.0.0.1")[0]
        peers["b1"] = connections.open("10.0.0.2")[0]  # a third waiting: a1 goes
        first = {name for name, peer in peers.items() if peer.closed.is_set()}
        peers["c1"] = connections.open("10.0.0.3")[0]  # one each: the oldest address's goes
        then = {name for name, peer in peers.items() if peer.closed.is_set()}
        connections.release.set()
        return peers, first, then

    peers, first, then = asyncio.run(scenario())
    assert first == {"a1"}
    # The request in progress was never a candidate.
    assert then == {"a1", "a2"}
    for name in ("a1", "a2"):
        assert peers[name].written.startswith(b"HTTP/1.1 503 Service Unavailable")


def test_requests_in_progress_are_bounded_and_waiting_connections_do_not_count():
    async def scenario() -> tuple[list[dict], Peer, list[Peer]]:
        connections = Connections(max_waiting=64, max_requests=2)
        idle = [connections.open()[0] for _ in range(10)]
        requests = [connections.open() for _ in range(3)]
        for _, protocol in requests:
            protocol.data_received(WHOLE_HEAD)
        third = requests[2][0]
        await asyncio.wait_for(third.wrote.wait(), WAIT)
        reached = list(connections.reached)
        connections.release.set()
        return reached, third, idle

    reached, third, idle = asyncio.run(scenario())
    # Ten idle connections held, and two requests reached the application;
    # the third, past the bound on requests in progress, was answered 503.
    assert len(reached) == 2
    assert third.written.startswith(b"HTTP/1.1 503 Service Unavailable")
    assert not any(peer.closed.is_set() for peer in idle)


def test_a_body_still_coming_after_its_answer_is_read_for_a_bound_then_its_connection_closed(
        monkeypatch):
    monkeypatch.setattr(http_connections, "LINGER_S", 0.05)
    head = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n"

    async def scenario() -> tuple[Peer, Peer]:
        connections = Connections(max_waiting=8, max_requests=8)
        connections.release.set()  # every request answered at once, its body unread
        endless, protocol = connections.open()
        protocol.data_received(head + b"x" * 10)
        whole, other = connections.open()
        other.data_received(head + b"x" * 10)
        await asyncio.wait_for(whole.wrote.wait(), WAIT)
        other.data_received(b"x" * 90)  # the rest: it may carry another request
        await asyncio.wait_for(endless.closed.wait(), WAIT)
        return endless, whole

    endless, whole = asyncio.run(scenario())
    assert endless.written.startswith(b"HTTP/1.1 204 ")
    assert whole.written.startswith(b"HTTP/1.1 204 ") and not whole.closed.is_set()
