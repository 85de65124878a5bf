"""The real server process under test: `staal-supervisor serve manifest.json`
started on a manifest written into a temporary directory, as an MCP client
would start it.

- `Site` writes tool programs and the manifest (every tool gets the network
  timeouts a tool must give), and reads back the ledger and journal files.
- `Stderr` captures the server's standard error into a file (`stderr.log`
  beside the manifest) through a pipe read by a thread, so a test can wait,
  with a bound, for a log event instead of sleeping.
- `RawServer` speaks raw lines: it writes whatever bytes a test gives and
  keeps every line the server writes, parsed where it parses.
- `sdk_client` / `sdk_session` give the official Python SDK's `Client` over
  stdio to the same process, with every message in both directions recorded
  (`Traffic`).
- `Closer` is a local HTTP service that takes a request and closes the
  connection without an answer (an unkeyed POST to it is in doubt).

Every wait is bounded (`WAIT`, generous for a loaded two-core machine).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import textwrap
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from staal.protocol.mcp.revisions import (
    CLIENT_CAPABILITIES_KEY,
    CLIENT_INFO_KEY,
    LEGACY,
    MODERN,
    PROTOCOL_VERSION_KEY,
)

WAIT = 30.0
# The first answer also waits for the start: the zygote, and every tool's
# program checked in a worker. Seconds on a loaded two-core machine.
START_WAIT = 60.0
KILL_VARIABLES = ("STAAL_TEST_KILL_POINTS", "STAAL_KILL_AT", "STAAL_KILL_ONCE")
NET = {"timeout_ms": 10000, "connect_timeout_ms": 2000}
SERVER_NAME = "staal-test"


def supervisor_command(manifest: Path) -> list[str]:
    return [sys.executable, "-m", "staal.supervisor.app.main", "serve", str(manifest)]


def server_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The test's environment (so the venv's `staal` is found), without kill
    points, plus `extra` (secrets)."""
    env = {k: v for k, v in os.environ.items() if k not in KILL_VARIABLES}
    env.update(extra or {})
    return env


# -- the site: programs, manifest, journals ----------------------------------


class Site:
    """A temporary directory holding a manifest, its programs and its journals."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.manifest = root / "manifest.json"
        self.journals = root / "journals"
        self.stderr_path = root / "stderr.log"

    def program(self, name: str, source: str) -> str:
        (self.root / name).write_text(textwrap.dedent(source))
        return name

    def write(self, tools: list[dict[str, Any]], sections: dict[str, Any] | None = None,
              **server: Any) -> Path:
        """The manifest: `server` fields over a small default, each tool
        with a description and the network timeouts unless it gives its own,
        and any other top-level `sections` (auth, callers)."""
        data = {
            "server": {"name": SERVER_NAME, "journals": "journals", "max_concurrent_runs": 4,
                       **server},
            "tools": [{"description": f"The {tool['name']} tool.", "grants": {}, "net": NET, **tool}
                      for tool in tools],
            **(sections or {}),
        }
        self.manifest.write_text(json.dumps(data, indent=2))
        return self.manifest

    def set_tool(self, name: str, **fields: Any) -> None:
        """The manifest written again with `fields` set on the tool `name`."""
        data = json.loads(self.manifest.read_text())
        (tool,) = [t for t in data["tools"] if t["name"] == name]
        tool.update(fields)
        self.manifest.write_text(json.dumps(data, indent=2))

    # -- what the server left on disk

    @property
    def ledger_path(self) -> Path:
        return self.journals / "server.ledger"

    def ledger_events(self) -> list[dict[str, Any]]:
        """Every ledger line, parsed (none when there is no ledger)."""
        if not self.ledger_path.exists():
            return []
        return [json.loads(line) for line in self.ledger_path.read_text().splitlines() if line]

    def journal(self, tool: str, run: str) -> Path:
        return self.journals / tool / run[:2] / f"{run}.journal"

    def journal_records(self, tool: str, run: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.journal(tool, run).read_text().splitlines()
                if line.endswith("}")]

    def journal_files(self) -> list[Path]:
        return sorted(self.journals.rglob("*.journal")) if self.journals.exists() else []

    def waiting_record(self, run: str) -> Path:
        return self.journals / "waiting" / f"{run}.json"

    def files_under_journals(self) -> list[Path]:
        return sorted(p for p in self.journals.rglob("*") if p.is_file())


def stripe_refund_grant(base: str, **limits: Any) -> dict[str, Any]:
    """A `payments.stripe.refund` grant against the service at `base` (the
    fake payment service): 50.00 USD each, one use, unless `limits` say
    otherwise; the key from STRIPE_SECRET_KEY."""
    limits = limits or {"each": {"amount": "50.00", "currency": "USD"}, "uses": 1}
    return {
        "cap": "payments.stripe.refund", **limits, "base_url": base,
        "needs": {
            "get": {"cap": "net.http.get", "only": [base + "/v1/payment_intents/*"]},
            "post": {"cap": "net.http.post", "only": [base + "/v1/refunds"], "idempotency_key": True},
            "key": {"env": "STRIPE_SECRET_KEY"},
        },
    }


# -- standard error ------------------------------------------------------------


class Stderr:
    """The server's standard error: a pipe whose write end the server gets,
    read by a thread into `path` and into memory, line by line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._read, self._write = os.pipe()
        self._lines: list[str] = []
        self._partial = b""
        self._cond = threading.Condition()
        self._ended = False
        self._handles: list[Any] = []
        self._file = open(path, "ab")  # noqa: SIM115  (closed by the reading thread)
        self._thread = threading.Thread(target=self._pump, name="stderr-tee", daemon=True)
        self._thread.start()

    @property
    def fd(self) -> int:
        """The write end, to hand to the server process."""
        return self._write

    def errlog(self) -> Any:
        """A file object on the write end (for the SDK's stdio_client), closed
        with the write end by `spawned`."""
        handle = os.fdopen(os.dup(self._write), "w")
        self._handles.append(handle)
        return handle

    def spawned(self) -> None:
        """Close this process's copies of the write end once the server has
        it, so the pipe ends when the server and its workers do."""
        for handle in self._handles:
            handle.close()
        self._handles.clear()
        if self._write >= 0:
            os.close(self._write)
            self._write = -1

    def _pump(self) -> None:
        while True:
            data = os.read(self._read, 65536)
            self._file.write(data)
            self._file.flush()
            with self._cond:
                if not data:
                    if self._partial:
                        self._lines.append(self._partial.decode(errors="replace"))
                    self._ended = True
                    self._cond.notify_all()
                    break
                *complete, self._partial = (self._partial + data).split(b"\n")
                self._lines.extend(line.decode(errors="replace") for line in complete)
                self._cond.notify_all()
        os.close(self._read)
        self._file.close()

    @property
    def lines(self) -> list[str]:
        with self._cond:
            return list(self._lines)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def records(self) -> list[dict[str, Any]]:
        """Every line that is a JSON object (the server's structured log)."""
        found = []
        for line in self.lines:
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                found.append(value)
        return found

    def events(self, event: str, **fields: Any) -> list[dict[str, Any]]:
        return [r for r in self.records()
                if r.get("event") == event and all(r.get(k) == v for k, v in fields.items())]

    def wait_for(self, predicate: Callable[[str], bool], timeout: float = WAIT,
                 what: str = "a line") -> str:
        """The first line `predicate` holds for, waiting up to `timeout`."""
        def found() -> str | None:
            return next((line for line in self._lines if predicate(line)), None)

        with self._cond:
            self._cond.wait_for(lambda: found() is not None or self._ended, timeout)
            line = found()
        assert line is not None, f"no {what} on the server's stderr within {timeout} s:\n{self.text}"
        return line

    def wait_event(self, event: str, timeout: float = WAIT, **fields: Any) -> dict[str, Any]:
        def matches(line: str) -> bool:
            try:
                record = json.loads(line)
            except ValueError:
                return False
            return (isinstance(record, dict) and record.get("event") == event
                    and all(record.get(k) == v for k, v in fields.items()))

        return json.loads(self.wait_for(matches, timeout, f"{event} event {fields or ''}"))

    def wait_closed(self, timeout: float = WAIT) -> str:
        """All of it, once every writer (server, zygote, workers) is gone."""
        with self._cond:
            ended = self._cond.wait_for(lambda: self._ended, timeout)
        assert ended, f"the server's stderr was still open after {timeout} s:\n{self.text}"
        return self.text

    def close(self) -> None:
        self.spawned()


# -- raw lines -------------------------------------------------------------------


def modern_meta(version: str = MODERN, **extra: Any) -> dict[str, Any]:
    """The 2026-07-28 `_meta` envelope."""
    return {PROTOCOL_VERSION_KEY: version, CLIENT_CAPABILITIES_KEY: {},
            CLIENT_INFO_KEY: {"name": "raw-test", "version": "1.0"}, **extra}


INITIALIZE_PARAMS = {"protocolVersion": LEGACY, "capabilities": {},
                     "clientInfo": {"name": "raw-test", "version": "1.0"}}


@dataclass
class Line:
    raw: bytes
    message: Any = None
    problem: str | None = None


class RawServer:
    """The server process, spoken to in raw lines."""

    def __init__(self, site: Site, env: dict[str, str] | None = None,
                 preexec: Callable[[], None] | None = None, new_session: bool = False) -> None:
        self.site = site
        self.stderr = Stderr(site.stderr_path)
        # `preexec` runs in the child before the exec (e.g. to drop a capability);
        # `new_session`: a process group of its own, as a terminal's foreground job.
        self.process = subprocess.Popen(
            supervisor_command(site.manifest), cwd=site.root, env=server_env(env),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr.fd,
            preexec_fn=preexec, start_new_session=new_session)
        self.stderr.spawned()
        self.lines: list[Line] = []
        self._arrivals: queue.SimpleQueue[Line | None] = queue.SimpleQueue()
        self._pending: list[Line] = []
        self._stdout_ended = threading.Event()
        self._reader = threading.Thread(target=self._read_stdout, name="stdout", daemon=True)
        self._reader.start()
        self._next_id = 1000

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = Line(raw)
            try:
                line.message = json.loads(raw)
            except ValueError as exc:
                line.problem = str(exc)
            self.lines.append(line)
            self._arrivals.put(line)
        self._stdout_ended.set()
        self._arrivals.put(None)

    # -- writing

    def send_bytes(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def send(self, message: Any) -> None:
        self.send_bytes(json.dumps(message).encode() + b"\n")

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def request(self, method: str, params: dict[str, Any] | None = None,
                request_id: Any = None, modern: bool = False) -> Any:
        """Send a request; its id."""
        request_id = self.new_id() if request_id is None else request_id
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if modern:
            params = {**(params or {}), "_meta": {**modern_meta(), **(params or {}).get("_meta", {})}}
        if params is not None:
            message["params"] = params
        self.send(message)
        return request_id

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def close_stdin(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()

    # -- reading

    def next_line(self, timeout: float = WAIT) -> Line | None:
        """The next line the server writes (None at the end of its stdout)."""
        if self._pending:
            return self._pending.pop(0)
        if not self.lines:
            timeout = max(timeout, START_WAIT)
        try:
            return self._arrivals.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"the server wrote nothing within {timeout} s; stderr:\n"
                                 f"{self.stderr.text}") from None

    def answer(self, request_id: Any, timeout: float = WAIT) -> dict[str, Any]:
        """The answer to `request_id`; other lines read meanwhile stay readable."""
        return self.next_message(lambda message: "method" not in message
                                 and message.get("id") == request_id,
                                 f"the answer to {request_id!r}", timeout)

    def next_message(self, matches: Callable[[dict[str, Any]], bool], what: str,
                     timeout: float = WAIT) -> dict[str, Any]:
        """The next message `matches` accepts; other lines read meanwhile
        stay readable."""
        skipped: list[Line] = []
        try:
            while True:
                line = self.next_line(timeout)
                assert line is not None, (f"stdout ended before {what}; "
                                          f"stderr:\n{self.stderr.text}")
                message = line.message
                if isinstance(message, dict) and matches(message):
                    return message
                skipped.append(line)
        finally:
            self._pending[:0] = skipped

    def call(self, method: str, params: dict[str, Any] | None = None, modern: bool = False,
             timeout: float = WAIT) -> dict[str, Any]:
        return self.answer(self.request(method, params, modern=modern), timeout)

    def initialize(self) -> dict[str, Any]:
        answer = self.call("initialize", INITIALIZE_PARAMS)
        self.notify("notifications/initialized")
        return answer

    def call_tool(self, name: str, arguments: dict[str, Any], modern: bool = False,
                  timeout: float = WAIT) -> dict[str, Any]:
        answer = self.call("tools/call", {"name": name, "arguments": arguments},
                           modern=modern, timeout=timeout)
        assert "result" in answer, answer
        return answer["result"]

    def wait_exit(self, timeout: float = WAIT) -> int:
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the server did not exit within {timeout} s; stderr:\n"
                                 f"{self.stderr.text}") from None
        self._stdout_ended.wait(timeout)
        return code

    def messages(self) -> list[Any]:
        return [line.message for line in self.lines]

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                self.close_stdin()
            except (OSError, ValueError):
                pass
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if self.process.stdin is not None and not self.process.stdin.closed:
            try:
                self.process.stdin.close()
            except OSError:
                pass
        self.stderr.close()

    def __enter__(self) -> RawServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_to_end(site: Site, data: bytes, env: dict[str, str] | None = None,
               timeout: float = WAIT) -> tuple[int, bytes, str]:
    """Start the server, write `data` and close its stdin; its exit code,
    everything on its stdout, and its stderr."""
    stderr = Stderr(site.stderr_path)
    try:
        done = subprocess.run(supervisor_command(site.manifest), cwd=site.root,
                              env=server_env(env), input=data, stdout=subprocess.PIPE,
                              stderr=stderr.fd, timeout=timeout, check=False)
    finally:
        stderr.spawned()
    return done.returncode, done.stdout, stderr.wait_closed()


# -- the official Python SDK ---------------------------------------------------------


@dataclass
class Traffic:
    """Every message between the SDK client and the server, as JSON."""

    sent: list[dict[str, Any]] = field(default_factory=list)
    received: list[dict[str, Any]] = field(default_factory=list)
    # Lines from the server the SDK could not read as a JSON-RPC message.
    errors: list[Exception] = field(default_factory=list)

    def sent_calls(self) -> list[dict[str, Any]]:
        return [m for m in self.sent if m.get("method") == "tools/call"]

    def received_for(self, request_id: Any) -> list[dict[str, Any]]:
        return [m for m in self.received if "method" not in m and m.get("id") == request_id]

    def notifications(self, method: str) -> list[dict[str, Any]]:
        """Notifications of `method` the server sent."""
        return [m for m in self.received if m.get("method") == method]

    def notifications_sent(self, method: str) -> list[dict[str, Any]]:
        """Notifications of `method` the client sent."""
        return [m for m in self.sent if m.get("method") == method and "id" not in m]


def _as_json(message: Any) -> dict[str, Any]:
    return json.loads(message.model_dump_json(by_alias=True, exclude_unset=True))


@asynccontextmanager
async def recorded(transport: Any, traffic: Traffic) -> AsyncIterator[Any]:
    """`transport`, with every message through it recorded in `traffic`."""
    async with transport as (read, write):
        to_client, client_read = anyio.create_memory_object_stream[Any](0)
        client_write, from_client = anyio.create_memory_object_stream[Any](0)

        async def inward() -> None:
            async with to_client:
                async for item in read:
                    if isinstance(item, Exception):
                        traffic.errors.append(item)
                    else:
                        traffic.received.append(_as_json(item.message))
                    await to_client.send(item)

        async def outward() -> None:
            async with from_client:
                async for item in from_client:
                    traffic.sent.append(_as_json(item.message))
                    await write.send(item)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(inward)
            tasks.start_soon(outward)
            try:
                yield client_read, client_write
            finally:
                tasks.cancel_scope.cancel()


def sdk_client(site: Site, mode: str, stderr: Stderr, env: dict[str, str] | None = None,
               traffic: Traffic | None = None, read_timeout: float | None = None) -> Any:
    """The official SDK's Client, starting the server over stdio."""
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    # The SDK passes only a few safe variables on; PYTHONPATH too, when the
    # tests run against another tree.
    passed = {k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}
    params = StdioServerParameters(command=sys.executable, args=supervisor_command(site.manifest)[1:],
                                   env={**passed, **(env or {})}, cwd=str(site.root))
    transport = stdio_client(params, errlog=stderr.errlog())
    if traffic is not None:
        transport = recorded(transport, traffic)
    return Client(transport, mode=mode, read_timeout_seconds=read_timeout)


def text_of(result: Any) -> str:
    return "".join(getattr(item, "text", "") for item in result.content)


@dataclass
class Session:
    client: Any
    stderr: Stderr
    traffic: Traffic


@asynccontextmanager
async def sdk_session(site: Site, mode: str, env: dict[str, str] | None = None,
                      read_timeout: float | None = WAIT) -> AsyncIterator[Session]:
    """An SDK client connected (in `mode`) to a new server on `site`, its
    stderr captured and its traffic recorded."""
    stderr = Stderr(site.stderr_path)
    traffic = Traffic()
    try:
        async with sdk_client(site, mode, stderr, env, traffic, read_timeout) as client:
            stderr.spawned()
            yield Session(client, stderr, traffic)
    finally:
        stderr.spawned()


# -- a service that takes a request and never answers it ------------------------------


class Closer:
    """A local HTTP service that reads each request whole, records it, and
    closes the connection without answering: for a POST that is in doubt."""

    def __init__(self) -> None:
        import socket

        self.requests: list[bytes] = []
        self._cond = threading.Condition()
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(16)
        self._thread = threading.Thread(target=self._serve, name="closer", daemon=True)
        self._thread.start()

    @property
    def base(self) -> str:
        host, port = self._socket.getsockname()[:2]
        return f"http://{host}:{port}"

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return
            with connection:
                connection.settimeout(WAIT)
                data = b""
                try:
                    while b"\r\n\r\n" not in data:
                        chunk = connection.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                    head, _, body = data.partition(b"\r\n\r\n")
                    length = 0
                    for line in head.split(b"\r\n")[1:]:
                        name, _, value = line.partition(b":")
                        if name.strip().lower() == b"content-length":
                            length = int(value.strip())
                    while len(body) < length:
                        chunk = connection.recv(65536)
                        if not chunk:
                            break
                        body += chunk
                except OSError:
                    pass
                with self._cond:
                    self.requests.append(data)
                    self._cond.notify_all()

    def wait(self, count: int = 1, timeout: float = WAIT) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.requests) >= count, timeout), (
                f"the service received {len(self.requests)} requests, not {count}, in {timeout} s")

    def stop(self) -> None:
        import socket

        try:
            self._socket.shutdown(socket.SHUT_RDWR)  # wakes the accept
        except OSError:
            pass
        self._socket.close()
