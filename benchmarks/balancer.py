"""Several instances behind HAProxy (issue 15, item 6): calls/s and a call's
p50 through the balancer with 1, 2 and 3 `serve --http` instances on this
machine, and one instance reached directly (what the balancer costs).

The deployment is the tests' own (`tests/helpers/fleet.py`, `tests/helpers/haproxy.py`):
Debian's HAProxy in HTTP mode, round robin, no stickiness, health checks;
each instance a real `staal-supervisor serve --http` process on
`servers/staal_manifest.json` (the no-op tool only, `max_concurrent_runs`
raised to 64 so no call is refused busy), each with its own journal
directory on the disk the benchmark runs on (BENCH_DIR, or the system's):
the file store, so the instances share nothing. `--store-dsn-env NAME`
gives every instance `server.store: {"postgres": {"dsn": {"env": NAME}}}`
and the same run measures the shared ledger: NAME holds the DSN of a
PostgreSQL server, and each deployment gets a fresh schema of its own
there (`issue_deploy_bench_<random>`, dropped afterwards), so no cell starts
on the ledger an earlier one left.

The load is `http_load.py` (its own process; 2025-11-25; every answer
checked): per round and deployment (the order rotates every round), a
warm-up, then --sequential calls from one client (p50, p99, calls/s) and
--calls calls from --clients clients (calls/s, p50), the CPU time of the
instances' process trees and HAProxy's measured around each phase
(`proctree.py`). Reports medians over rounds, the load average and fsync
latency before and after (`server.py`'s helpers), as Markdown for
BENCHMARKS.md.

    python benchmarks/balancer.py [--rounds 3] [--calls 1000] [--clients 16]
        [--sequential 200] [--warmup 100] [--store-dsn-env NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proctree import tree_cpu
from server import fsync_latency, loads
from server_contenders import NOOP, bench_dir, write_staal_manifest
from server_http import load

# The deployment is the tests' harness: the project root goes on the path.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers.fleet import Fleet, ManifestWriter
from tests.helpers.servers import Site

DEPLOYMENTS = ("direct", "1", "2", "3")  # "direct": one instance, no balancer
MAX_RUNS = 64


@dataclass
class Cell:
    rates: list[float] = field(default_factory=list)
    p50: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    cpu_per_call: list[float] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)

    def add(self, result: dict[str, Any], cpu: float) -> None:
        self.rates.append(result["calls"] / result["seconds"])
        self.p50.append(result["p50"])
        self.p99.append(result["p99"])
        self.cpu_per_call.append(cpu / result["calls"])
        for message, count in result["failures"].items():
            self.failures[message] = self.failures.get(message, 0) + count


def writer(dsn_env: str | None) -> ManifestWriter:
    def write(site: Site, server: dict[str, Any]) -> None:
        write_staal_manifest(site.root, NOOP, None)
        manifest = json.loads(site.manifest.read_text())
        manifest["server"].update(server, max_concurrent_runs=MAX_RUNS)
        if dsn_env:
            manifest["server"]["store"] = {"postgres": {"dsn": {"env": dsn_env}}}
        site.manifest.write_text(json.dumps(manifest, indent=2))
    return write


def tree(fleet: Fleet) -> float:
    """CPU seconds so far of every instance's process tree and HAProxy's."""
    pids = [i.pid for i in fleet.instances] + [fleet.lb.process.pid]
    return sum(tree_cpu(pid) for pid in pids)


@contextmanager
def fresh_store(dsn_env: str | None) -> Iterator[dict[str, str] | None]:
    """The instances' environment: with the PostgreSQL store, NAME set to a
    DSN whose search_path is a new, empty schema (dropped afterwards)."""
    if dsn_env is None:
        yield None
        return
    import psycopg

    server = os.environ[dsn_env]
    schema = f"issue_deploy_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield {dsn_env: f"{server} options='-csearch_path={schema}'"}
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def measure(deployment: str, args: argparse.Namespace, cells: dict[tuple[str, str], Cell]) -> None:
    with fresh_store(args.store_dsn_env) as env:
        measure_on(deployment, args, cells, env)


def measure_on(deployment: str, args: argparse.Namespace, cells: dict[tuple[str, str], Cell],
               env: dict[str, str] | None) -> None:
    count = 1 if deployment == "direct" else int(deployment)
    root = Path(tempfile.mkdtemp(prefix="bench-balancer-", dir=bench_dir()))
    fleet = Fleet(root, count, writer(args.store_dsn_env), env=env)
    try:
        port = fleet.instances[0].port if deployment == "direct" else fleet.lb.port
        load(port, args.clients, args.warmup, "2025-11-25")
        for phase, clients, calls in (("sequential", 1, args.sequential),
                                      ("concurrent", args.clients, args.calls)):
            before = tree(fleet)
            result = load(port, clients, calls, "2025-11-25")
            cells.setdefault((deployment, phase), Cell()).add(result, tree(fleet) - before)
    finally:
        fleet.stop()
        shutil.rmtree(root, ignore_errors=True)


def report(cells: dict[tuple[str, str], Cell], args: argparse.Namespace,
           run: dict[str, Any]) -> None:
    from importlib.metadata import version

    store = "the PostgreSQL store, a fresh schema per deployment" if args.store_dsn_env else \
        "the file store, each instance its own directory"
    print(f"rounds {args.rounds}; {args.sequential} sequential calls and {args.calls} calls from "
          f"{args.clients} clients per cell, warm-up {args.warmup}; {store}; {os.cpu_count()} cores; "
          f"load average before {run['load_before']}, after {run['load_after']}; fsync "
          f"{run['fsync_before'] * 1e3:.2f} ms before, {run['fsync_after'] * 1e3:.2f} ms after; "
          f"Python {sys.version.split()[0]}, uvicorn {version('uvicorn')}; {run['haproxy']}\n")
    print("| instances | through | sequential p50 ms | p99 ms | calls/s | "
          f"{args.clients} clients calls/s | p50 ms | CPU ms per call |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for deployment in DEPLOYMENTS:
        seq, conc = cells[(deployment, "sequential")], cells[(deployment, "concurrent")]
        count, through = ("1", "direct") if deployment == "direct" else (deployment, "HAProxy")
        print(f"| {count} | {through} | {statistics.median(seq.p50) * 1e3:.2f} | "
              f"{statistics.median(seq.p99) * 1e3:.2f} | {statistics.median(seq.rates):.0f} | "
              f"{statistics.median(conc.rates):.0f} | {statistics.median(conc.p50) * 1e3:.2f} | "
              f"{statistics.median(conc.cpu_per_call) * 1e3:.2f} |")
    failed = {f"{d} {p}": c.failures for (d, p), c in cells.items() if c.failures}
    print(f"\nfailed calls: {failed or 'none'}")


def haproxy_version() -> str:
    import subprocess

    from tests.helpers.haproxy import haproxy

    said = subprocess.run([str(haproxy()), "-v"], capture_output=True, text=True, check=True)
    return said.stdout.splitlines()[0].split(" - ")[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--sequential", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--store-dsn-env", default=None,
                        help="the variable holding a PostgreSQL server's DSN: measure the shared store")
    args = parser.parse_args()
    base = bench_dir()
    run: dict[str, Any] = {"load_before": loads(), "fsync_before": fsync_latency(base),
                           "haproxy": haproxy_version()}
    cells: dict[tuple[str, str], Cell] = {}
    for round_ in range(args.rounds):
        shift = round_ % len(DEPLOYMENTS)
        for deployment in DEPLOYMENTS[shift:] + DEPLOYMENTS[:shift]:
            measure(deployment, args, cells)
            print(f"round {round_ + 1}: {deployment} done, load {os.getloadavg()[0]:.2f}",
                  file=sys.stderr)
    run["load_after"] = loads()
    run["fsync_after"] = fsync_latency(base)
    report(cells, args, run)


if __name__ == "__main__":
    main()
