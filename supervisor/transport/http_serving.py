"""Serving over Streamable HTTP (issue 13): uvicorn (uvloop, httptools) in
the supervisor's own event loop, and a thin ASGI application in front of
the sans-I/O endpoint (protocol/http/endpoint.py), which decides every status,
header and body. A tool call goes through the same pipeline as over stdio
(`Server.outcome_of`); only how its answer is written differs.

What a request may hold is bounded before anything runs: the head in size
and time, and a connection waiting for one apart from requests in progress
(`http_connections.py`); the body in size (413) and read time (408);
calls in progress as on stdio (`Server.busy`). A 2026-07-28 call that asked
for progress is answered with an event stream: the progress message naming
its run, keep-alive comments while it runs, then the result; closing that
stream is the client's cancellation (before the run starts nothing is
reserved or run; after, the run carries on to its end). A 2025-11-25 client
cancels with notifications/cancelled instead, matched to its own calls by
its address and request id; a disconnect is not a cancellation there.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import uvicorn

from staal.manifest.addresses import EVERY_INTERFACE, is_loopback, listening_url, split_host_port
from staal.protocol.http.auth import without_headers
from staal.protocol.http.call import HttpCall
from staal.protocol.http.endpoint import AskTask, Call, Cancel, Endpoint, HttpSettings, Read
from staal.protocol.http.messages import Head, HttpResponse
from staal.protocol.http.readiness import is_readiness_check, readiness_answer
from staal.protocol.mcp.dispatch import Dispatcher
from staal.protocol.mcp.jsonrpc import INTERNAL_ERROR, RequestId, RpcError
from staal.protocol.mcp.results import CallOutcome
from staal.protocol.mcp.revisions import LEGACY
from staal.protocol.mcp.tools import ToolDescriptor
from staal.protocol.subscriptions.listen import Listen
from staal.supervisor.auth.callers import LOCAL, Admitted
from staal.supervisor.auth.guard import Guard
from staal.supervisor.auth.principal import Authenticator, Lifecycle
from staal.supervisor.calls.pipeline import CallState
from staal.supervisor.errors import SupervisorError
from staal.supervisor.transport.application import Application, Transport, prompt_catalogue
from staal.supervisor.transport.http_connections import gated_protocol
from staal.supervisor.transport.http_exchange import (
    CallExchange,
    Receive,
    Send,
    read_body,
    respond,
)
from staal.supervisor.transport.listeners import InLoopUvicorn, bind
from staal.supervisor.transport.listening import listen_over_http
from staal.supervisor.transport.not_ready import answering_not_ready


class HttpRefused(SupervisorError):
    """`--http` asked for something the server will not do."""

    kind = "http"


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Address:
        """HOST:PORT, or [IPv6]:PORT; port 0 picks a free one."""
        address = split_host_port(text)
        if address is None:
            raise HttpRefused(f"--http {text!r}: expected HOST:PORT, such as 127.0.0.1:8080")
        return cls(*address)

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)


def settings_for(path: str, origins: tuple[str, ...], public_url: str | None,
                 bound: tuple[str, int]) -> HttpSettings:
    """What the endpoint accepts: the Host values this server answers for
    (its listening address, its loopback names, the public URL's host) and
    the Origins allowed (those listed, and this server's own)."""
    host, port = bound[0], bound[1]
    names = {host}
    if Address(host, port).loopback:
        names |= {"localhost", "127.0.0.1", "[::1]"}
    hosts = {_with_port(name, port) for name in names}
    own = {f"http://{h}" for h in hosts}
    if host in EVERY_INTERFACE:
        # Every interface: the names clients use are not known here, so only
        # the public URL's is checked (none without one).
        hosts = set()
    if public_url is not None:
        public = urlsplit(public_url)
        hosts.add(public.netloc.lower())
        own.add(f"{public.scheme}://{public.netloc}".lower())
    return HttpSettings(path=path, hosts=frozenset(hosts),
                        origins=frozenset({o.lower().rstrip("/") for o in origins} | own))


def _with_port(name: str, port: int) -> str:
    name = f"[{name}]" if ":" in name and not name.startswith("[") else name
    return name if port == 80 else f"{name}:{port}"


# -- the ASGI application --------------------------------------------------------------


LegacyKey = tuple[str, str | None, RequestId]


class McpApp:
    """`endpoints`: one per caller profile (by name; None: every tool), each
    listing and calling only that profile's tools; `guard`: the `auth`
    check every request passes first (None: no `auth` section)."""

    def __init__(self, server: Application, endpoints: dict[str | None, Endpoint],
                 guard: Guard | None = None) -> None:
        self.server = server
        self.endpoints = endpoints
        self.endpoint = next(iter(endpoints.values()))
        self.guard = guard
        self.in_progress = 0
        # Listen streams open: each holds a request in progress for as long
        # as it is open, so they are bounded apart, to a quarter of those.
        self.listening = 0
        # 2025-11-25 calls in flight, for notifications/cancelled: by the
        # client's address, its caller identity and the call's id (no
        # session tells clients apart).
        self.legacy: dict[LegacyKey, CallState] = {}
        # The runs of calls answered as tasks, still going: waited for at the end.
        self.detached: set[asyncio.Future[CallOutcome | None]] = set()

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        head = Head.of(scope["method"], scope["path"],
                       ((k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]))
        if is_readiness_check(head):  # a balancer's: before any credential or Host is asked for
            await respond(send, readiness_answer(head, self.server.readiness.ready))
            return
        passed = await self.admit(head)
        if isinstance(passed, HttpResponse):
            await respond(send, passed)
            return
        head, admitted = passed
        endpoint = self.endpoints[admitted.profile_name]
        body = await read_body(receive, self.endpoint.settings.max_body)
        if body is None:
            return  # the client went away before its message was whole
        if isinstance(body, HttpResponse):
            await respond(send, body)
            return
        reply = endpoint.message(head, body)
        client = (scope.get("client") or ("?", 0))[0]
        if isinstance(reply, Cancel):
            state = self.legacy.get((client, admitted.identity, reply.request_id))
            if state is not None:
                state.cancelled = True
            await respond(send, reply.response)
        elif isinstance(reply, Call):
            await self.call(reply.http, (client, admitted.identity, reply.http.call.request_id),
                            admitted, receive, send)
        elif isinstance(reply, Read):
            await self.read(reply, endpoint, admitted, send)
        elif isinstance(reply, AskTask):  # tasks/*: the caller's own tasks only
            answer = await self.server.answer_task(reply.request, admitted)
            await respond(send, endpoint.task_response(reply.request, answer))
        elif isinstance(reply, Listen):  # an event stream; the caller's own tasks only
            await self.listen(reply, endpoint, admitted, receive, send)
        else:
            await respond(send, reply)

    async def admit(self, head: Head) -> tuple[Head, Admitted] | HttpResponse:
        """The head the MCP layer sees (no credential header) and who sent
        it, or the response that ends the request: the resource's metadata,
        a refusal by the head alone, or a 401 or 403 of the guard."""
        if self.guard is not None:
            metadata = self.guard.metadata(head)
            if metadata is not None:
                return metadata
        refused = self.endpoint.head(head)
        if refused is not None:
            return refused
        if self.guard is None:
            return without_headers(head, ()), LOCAL
        passed = await self.guard.check(head)
        if isinstance(passed, HttpResponse):
            return passed
        return passed.head, passed.admitted

    async def call(self, http: HttpCall, key: LegacyKey, admitted: Admitted, receive: Receive,
                   send: Send) -> None:
        busy = self.server.busy(self.in_progress, http.call.name)
        if busy is not None:
            answer = http.answer(busy)
            if isinstance(answer, HttpResponse):  # a call not yet streamed is answered as JSON
                await respond(send, answer)
            return
        self.in_progress += 1
        try:
            with self._registered(http, key) as state:
                await CallExchange(self.server, http, state, admitted, receive, send,
                                   self.detached).run()
        finally:
            self.in_progress -= 1

    async def listen(self, listen: Listen, endpoint: Endpoint, admitted: Admitted,
                     receive: Receive, send: Send) -> None:
        if self.listening >= requests_bound(self.server.manifest.server.max_concurrent_runs) // 4:
            await respond(send, endpoint.listen_refused(listen, RpcError(
                INTERNAL_ERROR, f"{self.listening} listen streams are open, the most this server "
                "keeps open at once: close one, or poll tasks/get")))
            return
        self.listening += 1
        try:
            await listen_over_http(self.server, listen, admitted, receive, send)
        finally:
            self.listening -= 1

    async def read(self, reply: Read, endpoint: Endpoint, admitted: Admitted, send: Send) -> None:
        """A resources/read, within the bound on calls in progress (it may be a run)."""
        busy = self.server.busy(self.in_progress)
        if busy is not None:
            await respond(send, endpoint.read_response(reply.read,
                                                       RpcError(INTERNAL_ERROR, busy.message)))
            return
        self.in_progress += 1
        try:
            answer = await self.server.read_resource(reply.read, admitted, CallState())
            await respond(send, endpoint.read_response(reply.read, answer))
        finally:
            self.in_progress -= 1

    @contextlib.contextmanager
    def _registered(self, http: HttpCall, key: LegacyKey) -> Iterator[CallState]:
        state = CallState()
        legacy = http.call.revision == LEGACY and key not in self.legacy
        if legacy:
            self.legacy[key] = state
        try:
            yield state
        finally:
            if legacy:
                del self.legacy[key]


def requests_bound(max_runs: int) -> int:
    """How many requests may be in progress at once (past it: 503)."""
    return 4 * (4 * max_runs + 16)


def listen(address: Address) -> socket.socket:
    try:
        return bind(address.host, address.port)
    except OSError as exc:
        raise HttpRefused(f"--http {address.host}:{address.port}: cannot listen there: "
                          f"{exc.strerror or exc}") from None


def endpoints_for(server: Application, settings: HttpSettings) -> dict[str | None, Endpoint]:
    """One endpoint per caller profile, listing only the profile's tools and
    prompts (one outside it is unknown to it, so its existence is not revealed);
    None's lists every tool (no `callers` section, or no `auth`)."""
    def endpoint(tools: list[ToolDescriptor], prompts: frozenset[str] | None) -> Endpoint:
        return Endpoint(Dispatcher(server.server_info, tools, resources=server.resource_catalogue,
                                   prompts=prompt_catalogue(server, prompts)), settings)

    endpoints: dict[str | None, Endpoint] = {None: endpoint(server.descriptors, None)}
    for caller in server.manifest.callers or ():
        endpoints[caller.name] = endpoint([d for d in server.descriptors if d.name in caller.tools],
                                          caller.prompts)
    return endpoints


async def serve_http(server: Application, sock: socket.socket,
                     authenticator: Authenticator | None = None) -> None:
    """Serve the MCP endpoint on `sock` until the server is stopping, then
    stop accepting, answer every call in flight, and return."""
    http = server.manifest.server.http
    settings = settings_for(http.path, http.origins, http.public_url, sock.getsockname()[:2])
    guard = None if authenticator is None else Guard(server.manifest, authenticator, server.log)
    if isinstance(authenticator, Lifecycle):
        await authenticator.start()
    try:
        await _serve_app(server, sock, McpApp(server, endpoints_for(server, settings), guard))
    finally:
        if isinstance(authenticator, Lifecycle):
            await authenticator.close()


async def _serve_app(server: Application, sock: socket.socket, app: McpApp) -> None:
    http = server.manifest.server.http
    # Requests in progress (a whole head each), not connections: a socket
    # waiting for a request has bounds of its own (http_connections.py).
    requests = requests_bound(server.manifest.server.max_concurrent_runs)
    config = uvicorn.Config(app, loop="none", http=gated_protocol(requests), lifespan="off",
                            log_config=None, access_log=False, server_header=False,
                            proxy_headers=False, timeout_keep_alive=5,
                            timeout_graceful_shutdown=None, limit_concurrency=None)
    uv = InLoopUvicorn(config)
    host, port = sock.getsockname()[:2]
    server.log("serving_http", url=listening_url(host, port, http.path))
    async with contextlib.AsyncExitStack() as draining:
        stop = asyncio.ensure_future(_stop_when(server, uv, sock, draining))
        try:
            await uv.serve(sockets=[sock])
            if app.detached:  # runs answered as tasks end before the server closes
                await asyncio.gather(*app.detached, return_exceptions=True)
        finally:
            stop.cancel()


async def _stop_when(server: Application, uv: uvicorn.Server, sock: socket.socket,
                     draining: contextlib.AsyncExitStack) -> None:
    """Once stopping: uvicorn closes its listener and answers the calls in
    flight, while the socket answers anything new as not ready (not_ready.py)
    until serving has ended."""
    await server.stopping.wait()
    await draining.enter_async_context(answering_not_ready(sock))
    uv.should_exit = True


def over_http(sock: socket.socket, authenticator: Authenticator | None = None) -> Transport:
    async def serve(server: Application) -> None:
        await serve_http(server, sock, authenticator)

    return serve
