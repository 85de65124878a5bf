"""The run engine against references, in one run.

1. Per-action overhead of the journaled broker: a GET through a program's
   `HttpGet` capability (broker check, durable intent, request, outcome)
   against a bare `httpx.Client.get` of the same URL on the same local
   service. The journal is on the disk the benchmark runs on (BENCH_DIR, or
   the temporary directory); a second staal row puts it on /dev/shm to show
   what the fsync costs.
2. The slowdown of `max_steps` counting: a pure-Python loop in a program
   module, counted against not counted.

    python benchmarks/engine.py [--requests 500] [--rounds 5]

Prints Markdown tables of medians and ratios (staal / reference).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from staal.journal.records import Header
from staal.journal.writer import JournalWriter
from staal.manifest.model import Grant, NetConfig
from staal.runtime.clock import SYSTEM_CLOCK
from staal.runtime.ids import new_run_id
from staal.worker.capabilities.http import HttpClient, HttpGetCapability
from staal.worker.capabilities.services import Services
from staal.worker.confinement.steps import StepCounter
from staal.worker.runs.broker import GrantState
from staal.worker.runs.engine import RunContext
from staal.worker.runs.program import load_module
from staal.worker.runs.spans import RunRecorder

LOOP = """
def spin(n):
    total = 0
    for i in range(n):
        total += i
    return total

def work(n):
    items = {}
    for i in range(n):
        key = "k" + str(i % 97)
        items[key] = items.get(key, 0) + i
    return len(items)
"""


def bare_gets(url: str, count: int) -> float:
    with httpx.Client() as client:
        client.get(url)
        start = time.perf_counter()
        for _ in range(count):
            client.get(url).json()
        return time.perf_counter() - start


def staal_gets(url: str, count: int, directory: Path, spans: RunRecorder | None = None,
               clock: Callable[[], float] = time.perf_counter) -> float:
    """`count` GETs through the broker; `spans` records each one's span as
    a traced run does (benchmarks/spans.py); `clock` what is measured."""
    run_id = new_run_id()
    header = Header(run=run_id, tool="bench", program="/bench.py", program_sha256="0" * 64,
                    config_sha256="0" * 64, inputs_sha256="0" * 64, runtime="bench",
                    time=SYSTEM_CLOCK.now_ms())
    writer = JournalWriter.create(directory / f"{run_id}.journal", header)
    ctx = RunContext(run_id, writer, SYSTEM_CLOCK, header.time, spans=spans)
    state = GrantState.for_param("get", Grant(cap="net.http.get", only=(url,)))
    ctx.params["get"] = state
    services = Services(clock=SYSTEM_CLOCK)
    services._http = HttpClient(NetConfig(10_000, 2_000))
    get = HttpGetCapability(ctx, state, services)
    get.get(url)  # one op first: the same warm connection as the bare client
    start = clock()
    for _ in range(count):
        get.get(url).json()
    elapsed = clock() - start
    services.http.close()
    writer.close()
    return elapsed


def loops(module, n: int, counted: bool, which: str) -> float:
    function = getattr(module, which)
    counter = StepCounter(10**12, Path(module.__file__).parent)
    start = time.perf_counter()
    if counted:
        counter.start()
    try:
        function(n)
    finally:
        counter.stop()
    return time.perf_counter() - start


def table(title: str, rows: dict[str, list[float]], per: int, ours: str, reference: str) -> None:
    medians = {name: statistics.median(times) / per for name, times in rows.items()}
    print(f"\n### {title}\n")
    print(f"| contender | median | {ours.split(' (')[0]} / this |")
    print("|---|---|---|")
    for name, value in medians.items():
        print(f"| {name} | {value * 1e6:.1f} µs | {medians[ours] / value:.2f} |")
    print(f"\nratio {ours} / {reference}: {medians[ours] / medians[reference]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--loop", type=int, default=2_000_000)
    args = parser.parse_args()
    service = Path(__file__).resolve().parent / "servers" / "http_service.py"
    server = subprocess.Popen([sys.executable, str(service)], stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        url = f"http://127.0.0.1:{port}/v1/orders/o1"
        disk = Path(os.environ.get("BENCH_DIR") or tempfile.gettempdir())
        shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
        rows: dict[str, list[float]] = {"bare httpx.Client.get": [],
                                        "staal HttpGet.get, journal on disk": []}
        if shm:
            rows["staal HttpGet.get, journal on /dev/shm"] = []
        for _ in range(args.rounds):
            rows["bare httpx.Client.get"].append(bare_gets(url, args.requests))
            with tempfile.TemporaryDirectory(dir=disk) as tmp:
                rows["staal HttpGet.get, journal on disk"].append(staal_gets(url, args.requests, Path(tmp)))
            if shm:
                with tempfile.TemporaryDirectory(dir=shm) as tmp:
                    rows["staal HttpGet.get, journal on /dev/shm"].append(
                        staal_gets(url, args.requests, Path(tmp)))
        table("One GET to a local service", rows, args.requests,
              "staal HttpGet.get, journal on disk", "bare httpx.Client.get")
    finally:
        server.kill()
        server.wait()

    with tempfile.TemporaryDirectory() as tmp:
        program = Path(tmp) / "program_loops.py"
        program.write_text(textwrap.dedent(LOOP))
        module = load_module(program)
        for which in ("spin", "work"):
            steps = {"not counted": [], "max_steps counting": []}
            for _ in range(args.rounds):
                steps["not counted"].append(loops(module, args.loop, False, which))
                steps["max_steps counting"].append(loops(module, args.loop, True, which))
            table(f"A pure-Python loop ({which}), per iteration", steps, args.loop,
                  "max_steps counting", "not counted")


if __name__ == "__main__":
    main()
