"""`staal-supervisor console MANIFEST [--listen 127.0.0.1:8090]`: a read-only
local web page beside a running server (issue 17, item 3).

A small ASGI app under uvicorn, GET only. Every request reads the ledger and
the journals afresh, as `status` does: no lock taken, no file opened for
writing, so it can run beside the server, or with none.

It listens on loopback unless told otherwise with `--allow-remote`: its pages
show run ids, tool names, what a program printed and the journal paths, which
are for the operator of this machine, and it has no authentication.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

from staal.errors import StaalError
from staal.manifest.addresses import is_loopback, split_host_port
from staal.manifest.model import Manifest
from staal.supervisor.errors import SupervisorError
from staal.supervisor.store.files import RunFiles
from staal.supervisor.views.console_data import BadQuery, overview, run_detail
from staal.supervisor.views.console_pages import error_page, overview_page, run_page
from staal.supervisor.views.timeline import timeline

DEFAULT_LISTEN = "127.0.0.1:8090"
Send = Callable[[dict[str, Any]], Awaitable[None]]


class ListenRefused(SupervisorError, ValueError):
    """A --listen address the console will not use, and why."""

    kind = "listen_refused"


def parse_listen(listen: str, allow_remote: bool) -> tuple[str, int]:
    address = split_host_port(listen)
    if address is None:
        raise ListenRefused(f"--listen {listen!r}: expected HOST:PORT, such as {DEFAULT_LISTEN}")
    if not allow_remote and not is_loopback(address[0]):
        raise ListenRefused(
            f"--listen {listen!r} is not a loopback address: the console shows run ids, tool "
            "names, prints and journal paths to anyone who reaches it, with no authentication; "
            "listen on 127.0.0.1 (and tunnel to it), or pass --allow-remote if that is intended")
    return address


class Console:
    """The ASGI app: `/` the overview (`?q=` searches), `/runs/<id>` a run."""

    def __init__(self, manifest: Manifest) -> None:
        self.manifest = manifest

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if scope["method"] not in ("GET", "HEAD"):
            await _answer(send, 405, error_page(405, "the console is read only: GET only"),
                          [(b"allow", b"GET, HEAD")])
            return
        status, body = self.route(scope["path"], scope.get("query_string", b"").decode("latin-1"))
        await _answer(send, status, body if scope["method"] == "GET" else "")

    def route(self, path: str, query_string: str) -> tuple[int, str]:
        try:
            return self._route(path, query_string)
        except (StaalError, OSError) as exc:
            # A damaged ledger is the server's to report at its start; the
            # console says what it could not read rather than a bare 500.
            return 500, error_page(500, f"cannot read the journal directory: {exc}")

    def _route(self, path: str, query_string: str) -> tuple[int, str]:
        if path == "/":
            query = parse_qs(query_string).get("q", [""])[0]
            try:
                return 200, overview_page(overview(self.manifest, query))
            except BadQuery as exc:
                return 400, error_page(400, str(exc))
        if path.startswith("/runs/") and path.count("/") == 2:
            return self.run(path.removeprefix("/runs/"))  # uvicorn gives the path decoded
        return 404, error_page(404, f"no page at {path}: the overview is at /, a run at /runs/<run id>")

    def run(self, run_id: str) -> tuple[int, str]:
        found = run_detail(self.manifest, run_id)
        if found is None:
            return 404, error_page(404, f"no run {run_id!r} in the ledger (an unknown id, or a run "
                                        "compaction dropped)")
        row, waiting = found
        journals = self.manifest.server.journals
        line = timeline(RunFiles(journals, row.tool, row.run).journal, row.run, row.tool)
        return 200, run_page(row, line, waiting)


async def _lifespan(receive: Any, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _answer(send: Send, status: int, body: str,
                  headers: list[tuple[bytes, bytes]] | None = None) -> None:
    data = body.encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"text/html; charset=utf-8"), (b"cache-control", b"no-store"),
        # Nothing on a page runs or loads from elsewhere; say so to the browser too.
        (b"content-security-policy", b"default-src 'none'; style-src 'unsafe-inline'; img-src 'self'"),
        (b"x-content-type-options", b"nosniff"), *(headers or [])]})
    await send({"type": "http.response.body", "body": data})


def serve_console(manifest: Manifest, host: str, port: int) -> int:
    """Bind, say where on stdout (then the socket already accepts: a client
    may connect as soon as it reads the line), and serve until interrupted."""
    import uvicorn

    from staal.supervisor.transport.listeners import bind

    try:
        sock = bind(host, port, backlog=64)
    except OSError as exc:
        print(f"staal-supervisor console: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return 1
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if sock.family == socket.AF_INET6 else host
    print(f"console: http://{shown}:{bound}/ (read only; journals {manifest.server.journals})",
          flush=True)
    config = uvicorn.Config(Console(manifest), log_level="warning", access_log=False,
                            lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
    return 0
