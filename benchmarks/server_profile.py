"""Profiling staal's side of `server.py` (nothing in staal is edited for it):
--profile, --py-spy and --worker-costs; `server.py`'s docstring says what
each prints."""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psutil
from mcp import Client
from proctree import own_cpu, process_cpu
from server_contenders import SCENARIOS, SERVERS, Scenario, Service, Session, bench_dir, contenders
from server_measure import IN_FLIGHT, in_flight, sequential

TRACE_DIR = SERVERS / "trace"


def scenario_of(args: argparse.Namespace) -> tuple[Scenario, Service | None]:
    """The scenario to profile (the first one asked for), and its service if it needs one."""
    scenario = SCENARIOS[args.scenario[0]]
    return scenario, Service(args.service_delay_ms) if scenario.tool == "get" else None


async def warmed(client: Client, scenario: Scenario, url: str | None,
                 count: int) -> Callable[[int], Awaitable[Any]]:
    """The scenario's call on `client` (its answer unchecked), after listing
    the tools and `count` calls to warm the server up."""
    async def call(i: int) -> Any:
        return await client.call_tool(scenario.tool, scenario.arguments(i, url))

    await client.list_tools()
    for i in range(count):
        await call(i)
    return call


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
        f"experiments={tuple(experiments)!r}, scratch={str(directory)!r})\n")
    return directory


def staal_processes() -> dict[str, int]:
    """The supervisor and zygote this client started (our children's tree)."""
    found = {}
    for child in psutil.Process().children(recursive=True):
        cmd = " ".join(child.cmdline())
        if "staal.worker.processes.zygote" in cmd and "zygote" not in found:
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

    base = bench_dir()
    scenario, service = scenario_of(args)
    url = service.url if service else None
    out = Path(tempfile.mkdtemp(prefix="bench-trace-", dir=base))
    trace = out / "trace.txt"
    hooks = hooks_dir(base, trace, args.exit_race_workaround, tuple(args.experiment))
    staal = contenders(args.fastmcp_python, {"staal"})[0]
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
        params, directory = staal.prepare(base, scenario, url)
        async with Session(params, directory / "stderr.log") as client:
            call = await warmed(client, scenario, url, args.warmup)
            pids = staal_processes()
            before = {name: process_cpu(pid) for name, pid in pids.items()}
            client_before = own_cpu()
            begin = time.perf_counter()
            for i in range(args.calls):
                tracer.mark("call>")
                await call(i)
                tracer.mark("call<")
            elapsed = time.perf_counter() - begin
            client_after = own_cpu()
            after = {name: process_cpu(pid) for name, pid in pids.items()}
            total = args.inflight // IN_FLIGHT * IN_FLIGHT
            flight_before = {name: process_cpu(pid) for name, pid in pids.items()}
            flight_client_before = own_cpu()
            flight_begin = time.perf_counter()
            await in_flight(call, total)
            flight_elapsed = time.perf_counter() - flight_begin
            flight_client_after = own_cpu()
            flight_after = {name: process_cpu(pid) for name, pid in pids.items()}
    finally:
        sdk_stdio._parse_line = original_parse
        shutil.rmtree(hooks, ignore_errors=True)
        if service:
            service.close()
    tracer.flush()
    print(f"trace: {trace}; server stderr: {directory / 'stderr.log'}", file=sys.stderr)
    n = args.calls
    print(f"\n### Staal, traced, {scenario.title.lower()}: {n} sequential calls, "
          f"{elapsed / n * 1e6:.0f} µs each; then {total} with {IN_FLIGHT} in flight, "
          f"{total / flight_elapsed:.0f} calls/s")
    print("\n#### CPU time per call, by process\n")
    print(f"| process | sequential | {IN_FLIGHT} in flight |")
    print("|---|---|---|")

    def used(a: Any, b: Any, key: str, index: int, count: int) -> str:
        return f"{(b[key][index] - a[key][index]) / count * 1e6:.0f} µs"

    def client_used(a: float, b: float, count: int) -> str:
        return f"{(b - a) / count * 1e6:.0f} µs"

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
    print("\n(CPU as `proctree.py` reads it: own time to the nanosecond, reaped workers' in clock "
          "ticks of 10 ms, so over many calls, not one. The tracer's marks are included.)")
    tracer.summarize(str(trace))
    tracer.summarize_cold(str(trace))


async def py_spy(args: argparse.Namespace) -> None:
    """Sample staal with py-spy (`pip install -e '.[bench]'`) during sequential
    calls, untraced, and print where its CPU time goes: the supervisor, or
    (--py-spy-workers) the zygote and every worker it forks (`--subprocesses`)."""
    from collections import Counter

    base = bench_dir()
    scenario, service = scenario_of(args)
    url = service.url if service else None
    staal = contenders(args.fastmcp_python, {"staal"})[0]
    if args.exit_race_workaround or args.experiment:
        staal.env = {"PYTHONPATH": str(hooks_dir(base, None, args.exit_race_workaround,
                                                 tuple(args.experiment)))}
    if args.on_shm:
        staal.base = Path("/dev/shm")
    params, directory = staal.prepare(base, scenario, url)
    raw = base / f"{directory.name}.pyspy.txt"
    target = "workers" if args.py_spy_workers else "supervisor"
    try:
        async with Session(params, directory / "stderr.log") as client:
            call = await warmed(client, scenario, url, args.warmup)
            pid = staal_processes()["zygote" if args.py_spy_workers else "supervisor"]
            command = ["py-spy", "record", "--pid", str(pid), "--rate", "1000",
                       "--format", "raw", "--gil", "--nonblocking", "--output", str(raw)]
            if args.py_spy_workers:
                command.append("--subprocesses")
            spy = subprocess.Popen(command, stdout=subprocess.DEVNULL,  # noqa: ASYNC220
                                   stderr=subprocess.DEVNULL)
            await asyncio.sleep(1.0)  # py-spy attaches
            begin = time.perf_counter()
            await sequential(call, args.calls)
            elapsed = time.perf_counter() - begin
            spy.send_signal(2)
            spy.wait()
    finally:
        if service:
            service.close()
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
    print(f"\n### py-spy on the {target}, {scenario.title.lower()}: {args.calls} sequential calls, "
          f"{elapsed / args.calls * 1e6:.0f} µs each; {total} samples at 1 kHz of a thread holding the GIL "
          f"(≈ {total / args.calls * 1e3:.0f} µs of Python per call)\n")
    print("| function (file:line) | self | inclusive |")
    print("|---|---|---|")
    for frame, n in own.most_common(args.top):
        print(f"| `{frame}` | {n / total:.1%} | {inclusive[frame] / total:.1%} |")
    print("\n| staal's own functions, by inclusive share | inclusive |")
    print("|---|---|")
    ours = [(frame, n) for frame, n in inclusive.most_common()
            if any(f"({part}/" in frame for part in ("supervisor", "shared", "protocol", "worker"))]
    for frame, n in ours[:args.top]:
        print(f"| `{frame}` | {n / total:.1%} |")
    print(f"\nraw samples: {raw}", file=sys.stderr)


def worker_costs(args: argparse.Namespace) -> None:
    """What a worker costs by CPU time, step by step (servers/worker_costs.py)."""
    base = bench_dir()
    staal = contenders(args.fastmcp_python, {"staal"})[0]
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
        "C": "B + a `threading.Thread` (the channel's before issue 12 item 3)",
        "D": "A + one run of the no-op tool (journal " + ("on /dev/shm" if args.on_shm else "on disk") + ")",
        "E": "C + D: a worker's work, without its messages",
        "F": "D after the idle rehearsal (`serve.rehearse`)",
        "G": "D with the collector off (`gc.disable()` after the fork)",
        "H": "B + a bare `_thread` thread (the channel's heartbeat thread now)",
    }
    print(f"\n### What one worker costs ({args.forks} forks per case; the zygote: "
          f"{zygote.get('VmRSS', '?')} resident, {zygote.get('VmSize', '?')} mapped)\n")
    print("| case | child CPU | minor faults | zygote CPU per fork | fork to reaped (wall) |")
    print("|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name}: {labels[name]} | {r['child_cpu_us']:.0f} µs | {r['minor_faults']:.0f} | "
              f"{r['parent_cpu_us']:.0f} µs | {r['wall_us']:.0f} µs |")
    print("\n(CPU and faults from each child's rusage, medians; the zygote's CPU per fork is a mean.)")
