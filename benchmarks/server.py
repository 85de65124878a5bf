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

Per round, for each server in turn (the order rotates every round):
cold start (spawn to the first `tools/list` answered, --cold samples, each a
new process), then one session: a few warm-up calls, --calls sequential calls
(p50, p99, calls/s), and --inflight calls kept in flight by 16 coroutines
under `asyncio.gather` (calls/s). Reports medians over rounds and the ratios
the server issue's goals name (issue 5 item 10).

    python benchmarks/server.py [--rounds 5] [--calls 1000] [--inflight 2000] [--cold 3]
    python benchmarks/server.py --profile [--calls 1000]   # staal's side only

--profile runs staal alone with `servers/trace/sitecustomize.py` on the
PYTHONPATH of the supervisor, the zygote and its workers: it timestamps each
step of a sequential call in every process (CLOCK_MONOTONIC, shared by all
of them), and times every fsync by caller, and prints where a call's time goes.

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
from collections import defaultdict
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

HERE = Path(__file__).resolve().parent
SERVERS = HERE / "servers"
TRACE_DIR = SERVERS / "trace"
MODE = "legacy"
IN_FLIGHT = 16

STAAL = "staal"
MCPSERVER = "MCPServer (official SDK)"
FASTMCP = "FastMCP"


@dataclass
class Contender:
    name: str
    command: str
    args: list[str]
    staal: bool = False
    env: dict[str, str] | None = None

    def prepare(self, base: Path) -> tuple[StdioServerParameters, Path]:
        """Parameters for a new server process, and a fresh directory for it
        (staal's manifest, program, ledger and journals; every server's stderr)."""
        directory = Path(tempfile.mkdtemp(prefix="bench-server-", dir=base))
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


def contenders(fastmcp_python: str) -> list[Contender]:
    bin_dir = Path(sys.executable).parent
    supervisor = bin_dir / "staal-supervisor"
    return [
        Contender(STAAL, str(supervisor), [], staal=True),
        Contender(MCPSERVER, sys.executable, [str(SERVERS / "mcpserver_noop.py")]),
        Contender(FASTMCP, fastmcp_python, [str(SERVERS / "fastmcp_noop.py")]),
    ]


class Session:
    """One server process and the SDK client connected to it."""

    def __init__(self, params: StdioServerParameters, stderr: Path) -> None:
        self.params = params
        self.stderr_path = stderr
        self.stack = AsyncExitStack()
        self.client: Client | None = None

    async def __aenter__(self) -> Client:
        errlog = self.stack.enter_context(open(self.stderr_path, "a"))
        transport = stdio_client(self.params, errlog=errlog)
        self.client = await self.stack.enter_async_context(
            Client(transport, mode=MODE, read_timeout_seconds=60))
        return self.client

    async def __aexit__(self, *exc: Any) -> None:
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
    finally:
        shutil.rmtree(directory, ignore_errors=True)


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
          f"{args.rounds} rounds, medians over rounds.")

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


async def bench(args: argparse.Namespace) -> None:
    base = Path(os.environ.get("BENCH_DIR") or tempfile.gettempdir())
    everyone = contenders(args.fastmcp_python)
    results = {c.name: Samples() for c in everyone}
    for r in range(args.rounds):
        shift = r % len(everyone)
        for contender in everyone[shift:] + everyone[:shift]:
            await one_round(contender, results[contender.name], base, args)
            s = results[contender.name]
            print(f"round {r + 1}: {contender.name}: cold {s.cold[-1] * 1e3:.0f} ms, "
                  f"p50 {s.p50[-1] * 1e3:.2f} ms, p99 {s.p99[-1] * 1e3:.2f} ms, "
                  f"{s.sequential_rate[-1]:,.0f} calls/s sequential, "
                  f"{s.inflight_rate[-1]:,.0f} calls/s {IN_FLIGHT} in flight", file=sys.stderr)
    report(results, args)


# -- --profile: where a sequential staal call's time goes ------------------------------------


def read_trace(path: Path) -> list[tuple[int, str, str, int]]:
    events = []
    for line in path.read_text().splitlines():
        pid, what, name, t = line.split(" ")
        events.append((int(pid), what, name, int(t)))
    return events


async def profile(args: argparse.Namespace) -> None:
    """Run staal alone under the tracer and print the breakdown."""
    base = Path(os.environ.get("BENCH_DIR") or tempfile.gettempdir())
    trace = Path(tempfile.mkdtemp(prefix="bench-trace-", dir=base)) / "trace.txt"
    env = {"PYTHONPATH": str(TRACE_DIR), "STAAL_BENCH_TRACE": str(trace)}
    staal = contenders(args.fastmcp_python)[0]
    staal.env = env
    params, directory = staal.prepare(base)
    # The client marks each call's start and end, and every line it reads, in the same file.
    import mcp.client.stdio as sdk_stdio

    sys.path.insert(0, str(TRACE_DIR))
    import sitecustomize as tracer  # noqa: E402  (servers/trace/sitecustomize.py)

    tracer.start(str(trace))
    original_parse = sdk_stdio._parse_line

    def parse_line(line: str) -> Any:
        tracer.mark("client.line_read")
        return original_parse(line)

    sdk_stdio._parse_line = parse_line
    try:
        async with Session(params, directory / "stderr.log") as client:
            await client.list_tools()
            for i in range(args.warmup):
                await client.call_tool("noop", {"x": i})
            tracer.mark("client.measure")
            for i in range(args.calls):
                tracer.mark("client.call>")
                await client.call_tool("noop", {"x": i})
                tracer.mark("client.call<")
            tracer.mark("client.measure_end")
    finally:
        sdk_stdio._parse_line = original_parse
    print(f"trace: {trace}; server stderr: {directory / 'stderr.log'}", file=sys.stderr)
    tracer.summarize(read_trace(trace), args.calls)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=1000, help="sequential calls per round")
    parser.add_argument("--inflight", type=int, default=2000, help="calls per round, 16 in flight")
    parser.add_argument("--cold", type=int, default=3, help="cold starts per round")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--fastmcp-python", default=sys.executable,
                        help="the interpreter that has fastmcp installed")
    parser.add_argument("--profile", action="store_true", help="trace staal's side only")
    args = parser.parse_args()
    asyncio.run(profile(args) if args.profile else bench(args))


if __name__ == "__main__":
    main()
