"""Measuring one server in `server.py`: cold starts, and sessions of
sequential calls and calls kept in flight, each phase with the CPU time it
cost the server's whole process tree, the client and the local service
(`proctree.py` says how that is counted)."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp import Client, MCPError
from proctree import children_cpu, own_cpu, root_cpu, tree_cpu
from server_contenders import NOOP, Contender, Scenario, Service, Session

IN_FLIGHT = 16


@dataclass
class Phase:
    """One phase of a session: its calls, wall time and CPU per process group."""
    calls: int
    elapsed: float
    server_cpu: float
    client_cpu: float
    service_cpu: float
    failed: int
    latencies: list[float] = field(default_factory=list)
    root_cpu: float = 0.0  # the server's own process alone (staal: the supervisor)


@dataclass
class Samples:
    """One server in one scenario, over rounds: one entry per round."""
    p50: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    sequential: list[Phase] = field(default_factory=list)
    inflight: list[Phase] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)  # message (digits as #) -> calls
    calls: int = 0
    # per session: the tree's CPU by the last snapshot, and the kernel's total after it exited
    accounting: list[tuple[float, float]] = field(default_factory=list)
    durability: list[dict[str, Any]] = field(default_factory=list)  # DBOS's SQLite connections


class Tally:
    """Checks each answer; counts the calls that failed, by message."""

    def __init__(self, failures: Counter[str]) -> None:
        self.failures = failures
        self.calls = 0
        self.failed = 0

    async def call(self, client: Client, scenario: Scenario, i: int, service: str | None) -> None:
        self.calls += 1
        try:
            result = await client.call_tool(scenario.tool, scenario.arguments(i, service))
        except MCPError as exc:
            self._failed(f"MCP error: {exc}")
            return
        if result.is_error:
            self._failed(" ".join(getattr(part, "text", "") for part in result.content))
        elif (result.structured_content or {}).get("result") != i:
            self._failed(f"wrong answer: {result.structured_content}")

    def _failed(self, message: str) -> None:
        self.failed += 1
        self.failures[_shape(message)] += 1


def _shape(message: str) -> str:
    """A failure's message with numbers and run ids as #, so alike failures count together."""
    return re.sub(r"[0-9a-f]{32}|\d+", "#", message)[:300]


async def cold_start(contender: Contender, base: Path) -> float:
    """Spawn to the first `tools/list` answered, a new process (the no-op server)."""
    params, directory = contender.prepare(base)
    try:
        start = time.perf_counter()
        async with Session(params, directory / "stderr.log") as client:
            listed = await client.list_tools()
            elapsed = time.perf_counter() - start
            assert any(tool.name == NOOP.tool for tool in listed.tools), listed
        return elapsed
    finally:
        shutil.rmtree(directory, ignore_errors=True)


async def phase(calls: int, run: Callable[[], Awaitable[list[float]]], tally: Tally, server: int,
                service: Service | None) -> Phase:
    """Run `calls` calls by `run`, between two snapshots of each process's CPU."""
    failed_before = tally.failed
    service_before = tree_cpu(service.pid) if service else 0.0
    server_before = tree_cpu(server)
    root_before = root_cpu(server)
    client_before = own_cpu()
    begin = time.perf_counter()
    latencies = await run()
    elapsed = time.perf_counter() - begin
    client_after = own_cpu()
    root_after = root_cpu(server)
    server_after = tree_cpu(server)
    service_after = tree_cpu(service.pid) if service else 0.0
    return Phase(calls, elapsed, server_after - server_before, client_after - client_before,
                 service_after - service_before, tally.failed - failed_before, latencies,
                 root_cpu=root_after - root_before)


async def sequential(call: Callable[[int], Awaitable[Any]], count: int) -> list[float]:
    """`count` calls one after the other; their latencies."""
    latencies = []
    for i in range(count):
        start = time.perf_counter()
        await call(i)
        latencies.append(time.perf_counter() - start)
    return latencies


async def in_flight(call: Callable[[int], Awaitable[Any]], count: int) -> list[float]:
    """`count` calls (a multiple of IN_FLIGHT), IN_FLIGHT at a time: each of
    IN_FLIGHT coroutines calls again as soon as its previous call is answered."""
    per = count // IN_FLIGHT

    async def caller(k: int) -> None:
        for i in range(per):
            await call(k * per + i)

    await asyncio.gather(*(caller(k) for k in range(IN_FLIGHT)))
    return []


async def session(contender: Contender, scenario: Scenario, samples: Samples, base: Path,
                  args: Any, service: Service | None) -> Path | None:
    """One session: warm-up, sequential calls, calls in flight. Returns the
    server's directory, kept if a call failed (for its stderr), else None."""
    url = service.url if service else None
    params, directory = contender.prepare(base, scenario, url)
    tally = Tally(samples.failures)
    kernel_before = children_cpu()
    server = Session(params, directory / "stderr.log")
    async with server as client:
        await client.list_tools()
        warmup = Tally(Counter())  # the warm-up's failures are not the measurement's
        for i in range(args.warmup):
            await warmup.call(client, scenario, i, url)

        def call(i: int) -> Awaitable[None]:
            return tally.call(client, scenario, i, url)

        total = args.inflight // IN_FLIGHT * IN_FLIGHT
        seq = await phase(args.calls, lambda: sequential(call, args.calls), tally, server.pid, service)
        flight = await phase(total, lambda: in_flight(call, total), tally, server.pid, service)
        sampled = tree_cpu(server.pid)
    samples.accounting.append((sampled, children_cpu() - kernel_before))
    samples.calls += tally.calls
    ordered = sorted(seq.latencies)
    samples.p50.append(percentile(ordered, 50))
    samples.p99.append(percentile(ordered, 99))
    samples.sequential.append(seq)
    samples.inflight.append(flight)
    durability = directory / "durability.json"
    if durability.exists():
        samples.durability.extend(json.loads(durability.read_text()))
    if tally.failed:
        return directory
    shutil.rmtree(directory, ignore_errors=True)
    return None


def percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of a sorted list."""
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def median_phase(phases: list[Phase], key: str) -> float:
    """The median over rounds of a phase's `key`: 'rate' (calls/s), or a CPU
    ('server_cpu', 'root_cpu', 'client_cpu', 'service_cpu') per call."""
    if key == "rate":
        return statistics.median(p.calls / p.elapsed for p in phases)
    return statistics.median(getattr(p, key) / p.calls for p in phases)
