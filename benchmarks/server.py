"""The MCP server against references, in one run, through the same client.

The official Python SDK's client (`mcp` 2.x, `Client` in legacy mode: the
initialize handshake, which all three servers speak) calls a no-op tool,
`noop(x: int) -> int` returning x, on three servers, each a stdio subprocess
started by that client:

- staal: `staal-supervisor serve` on `servers/staal_manifest.json` copied
  into a fresh temporary directory (BENCH_DIR, or the system's), so the
  ledger and journals are on the disk the benchmark runs on; every call is a
  durable run in its own forked worker;
- the official SDK's own high-level server, `MCPServer` (`servers/mcpserver_noop.py`);
- FastMCP, the `fastmcp` package (`servers/fastmcp_noop.py`). It is not a
  staal dependency: `pip install fastmcp` into the venv (4.x works beside
  `mcp` 2.3), or give its interpreter with --fastmcp-python.

The references run the tool in-process, with no journal, ledger or isolation.
A fourth row runs staal with its directory on /dev/shm, where an fsync costs
nothing, to show what the fsyncs cost (as `engine.py` does); --no-shm leaves
it out.

Per round, for each server in turn (the order rotates every round):
cold start (spawn to the first `tools/list` answered, --cold samples, each a
new process), then one session: a few warm-up calls, --calls sequential calls
(p50, p99, calls/s), and --inflight calls kept in flight by 16 coroutines
under `asyncio.gather` (calls/s). Reports medians over rounds and the ratios
the server issue's goals name (issue 5 item 10).

    python benchmarks/server.py [--rounds 5] [--calls 1000] [--inflight 2000] [--cold 3]

Profiling staal's side (nothing in staal is edited for it):

    python benchmarks/server.py --profile [--calls 1000] [--on-shm]
    python benchmarks/server.py --py-spy [--calls 1000]      # needs `pip install py-spy`
    python benchmarks/server.py --worker-costs [--forks 200] [--on-shm]

--profile starts staal with a generated `sitecustomize.py` on its PYTHONPATH
(the supervisor hands PYTHONPATH on to the zygote; workers are the zygote's
forks), which installs `servers/trace/tracer.py` in every staal process: it
timestamps each step of a call in every process (CLOCK_MONOTONIC, one clock
for all of them) and every fsync by caller, and the client marks each call's
start and end; it prints where a sequential call's time goes, the fsyncs, the
CPU time per call of each process (sequential and 16 in flight), and the
cold start step by step. --py-spy samples the supervisor (threads holding
the GIL) during sequential calls. --worker-costs measures what one fork of
the zygote costs, step by step, by each child's own CPU time
(`servers/worker_costs.py`).

--exit-race-workaround runs staal with a workaround (in the tracer's hooks)
for a race in `supervisor/pool.py` that left a call unanswered; it does
nothing once the pool has the fix. --experiment defer-fork adds a staal row
that asks for each replacement worker when a run ends instead of when it
starts (an experiment, from outside; see BENCHMARKS.md).

Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client

HERE = Path(__file__).resolve().parent
SERVERS = HERE / "servers"
TRACE_DIR = SERVERS / "trace"
MODE = "legacy"
IN_FLIGHT = 16

STAAL = "staal"
STAAL_SHM = "staal, journals on /dev/shm (fsync costs nothing)"
MCPSERVER = "MCPServer (official SDK)"
FASTMCP = "FastMCP"


@dataclass
class Contender:
    name: str
    command: str
    args: list[str]
    staal: bool = False
    env: dict[str, str] | None = None
    base: Path | None = None  # where its directory goes, if not the benchmark's

    def prepare(self, base: Path) -> tuple[StdioServerParameters, Path]:
        """Parameters for a new server process, and a fresh directory for it
        (staal's manifest, program, ledger and journals; every server's stderr)."""
        directory = Path(tempfile.mkdtemp(prefix="bench-server-", dir=self.base or base))
        args = list(self.args)
        if self.staal:
            shutil.copy(SERVERS / "noop.py", directory / "noop.py")
            shutil.copy(SERVERS / "staal_manifest.json", directory / "manifest.json")
            args = ["serve", str(directory / "manifest.json")]
        return StdioServerParameters(command=self.command, args=args, env=self.env), directory


@dataclass
class Samples:
    cold: list[float] = field(default_factory=list)
    p50: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    sequential_rate: list[float] = field(default_factory=list)
    inflight_rate: list[float] = field(default_factory=list)
    wrong: int = 0


def contenders(fastmcp_python: str, shm: bool = False) -> list[Contender]:
    bin_dir = Path(sys.executable).parent
    supervisor = bin_dir / "staal-supervisor"
    everyone = [
        Contender(STAAL, str(supervisor), [], staal=True),
        Contender(MCPSERVER, sys.executable, [str(SERVERS / "mcpserver_noop.py")]),
        Contender(FASTMCP, fastmcp_python, [str(SERVERS / "fastmcp_noop.py")]),
    ]
    if shm and Path("/dev/shm").is_dir():
        everyone.append(Contender(STAAL_SHM, str(supervisor), [], staal=True, base=Path("/dev/shm")))
    return everyone


class Session:
    """One server process and the SDK client connected to it."""

    def __init__(self, params: StdioServerParameters, stderr: Path) -> None:
        self.params = params
        self.stderr_path = stderr
        self.stack = AsyncExitStack()
        self.client: Client | None = None

    async def __aenter__(self) -> Client:
        errlog = self.stack.enter_context(open(self.stderr_path, "a"))  # noqa: ASYNC230, SIM115
        transport = stdio_client(self.params, errlog=errlog)
        self.client = await self.stack.enter_async_context(
            Client(transport, mode=MODE, read_timeout_seconds=60))
        return self.client

    async def __aexit__(self, *exc: object) -> None:
        await self.stack.aclose()


def right(result: Any, x: int) -> bool:
    if result.is_error:
        return False
    content = result.structured_content or {}
    return content.get("result") == x


async def cold_start(contender: Contender, base: Path) -> float:
    params, directory = contender.prepare(base)
    try:
        start = time.perf_counter()
        async with Session(params, directory / "stderr.log") as client:
            listed = await client.list_tools()
            elapsed = time.perf_counter() - start
            assert any(tool.name == "noop" for tool in listed.tools), listed
        return elapsed
    finally:
        shutil.rmtree(directory, ignore_errors=True)


async def sequential(client: Client, count: int) -> tuple[list[float], float, int]:
    latencies = []
    wrong = 0
    begin = time.perf_counter()
    for i in range(count):
        start = time.perf_counter()
        result = await client.call_tool("noop", {"x": i})
        latencies.append(time.perf_counter() - start)
        wrong += not right(result, i)
    return latencies, time.perf_counter() - begin, wrong


async def in_flight(client: Client, count: int) -> tuple[float, int]:
    """`count` calls, IN_FLIGHT at a time: each of IN_FLIGHT coroutines calls
    again as soon as its previous call is answered."""
    wrong = 0
    per = count // IN_FLIGHT

    async def caller(k: int) -> None:
        nonlocal wrong
        for i in range(per):
            x = k * per + i
            result = await client.call_tool("noop", {"x": x})
            wrong += not right(result, x)

    begin = time.perf_counter()
    await asyncio.gather(*(caller(k) for k in range(IN_FLIGHT)))
    return time.perf_counter() - begin, wrong


async def one_round(contender: Contender, samples: Samples, base: Path, args: argparse.Namespace) -> None:
    for _ in range(args.cold):
        samples.cold.append(await cold_start(contender, base))
    params, directory = contender.prepare(base)
    try:
        await measure_session(contender, samples, params, directory, args)
    except (MCPError, ExceptionGroup) as exc:  # anyio may wrap it in a group of one
        print(f"{contender.name}: a call failed ({exc}); the server's stderr is kept in "
              f"{directory / 'stderr.log'}. For staal: a call that never returns is the worker-exit "
              "race in supervisor/pool.py; see --exit-race-workaround.", file=sys.stderr)
        raise SystemExit(1) from None
    shutil.rmtree(directory, ignore_errors=True)


async def measure_session(contender: Contender, samples: Samples, params: StdioServerParameters,
                          directory: Path, args: argparse.Namespace) -> None:
    async with Session(params, directory / "stderr.log") as client:
        await client.list_tools()
        for i in range(args.warmup):
            await client.call_tool("noop", {"x": i})
        latencies, elapsed, wrong = await sequential(client, args.calls)
        latencies.sort()
        samples.p50.append(percentile(latencies, 50))
        samples.p99.append(percentile(latencies, 99))
        samples.sequential_rate.append(args.calls / elapsed)
        total = args.inflight // IN_FLIGHT * IN_FLIGHT
        elapsed, wrong_inflight = await in_flight(client, total)
        samples.inflight_rate.append(total / elapsed)
        samples.wrong += wrong + wrong_inflight


def percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of a sorted list."""
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "?"


def report(results: dict[str, Samples], args: argparse.Namespace) -> None:
    med = {name: {key: statistics.median(getattr(s, key)) for key in
                  ("cold", "p50", "p99", "sequential_rate", "inflight_rate")}
           for name, s in results.items()}
    ours = med[STAAL]
    print(f"\nPython {platform.python_version()}, mcp {version('mcp')}, fastmcp {version('fastmcp')}, "
          f"{os.cpu_count()} cores; client: the SDK's `Client`, mode={MODE!r}; "
          f"{args.rounds} rounds, medians over rounds; load average (1 min) "
          f"{args.load_before:.2f} before, {os.getloadavg()[0]:.2f} after; one fsync after an append "
          f"on the benchmark's disk: median {args.fsync_before * 1e6:.0f} µs before, "
          f"{fsync_latency(Path(os.environ.get('BENCH_DIR') or tempfile.gettempdir())) * 1e6:.0f} µs after"
          + ("; staal with --exit-race-workaround" if args.exit_race_workaround else "") + ".")

    print(f"\n### Sequential calls ({args.calls} per round)\n")
    print("| server | p50 | p99 | calls/s | staal / this, p50 |")
    print("|---|---|---|---|---|")
    for name, m in med.items():
        print(f"| {name} | {m['p50'] * 1e3:.2f} ms | {m['p99'] * 1e3:.2f} ms | "
              f"{m['sequential_rate']:,.0f} | {ours['p50'] / m['p50']:.2f} |")

    print(f"\n### {IN_FLIGHT} calls in flight ({args.inflight // IN_FLIGHT * IN_FLIGHT} per round)\n")
    print("| server | calls/s | staal / this, calls/s |")
    print("|---|---|---|")
    for name, m in med.items():
        print(f"| {name} | {m['inflight_rate']:,.0f} | {ours['inflight_rate'] / m['inflight_rate']:.2f} |")

    print(f"\n### Cold start: spawn to the first `tools/list` answered ({args.cold} per round)\n")
    print("| server | median | staal / this |")
    print("|---|---|---|")
    for name, m in med.items():
        print(f"| {name} | {m['cold'] * 1e3:.0f} ms | {ours['cold'] / m['cold']:.2f} |")

    goals = [
        ("sequential p50, staal / MCPServer", ours["p50"] / med[MCPSERVER]["p50"], "≤ 1.0",
         lambda r: r <= 1.0),
        (f"{IN_FLIGHT}-in-flight calls/s, staal / FastMCP",
         ours["inflight_rate"] / med[FASTMCP]["inflight_rate"], "≥ 1.0", lambda r: r >= 1.0),
        ("cold start, staal / MCPServer", ours["cold"] / med[MCPSERVER]["cold"], "≤ 0.5",
         lambda r: r <= 0.5),
    ]
    print("\n### The issue's goals\n")
    print("| ratio | measured | goal | met |")
    print("|---|---|---|---|")
    for label, ratio, goal, met in goals:
        print(f"| {label} | {ratio:.2f} | {goal} | {'yes' if met(ratio) else 'no'} |")
    for name, s in results.items():
        if s.wrong:
            print(f"\n**{name}: {s.wrong} calls answered with an error or a wrong value.**")


def fsync_latency(base: Path, count: int = 100) -> float:
    """The median time of one fsync after a small append, on `base`'s disk."""
    directory = Path(tempfile.mkdtemp(prefix="bench-fsync-", dir=base))
    fd = os.open(directory / "probe", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    took = []
    try:
        for _ in range(count):
            os.write(fd, b"x" * 200 + b"\n")
            start = time.perf_counter()
            os.fsync(fd)
            took.append(time.perf_counter() - start)
    finally:
        os.close(fd)
        shutil.rmtree(directory, ignore_errors=True)
    return statistics.median(took)


async def bench(args: argparse.Namespace) -> None:
    args.load_before = os.getloadavg()[0]
    args.fsync_before = fsync_latency(Path(os.environ.get("BENCH_DIR") or tempfile.gettempdir()))
    base = Path(os.environ.get("BENCH_DIR") or tempfile.gettempdir())
    everyone = contenders(args.fastmcp_python, shm=not args.no_shm)
    if args.exit_race_workaround:
        hooks = {"PYTHONPATH": str(hooks_dir(base, None, True))}
        for contender in everyone:
            if contender.staal:
                contender.env = hooks
    for experiment in args.experiment:  # one more staal row each, journals on disk
        tried = hooks_dir(base, None, args.exit_race_workaround, (experiment,))
        everyone.append(Contender(f"staal, --experiment {experiment}", everyone[0].command, [],
                                  staal=True, env={"PYTHONPATH": str(tried)}))
    results = {c.name: Samples() for c in everyone}
    try:
        await rounds(everyone, results, base, args)
    finally:
        for contender in everyone:
            if contender.env:
                shutil.rmtree(contender.env["PYTHONPATH"], ignore_errors=True)
    report(results, args)


async def rounds(everyone: list[Contender], results: dict[str, Samples], base: Path,
                 args: argparse.Namespace) -> None:
    for r in range(args.rounds):
        shift = r % len(everyone)
        for contender in everyone[shift:] + everyone[:shift]:
            await one_round(contender, results[contender.name], base, args)
            s = results[contender.name]
            print(f"round {r + 1}: {contender.name}: cold {s.cold[-1] * 1e3:.0f} ms, "
                  f"p50 {s.p50[-1] * 1e3:.2f} ms, p99 {s.p99[-1] * 1e3:.2f} ms, "
                  f"{s.sequential_rate[-1]:,.0f} calls/s sequential, "
                  f"{s.inflight_rate[-1]:,.0f} calls/s {IN_FLIGHT} in flight", file=sys.stderr)


# -- --profile: where a sequential staal call's time goes ------------------------------------


def hooks_dir(base: Path, trace: Path | None, fix_exit_race: bool,
              experiments: tuple[str, ...] = ()) -> Path:
    """A directory holding a `sitecustomize.py` that installs the tracer
    (servers/trace/tracer.py) in every staal process started with it on the
    PYTHONPATH: the supervisor passes PYTHONPATH on to its zygote, and the
    workers are the zygote's forks."""
    directory = Path(tempfile.mkdtemp(prefix="bench-hooks-", dir=base))
    (directory / "sitecustomize.py").write_text(
        "import sys\n"
        f"sys.path.append({str(TRACE_DIR)!r})\n"
        "import tracer\n"
        f"tracer.install({str(trace) if trace else None!r}, fix_exit_race={fix_exit_race!r}, "
        f"experiments={tuple(experiments)!r})\n")
    return directory


def cpu_seconds(pid: int) -> tuple[float, float]:
    """A process's own CPU time, and that of its children it has reaped."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    own = (int(fields[11]) + int(fields[12])) / tick
    children = (int(fields[13]) + int(fields[14])) / tick
    return own, children


def staal_processes() -> dict[str, int]:
    """The supervisor and zygote this client started (our children's tree)."""
    import psutil

    found = {}
    for child in psutil.Process().children(recursive=True):
        cmd = " ".join(child.cmdline())
        if "staal.worker.zygote" in cmd and "zygote" not in found:
            if child.parent() is not None and "zygote" not in " ".join(child.parent().cmdline()):
                found["zygote"] = child.pid
        elif "staal-supervisor" in cmd or "staal.supervisor" in cmd:
            found.setdefault("supervisor", child.pid)
    return found


async def profile(args: argparse.Namespace) -> None:
    """Staal alone, traced: cold starts, then sequential calls, with CPU time per process."""
    import mcp.client.stdio as sdk_stdio

    sys.path.insert(0, str(TRACE_DIR))
    import tracer  # servers/trace/tracer.py

    base = Path(os.environ.get("BENCH_DIR") or tempfile.gettempdir())
    out = Path(tempfile.mkdtemp(prefix="bench-trace-", dir=base))
    trace = out / "trace.txt"
    hooks = hooks_dir(base, trace, args.exit_race_workaround, tuple(args.experiment))
    staal = contenders(args.fastmcp_python)[0]
    staal.env = {"PYTHONPATH": str(hooks)}
    if args.on_shm:
        staal.base = Path("/dev/shm")
    tracer.start(str(trace))
    original_parse = sdk_stdio._parse_line

    def parse_line(line: str) -> Any:
        tracer.mark("line_read")
        return original_parse(line)

    sdk_stdio._parse_line = parse_line
    try:
        for _ in range(args.cold):
            params, directory = staal.prepare(base)
            tracer.mark("spawn")
            async with Session(params, directory / "stderr.log") as client:
                await client.list_tools()
                tracer.mark("listed")
            shutil.rmtree(directory, ignore_errors=True)
        params, directory = staal.prepare(base)
        async with Session(params, directory / "stderr.log") as client:
            await client.list_tools()
            for i in range(args.warmup):
                await client.call_tool("noop", {"x": i})
            pids = staal_processes()
            before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            client_before = os.times()
            begin = time.perf_counter()
            for i in range(args.calls):
                tracer.mark("call>")
                await client.call_tool("noop", {"x": i})
                tracer.mark("call<")
            elapsed = time.perf_counter() - begin
            client_after = os.times()
            after = {name: cpu_seconds(pid) for name, pid in pids.items()}
            total = args.inflight // IN_FLIGHT * IN_FLIGHT
            flight_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            flight_client_before = os.times()
            flight_elapsed, _ = await in_flight(client, total)
            flight_client_after = os.times()
            flight_after = {name: cpu_seconds(pid) for name, pid in pids.items()}
    finally:
        sdk_stdio._parse_line = original_parse
        shutil.rmtree(hooks, ignore_errors=True)
    tracer.flush()
    print(f"trace: {trace}; server stderr: {directory / 'stderr.log'}", file=sys.stderr)
    n = args.calls
    print(f"\n### Staal, traced: {n} sequential calls, {elapsed / n * 1e6:.0f} µs each; "
          f"then {total} with {IN_FLIGHT} in flight, {total / flight_elapsed:.0f} calls/s")
    print("\n#### CPU time per call, by process\n")
    print(f"| process | sequential | {IN_FLIGHT} in flight |")
    print("|---|---|---|")

    def used(a: Any, b: Any, key: str, index: int, count: int) -> str:
        return f"{(b[key][index] - a[key][index]) / count * 1e6:.0f} µs"

    def client_used(a: Any, b: Any, count: int) -> str:
        return f"{(b.user + b.system - a.user - a.system) / count * 1e6:.0f} µs"

    print(f"| client (the SDK, this process) | {client_used(client_before, client_after, n)} | "
          f"{client_used(flight_client_before, flight_client_after, total)} |")
    if "supervisor" in pids:
        print(f"| supervisor | {used(before, after, 'supervisor', 0, n)} | "
              f"{used(flight_before, flight_after, 'supervisor', 0, total)} |")
    if "zygote" in pids:
        print(f"| zygote (forking) | {used(before, after, 'zygote', 0, n)} | "
              f"{used(flight_before, flight_after, 'zygote', 0, total)} |")
        print(f"| workers (start, run, exit; reaped by the zygote) | "
              f"{used(before, after, 'zygote', 1, n)} | "
              f"{used(flight_before, flight_after, 'zygote', 1, total)} |")
    print(f"| wall time per call | {elapsed / n * 1e6:.0f} µs | {flight_elapsed / total * 1e6:.0f} µs |")
    print("\n(CPU from /proc and os.times, in clock ticks of 10 ms: over many calls, not one. "
          "The tracer's marks are included.)")
    tracer.summarize(str(trace))
    tracer.summarize_cold(str(trace))


async def py_spy(args: argparse.Namespace) -> None:
    """Sample the supervisor with py-spy (`pip install py-spy`) during
    sequential calls, untraced, and print where its CPU time goes."""
    import subprocess
    from collections import Counter

    base = Path(os.environ.get("BENCH_DIR") or tempfile.gettempdir())
    staal = contenders(args.fastmcp_python)[0]
    if args.exit_race_workaround:
        staal.env = {"PYTHONPATH": str(hooks_dir(base, None, True))}
    if args.on_shm:
        staal.base = Path("/dev/shm")
    params, directory = staal.prepare(base)
    raw = base / f"{directory.name}.pyspy.txt"
    async with Session(params, directory / "stderr.log") as client:
        await client.list_tools()
        for i in range(args.warmup):
            await client.call_tool("noop", {"x": i})
        supervisor = staal_processes()["supervisor"]
        command = ["py-spy", "record", "--pid", str(supervisor), "--rate", "1000",
                   "--format", "raw", "--gil", "--nonblocking", "--output", str(raw)]
        spy = subprocess.Popen(command, stdout=subprocess.DEVNULL,  # noqa: ASYNC220
                               stderr=subprocess.DEVNULL)
        await asyncio.sleep(1.0)  # py-spy attaches
        begin = time.perf_counter()
        for i in range(args.calls):
            await client.call_tool("noop", {"x": i})
        elapsed = time.perf_counter() - begin
        spy.send_signal(2)
        spy.wait()
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        n = int(count)
        total += n
        leaf = frames[-1]
        own[leaf] += n
        for frame in set(frames[1:]):
            inclusive[frame] += n
    print(f"\n### py-spy on the supervisor: {args.calls} sequential calls, "
          f"{elapsed / args.calls * 1e6:.0f} µs each; {total} samples at 1 kHz of a thread holding the GIL "
          f"(≈ {total / args.calls * 1e3:.0f} µs of Python per call)\n")
    print("| function (file:line) | self | inclusive |")
    print("|---|---|---|")
    for frame, n in own.most_common(args.top):
        print(f"| `{frame}` | {n / total:.1%} | {inclusive[frame] / total:.1%} |")
    print("\n| staal's own functions, by inclusive share | inclusive |")
    print("|---|---|")
    ours = [(frame, n) for frame, n in inclusive.most_common()
            if any(f"({part}/" in frame for part in ("supervisor", "shared", "protocol"))]
    for frame, n in ours[:args.top]:
        print(f"| `{frame}` | {n / total:.1%} |")
    print(f"\nraw samples: {raw}", file=sys.stderr)


def worker_costs(args: argparse.Namespace) -> None:
    """What a worker costs by CPU time, step by step (servers/worker_costs.py)."""
    import json
    import subprocess

    base = Path(os.environ.get("BENCH_DIR") or tempfile.gettempdir())
    staal = contenders(args.fastmcp_python)[0]
    if args.on_shm:
        staal.base = Path("/dev/shm")
    _, directory = staal.prepare(base)
    journals = directory / "journals"
    journals.mkdir()
    try:
        output = subprocess.run(
            [sys.executable, str(SERVERS / "worker_costs.py"), str(directory / "manifest.json"),
             str(journals), str(args.forks)], check=True, capture_output=True, text=True).stdout
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    results = json.loads(output)
    zygote = results.pop("zygote")
    labels = {
        "A": "fork, exit at once",
        "B": "A + the worker's ZeroMQ context and DEALER socket, closed again",
        "C": "B + the channel's Python thread",
        "D": "A + one run of the no-op tool (journal " + ("on /dev/shm" if args.on_shm else "on disk") + ")",
        "E": "C + D: a worker's work, without its messages",
    }
    print(f"\n### What one worker costs ({args.forks} forks per case; the zygote: "
          f"{zygote.get('VmRSS', '?')} resident, {zygote.get('VmSize', '?')} mapped)\n")
    print("| case | child CPU | minor faults | zygote CPU per fork | fork to reaped (wall) |")
    print("|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name}: {labels[name]} | {r['child_cpu_us']:.0f} µs | {r['minor_faults']:.0f} | "
              f"{r['parent_cpu_us']:.0f} µs | {r['wall_us']:.0f} µs |")
    print("\n(CPU and faults from each child's rusage, medians; the zygote's CPU per fork is a mean.)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=1000, help="sequential calls per round")
    parser.add_argument("--inflight", type=int, default=2000, help="calls per round, 16 in flight")
    parser.add_argument("--cold", type=int, default=3, help="cold starts per round")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--fastmcp-python", default=sys.executable,
                        help="the interpreter that has fastmcp installed")
    parser.add_argument("--no-shm", action="store_true",
                        help="leave out the staal row with its journals on /dev/shm")
    parser.add_argument("--profile", action="store_true", help="trace staal's side only")
    parser.add_argument("--exit-race-workaround", action="store_true",
                        help="run staal with the workaround for the worker-exit race in "
                             "supervisor/pool.py (see BENCHMARKS.md)")
    parser.add_argument("--py-spy", action="store_true",
                        help="sample staal's supervisor with py-spy during sequential calls")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--experiment", action="append", default=[], choices=["defer-fork"],
                        help="try a change to staal from outside (servers/trace/tracer.py), as "
                             "one more staal row (--profile: on the traced server): defer-fork "
                             "asks for a replacement worker when a run ends")
    parser.add_argument("--worker-costs", action="store_true",
                        help="what one worker costs by CPU time, step by step")
    parser.add_argument("--forks", type=int, default=200, help="--worker-costs: forks per case")
    parser.add_argument("--on-shm", action="store_true",
                        help="--profile, --py-spy: staal's journals on /dev/shm (fsyncs cost nothing)")
    args = parser.parse_args()
    if args.worker_costs:
        worker_costs(args)
        return
    asyncio.run(py_spy(args) if args.py_spy else profile(args) if args.profile else bench(args))


if __name__ == "__main__":
    main()
