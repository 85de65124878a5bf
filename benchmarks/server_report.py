"""The Markdown report of `server.py`: per scenario, sequential and in-flight
tables with each server's CPU per call (its whole tree, and its main process
alone) beside the client's, cold start, the failures, the check of the CPU
accounting, DBOS's durability settings, and issue 26's goals over stdio,
each ratio against its goal, for each of staal's `runs_per_worker` rows
(`goal_rows`, which `goals.py` prints too)."""

from __future__ import annotations

import os
import platform
import statistics
from collections import Counter
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from server_contenders import DBOS, GET, MCPSERVER, MODE, NOOP, Scenario
from server_measure import IN_FLIGHT, Samples, median_phase

CORES = os.cpu_count() or 1


def version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def metric(s: Samples, key: str) -> float:
    """A server's median over rounds of `key` in one scenario."""
    if key in ("p50", "p99"):
        return statistics.median(getattr(s, key))
    mode, _, what = key.partition(":")
    return median_phase(s.sequential if mode == "seq" else s.inflight, what)


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} µs"


def ceiling(cpu: float) -> str:
    return f"{CORES / cpu:,.0f}" if cpu > 0 else "∞"


@dataclass(frozen=True)
class Goal:
    label: str
    scenario: Scenario | None  # None: cold start
    key: str
    reference: str
    at_most: bool  # ≤ bound, else ≥ bound
    bound: float


# Issue 26's goals over stdio (its HTTP goal is `server_http.py`'s; `goals.py` runs both).
GOALS = [
    Goal("no-op server CPU per call (sequential), staal / MCPServer", NOOP, "seq:server_cpu",
         MCPSERVER, True, 3.0),
    Goal("no-op p50, staal / MCPServer", NOOP, "p50", MCPSERVER, True, 3.0),
    Goal(f"no-op {IN_FLIGHT} in flight calls/s, staal / MCPServer", NOOP, "flight:rate", MCPSERVER,
         False, 0.5),
    Goal(f"no-op {IN_FLIGHT} in flight calls/s, staal / DBOS alternative", NOOP, "flight:rate", DBOS,
         False, 5.0),
    Goal("GET p50, staal / MCPServer with a shared httpx client", GET, "p50", MCPSERVER, True, 1.5),
    Goal("cold start, staal / MCPServer", None, "cold", MCPSERVER, True, 0.5),
]
# Issue 26 item 3: the supervisor's own CPU per no-op call, about a millisecond.
SUPERVISOR_MS = 1.0


@dataclass(frozen=True)
class Verdict:
    label: str
    staal: str  # the staal row it is of
    measured: str  # a ratio, or a time; "-" when not measured
    goal: str
    met: str  # "yes", "no", "no (N calls failed)", "not measured"


def verdict(label: str, staal: str, value: float | None, at_most: bool, bound: float,
            failed: int = 0, shown: str = "{:.2f}", unit: str = "×") -> Verdict:
    goal = f"{'≤' if at_most else '≥'} {bound:g}{unit}"
    if value is None:
        return Verdict(label, staal, "-", goal, "not measured")
    met = value <= bound if at_most else value >= bound
    said = "yes" if met and not failed else "no"
    if failed:
        said += f" ({failed} calls failed)"
    return Verdict(label, staal, shown.format(value), goal, said)


def goal_rows(results: dict[tuple[str, str], Samples], cold: dict[str, list[float]],
              staal: str) -> list[Verdict]:
    """Issue 26's stdio goals for the staal row named `staal`, and item 3's
    supervisor CPU per no-op call."""
    rows = []
    for goal in GOALS:
        if goal.scenario is None:
            ratio = (statistics.median(cold[staal]) / statistics.median(cold[goal.reference])
                     if cold.get(staal) and cold.get(goal.reference) else None)
            rows.append(verdict(goal.label, staal, ratio, goal.at_most, goal.bound))
            continue
        ours = results.get((staal, goal.scenario.key))
        theirs = results.get((goal.reference, goal.scenario.key))
        if ours is None or theirs is None or not ours.sequential or not theirs.sequential:
            rows.append(verdict(goal.label, staal, None, goal.at_most, goal.bound))
            continue
        phase = "inflight" if goal.key.startswith("flight:") else "sequential"
        failed = sum(p.failed for s in (ours, theirs) for p in getattr(s, phase))
        rows.append(verdict(goal.label, staal, metric(ours, goal.key) / metric(theirs, goal.key),
                            goal.at_most, goal.bound, failed))
    ours = results.get((staal, NOOP.key))
    supervisor = metric(ours, "seq:root_cpu") * 1e3 if ours and ours.sequential else None
    rows.append(verdict("supervisor alone, CPU per no-op call (sequential; item 3)", staal,
                        supervisor, True, SUPERVISOR_MS, shown="{:.2f} ms", unit=" ms"))
    return rows


def report(results: dict[tuple[str, str], Samples], cold: dict[str, list[float]], run: dict[str, Any],
           args: Any) -> None:
    print(f"\nPython {platform.python_version()}, mcp {version('mcp')}, fastmcp {version('fastmcp')}, "
          f"dbos {version('dbos')}, {CORES} cores; client: the SDK's `Client`, mode={MODE!r}; "
          f"{args.rounds} rounds, medians over rounds. Load average (1, 5, 15 min) "
          f"{run['load_before']} before, {run['load_after']} after, 1 min at each round's start "
          f"{run['load_rounds']}. One fsync after a 200-byte append on the benchmark's disk: median "
          f"{us(run['fsync_before'])} before, {us(run['fsync_after'])} after."
          + (f" The GET service answers in {run['service_ms']:.2f} ms (median of 50 GETs from the "
             f"client's process, its delay {args.service_delay_ms} ms)." if 'service_ms' in run else "")
          + (" staal with --exit-race-workaround." if args.exit_race_workaround else ""))
    print(f"\nCPU is user + system time over each server's whole process tree (staal: supervisor, "
          f"zygote and every worker, reaped ones included; `benchmarks/proctree.py`), per call; "
          f"the client is this process (the SDK's `Client`); 'cores ÷ CPU' is the most calls/s "
          f"{CORES} cores could ever give at that CPU per call.")
    for scenario in run["scenarios"]:
        rows = {name: s for (name, key), s in results.items()
                if key == scenario.key and s.sequential}
        if rows:
            scenario_tables(scenario, rows, args, run["staal"][0])
    if cold:
        print(f"\n#### Cold start: spawn to the first `tools/list` answered (no-op server, "
              f"{args.cold} per round)\n")
        print("| server | median | staal / this |")
        print("|---|---|---|")
        first = run["staal"][0]
        ours = statistics.median(cold[first]) if cold.get(first) else None
        for name, values in cold.items():
            m = statistics.median(values)
            print(f"| {name} | {m * 1e3:.0f} ms | {f'{ours / m:.2f}' if ours else '-'} |")
    failures(results)
    accounting(results)
    durability(results)
    goals(results, cold, run["staal"])


def scenario_tables(scenario: Scenario, rows: dict[str, Samples], args: Any, staal: str) -> None:
    total = args.inflight // IN_FLIGHT * IN_FLIGHT
    print(f"\n#### {scenario.title}: sequential calls ({args.calls} per round)\n")
    phase_table(scenario, rows, "seq", staal)
    print(f"\n#### {scenario.title}: {IN_FLIGHT} calls in flight ({total} per round)\n")
    phase_table(scenario, rows, "flight", staal)


def phase_table(scenario: Scenario, rows: dict[str, Samples], mode: str, staal: str) -> None:
    """One phase ('seq' or 'flight') of one scenario, a row per server."""
    sequential = mode == "seq"
    service = scenario is GET
    compared = "p50" if sequential else "flight:rate"
    head = (["server"] + (["p50", "p99"] if sequential else [])
            + ["calls/s", "server CPU per call", "its main process alone", "client CPU per call"]
            + (["service CPU per call"] if service else [])
            + ["cores ÷ server CPU", "cores ÷ (server + client) CPU",
               f"staal / this, {'p50' if sequential else 'calls/s'}"])
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    ours = rows.get(staal)
    for name, s in rows.items():
        server, client = metric(s, f"{mode}:server_cpu"), metric(s, f"{mode}:client_cpu")
        cells = [name]
        if sequential:
            cells += [f"{metric(s, 'p50') * 1e3:.2f} ms", f"{metric(s, 'p99') * 1e3:.2f} ms"]
        cells += [f"{metric(s, f'{mode}:rate'):,.0f}", us(server),
                  us(metric(s, f"{mode}:root_cpu")), us(client)]
        if service:
            cells.append(us(metric(s, f"{mode}:service_cpu")))
        cells += [ceiling(server), ceiling(server + client),
                  f"{metric(ours, compared) / metric(s, compared):.2f}" if ours else "-"]
        print("| " + " | ".join(cells) + " |")


def failures(results: dict[tuple[str, str], Samples]) -> None:
    for (name, key), s in results.items():
        failed = sum(s.failures.values())
        if failed:
            seq = f"{sum(p.failed for p in s.sequential)} of {sum(p.calls for p in s.sequential)}"
            flight = f"{sum(p.failed for p in s.inflight)} of {sum(p.calls for p in s.inflight)}"
            print(f"\n**{name}, {key}: {failed} of {s.calls} calls failed**: {seq} sequential, "
                  f"{flight} with {IN_FLIGHT} in flight (numbers shown as #):\n")
            for message, count in Counter(s.failures).most_common(5):
                print(f"- {count} × {message}")


def accounting(results: dict[tuple[str, str], Samples]) -> None:
    print("\n#### The CPU accounting, checked\n")
    print("Per server and scenario, over its sessions: the tree's CPU by the snapshots (its last, "
          "after the in-flight phase) against the kernel's own total for the tree once it exited "
          "and was waited for (the growth of this process's RUSAGE_CHILDREN across the session). "
          "The kernel's is the larger by what the server spent shutting down; a snapshot that "
          "missed a process would show as the opposite.\n")
    print("| server | scenario | snapshots | kernel, start to exit | kernel − snapshots |")
    print("|---|---|---|---|---|")
    for (name, key), s in results.items():
        if not s.accounting:
            continue
        sampled = sum(a for a, _ in s.accounting)
        kernel = sum(b for _, b in s.accounting)
        print(f"| {name} | {key} | {sampled * 1e3:,.0f} ms | {kernel * 1e3:,.0f} ms | "
              f"{(kernel - sampled) * 1e3:+,.0f} ms ({(kernel - sampled) / kernel:+.1%}) |")


def durability(results: dict[tuple[str, str], Samples]) -> None:
    seen = [c for (name, _), s in results.items() if name == DBOS for c in s.durability]
    if not seen:
        return
    kinds = Counter(f"journal_mode={c['journal_mode']}, synchronous {c['synchronous_default']} as "
                    f"opened, {c['synchronous']} once set" for c in seen)
    print(f"\nDBOS's system database: SQLite {seen[0]['sqlite']}; {len(seen)} connections opened, "
          + "; ".join(f"{n} with {k}" for k, n in kinds.items()) + " (read back on each connection).")


def goals(results: dict[tuple[str, str], Samples], cold: dict[str, list[float]],
          staal: list[str]) -> None:
    print("\n#### Issue 26's goals over stdio\n")
    print("| goal | staal row | measured | goal | met |")
    print("|---|---|---|---|---|")
    for name in staal:
        for row in goal_rows(results, cold, name):
            print(f"| {row.label} | {row.staal} | {row.measured} | {row.goal} | {row.met} |")
