"""The real server process serving Streamable HTTP: `staal-supervisor serve
manifest.json --http 127.0.0.1:0`, its URL read from its `serving_http` log
event, and raw requests to it with httpx, with the headers a conforming
2026-07-28 (or 2025-11-25) client sends unless a test says otherwise."""

from __future__ import annotations

import base64
import signal
import socket
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import httpx
import orjson
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR

from staal.protocol.mcp.revisions import LEGACY, MODERN
from tests.helpers.servers import START_WAIT, WAIT, Site, Stderr, modern_meta, server_env, supervisor_command

ACCEPT = "application/json, text/event-stream"
NAMED = {"tools/call": "name", "resources/read": "uri", "prompts/get": "name",
         "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId"}


def sdk_refused_by_status() -> pytest.RaisesGroup[MCPError]:
    """What the official Python SDK raises out of a session whose request
    was answered with an HTTP error status (not 404) and a body that is no
    JSON-RPC error, as staal's 401 and 403 are: its MCPError INTERNAL_ERROR
    "Server returned an error response", out of its transport's task groups."""
    return pytest.RaisesGroup(
        pytest.RaisesExc(MCPError, match=r"^Server returned an error response$",
                         check=lambda error: error.code == INTERNAL_ERROR),
        flatten_subgroups=True)


def header_value(value: str) -> str:
    """As a client mirrors a value into a header: Base64 when it is not
    plain ASCII (or looks like the sentinel)."""
    if value.isascii() and value.isprintable() and value == value.strip() \
            and not value.startswith("=?base64?"):
        return value
    return "=?base64?" + base64.b64encode(value.encode()).decode() + "?="


def modern_headers(method: str, params: dict[str, Any]) -> dict[str, str]:
    headers = {"content-type": "application/json", "accept": ACCEPT,
               "mcp-protocol-version": MODERN, "mcp-method": method}
    if method in NAMED and isinstance(params.get(NAMED[method]), str):
        headers["mcp-name"] = header_value(params[NAMED[method]])
    return headers


def _unchunked(data: bytes) -> bytes:
    out = b""
    while data:
        size, _, data = data.partition(b"\r\n")
        length = int(size, 16)
        if length == 0:
            break
        out, data = out + data[:length], data[length + 2:]
    return out


class HttpServer:
    """The server process on a free loopback port."""

    def __init__(self, site: Site, env: dict[str, str] | None = None,
                 address: str = "127.0.0.1:0", args: tuple[str, ...] = (),
                 preexec: Callable[[], None] | None = None, new_session: bool = False) -> None:
        self.site = site
        self.stderr = Stderr(site.stderr_path)
        # `preexec` runs in the child before the exec (e.g. to drop a capability);
        # `new_session`: a process group of its own, as a terminal's foreground job.
        self.process = subprocess.Popen(
            [*supervisor_command(site.manifest), "--http", address, *args], cwd=site.root,
            env=server_env(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=self.stderr.fd, preexec_fn=preexec, start_new_session=new_session)
        self.stderr.spawned()
        self.url = ""
        self.client = httpx.Client(timeout=WAIT, trust_env=False)
        self._ids = 0

    def started(self) -> HttpServer:
        self.url = self.stderr.wait_event("serving_http", timeout=START_WAIT)["url"]
        return self

    @property
    def base(self) -> str:
        return self.url.rsplit("/", 1)[0]

    # -- raw requests

    def next_id(self) -> int:
        self._ids += 1
        return self._ids

    def post(self, body: Any, headers: dict[str, str], **kwargs: Any) -> httpx.Response:
        content = body if isinstance(body, bytes) else orjson.dumps(body)
        return self.client.post(self.url, content=content, headers=headers, **kwargs)

    def modern(self, method: str, params: dict[str, Any] | None = None,
               headers: dict[str, str] | None = None, request_id: Any = None,
               **meta: Any) -> httpx.Response:
        """A 2026-07-28 request, headers mirrored as a conforming client does."""
        params = {**(params or {}), "_meta": {**modern_meta(), **meta}}
        message = {"jsonrpc": "2.0", "id": self.next_id() if request_id is None else request_id,
                   "method": method, "params": params}
        return self.post(message, {**modern_headers(method, params), **(headers or {})})

    def legacy(self, method: str, params: dict[str, Any] | None = None,
               headers: dict[str, str] | None = None, notification: bool = False) -> httpx.Response:
        """A 2025-11-25 request (after the handshake: the version header)."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params or {}}
        if not notification:
            message["id"] = self.next_id()
        base = {"content-type": "application/json", "accept": ACCEPT}
        if method != "initialize":
            base["mcp-protocol-version"] = LEGACY
        return self.post(message, {**base, **(headers or {})})

    def raw(self, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        """A POST written by hand, for what httpx will not send (a header
        value with spaces around it): the status and the body."""
        host, port = self.url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
        lines = [f"POST {self.url.split(port, 1)[1]} HTTP/1.1", f"Host: {host}:{port}",
                 f"Content-Length: {len(body)}", "Connection: close",
                 *(f"{k}: {v}" for k, v in headers.items())]
        with socket.create_connection((host, int(port)), timeout=WAIT) as sock:
            sock.sendall("\r\n".join(lines).encode() + b"\r\n\r\n" + body)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        if b"transfer-encoding: chunked" in head.lower():
            rest = _unchunked(rest)
        return status, rest

    # -- the end

    def terminate(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.wait_exit()

    def wait_exit(self, timeout: float = WAIT) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the server did not exit within {timeout} s; stderr:\n"
                                 f"{self.stderr.text}") from None

    def stop(self) -> None:
        self.client.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(WAIT)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.stderr.close()

    def __enter__(self) -> HttpServer:
        return self.started()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def started_together(*servers: HttpServer) -> Iterator[tuple[HttpServer, ...]]:
    """Servers whose processes were all started (constructed) before the
    first is waited for, so their start-ups overlap; each stopped after."""
    try:
        yield tuple(server.started() for server in servers)
    finally:
        for server in servers:
            server.stop()


def explored_over_http(site: Site, mode: str, explore: Callable[[Any], Awaitable[Any]]) -> Any:
    """What `explore(client)` returns from an SDK client (in `mode`) of a new
    HTTP server on `site`, the server stopped after it."""
    with HttpServer(site) as http:

        async def session() -> Any:
            async with Client(http.url, mode=mode) as client:
                return await explore(client)

        return anyio.run(session)
