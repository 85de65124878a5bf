"""Issue 26's goals, in one run: the cells they need, and a short table.

Over stdio (`server.py`'s machinery, the SDK's `Client`): staal at each
`runs_per_worker` setting, the SDK's `MCPServer` and the DBOS alternative
(`MCPServer` with a DBOS workflow on SQLite); the no-op and the GET tool
(the references with one shared httpx client), sequential and 16 in flight,
the server tree's CPU per call and the supervisor's alone; cold start. Over
Streamable HTTP (`server_http.py`'s): staal and the SDK's stateless HTTP
server, `tools/call` of the no-op with 16 clients. Every ratio is staal's
over the reference's, measured in the same rounds, the servers' order
rotating each round.

The goals (issue 26):

- no-op server CPU per call ≤ 3× MCPServer's;
- no-op p50 ≤ 3× MCPServer's;
- 16 in flight ≥ 0.5× MCPServer's calls/s and ≥ 5× the DBOS alternative's;
- GET p50 ≤ 1.5× MCPServer's with a shared httpx client;
- over HTTP with 16 clients, `tools/call` ≥ 0.5× the SDK's stateless HTTP
  server's calls/s;
- cold start ≤ 0.5× MCPServer's;
- and item 3's: the supervisor's own CPU per no-op call about 1 ms.

`--runs-per-worker` defaults to 1 and the manifest default
(`DEFAULT_RUNS_PER_WORKER`), once each: a staal row per setting. Prints a
paragraph on the run (date, commit, load average before and after and at
each round's start, fsync latency) and a Markdown table to paste at the top
of BENCHMARKS.md; with --details also every table `server.py` and
`server_http.py` print. The DBOS alternative serves only the no-op (no goal
compares a GET with it).

    python benchmarks/goals.py [--rounds 3] [--calls 120] [--inflight 192] [--cold 2]
        [--http-calls 320] [--runs-per-worker 1,100] [--details]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import subprocess
import sys
import time
from pathlib import Path

import server as stdio
import server_http as http
from server_report import Verdict, goal_rows, verdict
from server_report import report as stdio_report

from staal.manifest.model import DEFAULT_RUNS_PER_WORKER

ROOT = Path(__file__).resolve().parent.parent
HTTP_REVISION = "2025-11-25"
HTTP_GOAL = 0.5


def one_minute() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def uptime() -> str:
    done = subprocess.run(["uptime"], capture_output=True, text=True, check=False)
    return done.stdout.strip() or f"load average {os.getloadavg()}"


def commit() -> str:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False)
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, check=False)
    return (done.stdout.strip() or "unknown") + (" (with changes)" if dirty.stdout.strip() else "")


def stdio_args(args: argparse.Namespace) -> argparse.Namespace:
    """`server.py`'s options for the stdio cells."""
    parsed = stdio.arguments().parse_args([
        "--rounds", str(args.rounds), "--calls", str(args.calls), "--inflight", str(args.inflight),
        "--cold", str(args.cold), "--warmup", str(args.warmup), "--servers", "staal,mcpserver,dbos",
        "--scenario", "noop", "--scenario", "get", "--runs-per-worker", args.runs_per_worker])
    parsed.skip = {("dbos", "get")}  # no goal compares a GET with the DBOS alternative
    return parsed


def http_args(args: argparse.Namespace) -> argparse.Namespace:
    """`server_http.py`'s options for the HTTP cell: the no-op, one revision."""
    return http.arguments().parse_args([
        "--rounds", str(args.rounds), "--calls", str(args.http_calls),
        "--warmup", str(args.http_warmup), "--servers", "staal,sdk", "--scenario", "noop",
        "--revision", HTTP_REVISION, "--runs-per-worker", args.runs_per_worker])


def http_rows(cells: http.Cells, staal: str) -> list[Verdict]:
    key = ("noop", HTTP_REVISION, "tools/call", 16)
    ours, theirs = cells.get((staal, *key)), cells.get((http.SDK, *key))
    ratio = ours.rate() / theirs.rate() if ours and theirs else None
    failed = sum(sum(c.failures.values()) for c in (ours, theirs) if c)
    return [verdict("HTTP, 16 clients, tools/call calls/s, staal / SDK stateless HTTP server",
                    staal, ratio, False, HTTP_GOAL, failed)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=120, help="stdio: sequential calls per round")
    parser.add_argument("--inflight", type=int, default=192,
                        help="stdio: calls per round, 16 in flight")
    parser.add_argument("--cold", type=int, default=2, help="stdio: cold starts per round")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--http-calls", type=int, default=320,
                        help="HTTP: calls per round with 16 clients")
    parser.add_argument("--http-warmup", type=int, default=64)
    parser.add_argument("--runs-per-worker", default=f"1,{DEFAULT_RUNS_PER_WORKER}",
                        metavar="N[,N...]", help="staal's settings, a row each "
                        f"(default: 1 and the manifest default, {DEFAULT_RUNS_PER_WORKER})")
    parser.add_argument("--details", action="store_true",
                        help="also print every table of server.py and server_http.py")
    args = parser.parse_args()
    began = time.monotonic()
    start = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    before = uptime()
    s_args = stdio_args(args)
    results, cold, run = asyncio.run(stdio.collect(s_args))
    stdio_load = f"{run['load_rounds']}"
    h_args = http_args(args)
    http_before = os.getloadavg()
    cells = http.collect(h_args, phases=((16, "tools/call"),))
    http_loads = [f"{http_before[0]:.2f}", one_minute()]
    if args.details:
        stdio_report(results, cold, run, s_args)
        print()
        http.report(cells, h_args, http_before)
    took = time.monotonic() - began
    print(f"\nIssue 26's goals, measured {start} at commit {commit()}, "
          f"{os.cpu_count()} cores, {args.rounds} rounds (medians), in {took / 60:.1f} min. "
          f"`uptime` before: {before}; after: {uptime()}. 1-minute load at each stdio round's "
          f"start {stdio_load}, over HTTP {', '.join(http_loads)}. fsync after a 200-byte append: "
          f"{run['fsync_before'] * 1e6:.0f} µs before, {run['fsync_after'] * 1e6:.0f} µs after. "
          f"stdio: {args.calls} sequential and {args.inflight // 16 * 16} calls 16 in flight per "
          f"round and tool, {args.cold} cold starts; HTTP: {args.http_calls} calls with 16 "
          f"clients per round, revision {HTTP_REVISION}.\n")
    stdio_range = load_range([*run["load_rounds"].split(", "), run["load_after"].split(", ")[0]])
    table(run["staal"], {staal: goal_rows(results, cold, staal) + http_rows(cells, staal)
                         for staal in run["staal"]},
          stdio_range, load_range(http_loads))
    sys.stdout.flush()


def table(staal: list[str], rows: dict[str, list[Verdict]], stdio_load: str,
          http_load: str) -> None:
    """A row per goal; per staal row (`runs_per_worker` setting) the measured
    value and whether it meets the goal; the 1-minute load while it was measured."""
    head = ["goal", "target"]
    for name in staal:
        head += [f"measured, {short(name)}", f"met, {short(name)}"]
    print("| " + " | ".join([*head, "load (1 min)"]) + " |")
    print("|" + "---|" * (len(head) + 1))
    for i, first in enumerate(rows[staal[0]]):
        cells = [first.label, first.goal]
        for name in staal:
            row = rows[name][i]
            cells += [row.measured, row.met]
        load = http_load if first.label.startswith("HTTP") else stdio_load
        print("| " + " | ".join([*cells, load]) + " |")


def short(staal: str) -> str:
    """`staal, runs_per_worker 100` as `runs_per_worker 100`."""
    return staal.partition(", ")[2] or staal


def load_range(loads: list[str]) -> str:
    values = [float(x) for x in loads if x]
    low, high = min(values), max(values)
    return f"{low:.1f}" if round(low, 1) == round(high, 1) else f"{low:.1f} to {high:.1f}"


if __name__ == "__main__":
    main()
