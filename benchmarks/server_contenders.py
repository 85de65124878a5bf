"""What `server.py` runs: the servers (contenders), the scenarios (the tool
each call runs), the local HTTP service of the GET scenario, and one
session of the SDK's client with a server.

A contender is a stdio server started fresh by the client for each session,
in a fresh directory (BENCH_DIR, or the system's temporary one; /dev/shm for
staal's second row) holding staal's manifest, programs, ledger and journals,
DBOS's system database, and every server's stderr.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import psutil
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

HERE = Path(__file__).resolve().parent
SERVERS = HERE / "servers"
MODE = "legacy"

STAAL = "staal"
STAAL_SHM = "staal, journals on /dev/shm (fsync costs nothing)"
STAAL_PG = "staal, ledger on PostgreSQL (server.store)"
# The variable the PostgreSQL row's manifest names for its store's DSN.
STORE_ENV = "STAAL_BENCH_STORE_DSN"
MCPSERVER = "MCPServer (official SDK)"
FASTMCP = "FastMCP"
DBOS = "MCPServer + DBOS workflow (SQLite)"


@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    tool: str  # the tool's name on every server, and staal's program file without .py

    def arguments(self, i: int, service: str | None) -> dict[str, object]:
        """The call's arguments; every server answers i."""
        return {"x": i} if self.tool == "noop" else {"url": f"{service}/item/{i}"}


NOOP = Scenario("noop", "No-op tool", "noop")
GET = Scenario("get", "One GET to a local service", "get")
SCENARIOS = {s.key: s for s in (NOOP, GET)}


def bench_dir() -> Path:
    return Path(os.environ.get("BENCH_DIR") or tempfile.gettempdir())


@dataclass
class Contender:
    key: str
    name: str
    command: str
    args: list[str]
    staal: bool = False
    env: dict[str, str] | None = None
    base: Path | None = None  # where its directory goes, if not the benchmark's
    takes_directory: bool = False  # its directory as one more argument (DBOS's system database)
    postgres: bool = False  # staal's ledger in the PostgreSQL store whose DSN is env[STORE_ENV]
    runs_per_worker: int | None = None  # staal's `server.runs_per_worker`; None: not written

    def prepare(self, base: Path, scenario: Scenario = NOOP,
                service: str | None = None) -> tuple[StdioServerParameters, Path]:
        """Parameters for a new server process serving `scenario`'s tool, and
        a fresh directory for it."""
        directory = Path(tempfile.mkdtemp(prefix="bench-server-", dir=self.base or base))
        args = list(self.args)
        if self.staal:
            write_staal_manifest(directory, scenario, service, self.postgres,
                                 self.runs_per_worker)
            args = ["serve", str(directory / "manifest.json")]
        elif self.takes_directory:
            args.append(str(directory))
        return StdioServerParameters(command=self.command, args=args, env=self.env), directory


def write_staal_manifest(directory: Path, scenario: Scenario, service: str | None,
                         postgres: bool = False, runs_per_worker: int | None = None) -> None:
    """`servers/staal_manifest.json` with only the scenario's tool (so the
    zygote imports what that tool needs, no more), its program beside it,
    and the service's origin in the GET grant's `only`; with `postgres`, the
    ledger in the PostgreSQL store whose DSN is in STORE_ENV; with
    `runs_per_worker`, that as `server.runs_per_worker` (else the server's default)."""
    manifest = json.loads((SERVERS / "staal_manifest.json").read_text())
    manifest["tools"] = [tool for tool in manifest["tools"] if tool["name"] == scenario.tool]
    if runs_per_worker is not None:
        manifest["server"]["runs_per_worker"] = runs_per_worker
    if postgres:
        manifest["server"]["store"] = {"postgres": {"dsn": {"env": STORE_ENV}}}
    text = json.dumps(manifest, indent=2)
    if service is not None:
        text = text.replace("SERVICE", service)
    (directory / "manifest.json").write_text(text)
    shutil.copy(SERVERS / f"{scenario.tool}.py", directory / f"{scenario.tool}.py")


def runs_per_worker_settings(text: str | None) -> list[int | None]:
    """`--runs-per-worker 1,100`: staal's settings, a row each, in order and
    without repeats; None (the option not given): one row, the key not written."""
    if not text:
        return [None]
    settings = []
    for part in text.split(","):
        value = int(part)
        if not 1 <= value <= 100_000:
            raise SystemExit(f"--runs-per-worker: {value} is out of range (1 to 100000)")
        settings.append(value)
    return list(dict.fromkeys(settings))


def staal_name(runs_per_worker: int | None) -> str:
    return STAAL if runs_per_worker is None else f"{STAAL}, runs_per_worker {runs_per_worker}"


def contenders(fastmcp_python: str, chosen: set[str] | None = None,
               settings: list[int | None] | None = None) -> list[Contender]:
    """The servers, those in `chosen` (keys) if given; staal first, a row per
    `runs_per_worker` setting (key `staal`, or `staal:N` when set)."""
    bin_dir = Path(sys.executable).parent
    supervisor = str(bin_dir / "staal-supervisor")
    staal = [Contender("staal" if n is None else f"staal:{n}", staal_name(n), supervisor, [],
                       staal=True, runs_per_worker=n) for n in settings or [None]]
    everyone = [
        *staal,
        Contender("mcpserver", MCPSERVER, sys.executable, [str(SERVERS / "ref_mcpserver.py")]),
        Contender("fastmcp", FASTMCP, fastmcp_python, [str(SERVERS / "ref_fastmcp.py")]),
        Contender("dbos", DBOS, sys.executable, [str(SERVERS / "ref_dbos.py")], takes_directory=True),
    ]
    if Path("/dev/shm").is_dir():
        everyone.append(Contender("shm", STAAL_SHM, supervisor, [], staal=True, base=Path("/dev/shm")))
    return [c for c in everyone
            if chosen is None or c.key.partition(":")[0] in chosen]


class Session:
    """One server process and the SDK client connected to it; `pid` is the
    server's (the client's child that the session started)."""

    def __init__(self, params: StdioServerParameters, stderr: Path) -> None:
        self.params = params
        self.stderr_path = stderr
        self.stack = AsyncExitStack()
        self.client: Client | None = None
        self.pid = 0

    async def __aenter__(self) -> Client:
        errlog = self.stack.enter_context(open(self.stderr_path, "a"))  # noqa: ASYNC230, SIM115
        before = {p.pid for p in psutil.Process().children()}
        transport = stdio_client(self.params, errlog=errlog)
        self.client = await self.stack.enter_async_context(
            Client(transport, mode=MODE, read_timeout_seconds=60))
        started = [p.pid for p in psutil.Process().children() if p.pid not in before]
        assert len(started) == 1, f"expected one new server process, found {started}"
        self.pid = started[0]
        return self.client

    async def __aexit__(self, *exc: object) -> None:
        await self.stack.aclose()


class Service:
    """The GET scenario's local service (`servers/http_service.py`), a
    process of its own so that its CPU is neither the client's nor a server's."""

    def __init__(self, delay_ms: float) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(SERVERS / "http_service.py"), "--delay-ms", str(delay_ms)],
            stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.url = f"http://127.0.0.1:{int(self.process.stdout.readline())}"
        self.pid = self.process.pid

    def close(self) -> None:
        self.process.kill()
        self.process.wait()
