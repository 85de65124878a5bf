"""The MCP server against references, in one run, through the same client.

The official Python SDK's client (`mcp` 2.x, `Client` in legacy mode: the
initialize handshake, which every server here speaks) calls the same tool on
each server, a stdio subprocess it starts itself:

- staal: `staal-supervisor serve` on `servers/staal_manifest.json` (the
  scenario's tool only) in a fresh temporary directory (BENCH_DIR, or the
  system's), so the ledger and journals are on the disk the benchmark runs
  on; every call is a durable run in its own forked worker;
- the official SDK's own high-level server, `MCPServer` (`servers/ref_mcpserver.py`);
- FastMCP, the `fastmcp` package (`servers/ref_fastmcp.py`);
- `MCPServer` whose tool runs a DBOS workflow of one step on a SQLite system
  database in the same temporary directory, `synchronous=FULL` on every
  connection (`servers/ref_dbos.py`): a durable reference;
- staal again with its directory on /dev/shm, where an fsync costs nothing,
  to show what the fsyncs cost (--no-shm leaves it out);
- with --postgres DSN, staal once more with its ledger in the PostgreSQL
  store (`server.store`), in a schema of its own made for the run and
  dropped after it (journals on disk as in the first row).

FastMCP and DBOS are not staal dependencies: `pip install -e '.[bench]'`
(or give FastMCP's interpreter with --fastmcp-python). The references run
the tool in-process, with no isolation; all but DBOS with no journal.

Two scenarios (--scenario, both by default): the no-op tool,
`noop(x: int) -> int` returning x, and one GET, `get(url: str) -> int`: one
HTTP GET to a local threaded service (`servers/http_service.py`, its own
process) that answers after --service-delay-ms (2), returning the x it
answers; staal through a `net.http.get` grant with `timeout_ms: 1000`, the
references through one httpx client shared by the process's calls.

Per round, for each server in turn (the order rotates every round): cold
start (spawn to the first `tools/list` answered, --cold samples, each a new
no-op server), then per scenario one session: --warmup calls, --calls
sequential calls (p50, p99, calls/s), and --inflight calls kept 16 in flight
by 16 coroutines under `asyncio.gather` (calls/s). Each of the two phases is
measured between two snapshots of the CPU time (user + system) of the
server's whole process tree, the client's process and the service
(`proctree.py` says how; the report checks the snapshots against the
kernel's own total for each tree after it exited). Every answer is checked;
failed calls are counted by message, never retried. Reports medians over
rounds, the load average and fsync latency, and issue 26's goals over stdio,
each ratio against its goal.

    python benchmarks/server.py [--rounds 5] [--calls 1000] [--inflight 2000] [--cold 3]
        [--scenario noop --scenario get] [--servers staal,mcpserver,fastmcp,dbos,shm]
        [--runs-per-worker 1,100]

--runs-per-worker N[,N...] writes each N as staal's `server.runs_per_worker`
(how many runs one worker serves; 1 is a fresh process per run) and gives
staal a row per setting ("staal, runs_per_worker N"), measured in the same
rounds as the references; without it staal has one row and the key is left
to its default. Each row shows the server tree's CPU per call and, beside
it, its main process's alone (staal's supervisor, apart from the zygote and
the workers). `goals.py` runs the cells issue 26's goals need.

Profiling staal's side (nothing in staal is edited for it; `server_profile.py`):

    python benchmarks/server.py --profile [--calls 1000] [--on-shm] [--scenario get]
    python benchmarks/server.py --py-spy [--py-spy-workers] [--calls 1000] [--scenario get]
    python benchmarks/server.py --worker-costs [--forks 200] [--on-shm]

--profile starts staal with a generated `sitecustomize.py` on its PYTHONPATH
(the supervisor hands PYTHONPATH on to the zygote; workers are the zygote's
forks), which installs `servers/trace/tracer.py` in every staal process: it
timestamps each step of a call in every process (CLOCK_MONOTONIC, one clock
for all of them) and every fsync by caller, and the client marks each call's
start and end; it prints where a sequential call's time goes, the fsyncs, the
CPU time per call of each process (sequential and 16 in flight), and the
cold start step by step. --py-spy samples the supervisor (threads holding
the GIL) during sequential calls, or with --py-spy-workers the zygote and
the workers it forks. --worker-costs measures what one fork of the zygote
costs, step by step, by each child's own CPU time (`servers/worker_costs.py`).

--exit-race-workaround runs staal with a workaround (in the tracer's hooks)
for a race in `supervisor/workers/pool.py` that left a call unanswered; it does
nothing once the pool has the fix. --experiment defer-fork adds a staal row
that asks for each replacement worker when a run ends instead of when it
starts; --experiment preimport-http one whose zygote imports what httpx
leaves to its first client (httpcore, h11, certifi), which every worker
otherwise imports again; --experiment fold-arguments one without the
arguments file's two fsyncs (as if the arguments rode in the reserve's
ledger event), --experiment journal-ahead one whose workers make a file and
its directory entry durable while idle and create the run's journal without
its directory's fsync (`servers/trace/folds.py`; experiments, from outside;
see benchmarks/HISTORY.md). --experiment file-dir-together fsyncs a new file and its
directory on two threads at once, reserve-beside-arguments the reserve's ledger
event beside the arguments file, fsyncs-together both (`servers/trace/pairs.py`;
BENCHMARKS.md, "Fsyncs in parallel").

Prints Markdown: a paragraph on the run, then tables under #### headings, to be
pasted as they are under a run's ### heading (benchmarks/HISTORY.md keeps the earlier runs).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from server_contenders import (
    GET,
    SCENARIOS,
    STAAL_PG,
    STORE_ENV,
    Contender,
    Scenario,
    Service,
    bench_dir,
    contenders,
    runs_per_worker_settings,
)
from server_measure import IN_FLIGHT, Samples, cold_start, median_phase, session
from server_profile import hooks_dir, profile, py_spy, worker_costs
from server_report import report

NEEDS = {"fastmcp": "fastmcp", "dbos": "dbos"}  # a server's key: the package it needs


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


def loads() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def service_latency(url: str, count: int = 50) -> float:
    """The service's answer time as a client here sees it, over one kept-alive connection."""
    import httpx

    took = []
    with httpx.Client(trust_env=False) as client:
        client.get(f"{url}/item/0")
        for i in range(count):
            start = time.perf_counter()
            client.get(f"{url}/item/{i}").raise_for_status()
            took.append(time.perf_counter() - start)
    return statistics.median(took)


def postgres_schema(dsn: str) -> tuple[str, str]:
    """A schema of the benchmark's own on the server at `dsn`, and a DSN
    whose search_path names it."""
    import uuid

    import psycopg

    schema = f"staal_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return schema, f"{dsn} options='-csearch_path={schema}'"


def drop_schema(dsn: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def chosen_servers(args: argparse.Namespace) -> list[Contender]:
    keys = set(args.servers.split(","))
    if args.no_shm:
        keys.discard("shm")
    needed = {key: package for key, package in NEEDS.items()
              if key in keys and not (key == "fastmcp" and args.fastmcp_python != sys.executable)}
    missing = [package for package in needed.values() if importlib.util.find_spec(package) is None]
    if missing:
        raise SystemExit(f"{', '.join(missing)} not installed: pip install -e '.[bench]' "
                         "(or leave the server out with --servers)")
    return contenders(args.fastmcp_python, keys, runs_per_worker_settings(args.runs_per_worker))


Results = dict[tuple[str, str], Samples]


async def bench(args: argparse.Namespace) -> None:
    results, cold, run = await collect(args)
    report(results, cold, run, args)


async def collect(args: argparse.Namespace) -> tuple[Results, dict[str, list[float]], dict[str, Any]]:
    """Every server's samples per scenario, its cold starts, and what the
    run was (loads, fsync latency, staal's rows by `runs_per_worker`)."""
    base = bench_dir()
    scenarios = [SCENARIOS[key] for key in dict.fromkeys(args.scenario)]
    everyone = chosen_servers(args)
    run: dict[str, Any] = {"load_before": loads(), "fsync_before": fsync_latency(base),
                           "scenarios": scenarios, "load_rounds": [],
                           "staal": [c.name for c in everyone
                                     if c.staal and c.key.partition(":")[0] == "staal"]}
    if args.exit_race_workaround:
        hooks = {"PYTHONPATH": str(hooks_dir(base, None, True))}
        for contender in everyone:
            if contender.staal:
                contender.env = hooks
    for experiment in args.experiment:  # one more staal row each, journals on disk
        tried = hooks_dir(base, None, args.exit_race_workaround, (experiment,))
        supervisor = contenders(args.fastmcp_python, {"staal"})[0].command
        everyone.append(Contender(f"experiment:{experiment}", f"staal, --experiment {experiment}",
                                  supervisor, [], staal=True, env={"PYTHONPATH": str(tried)}))
    schema = None
    if args.postgres:
        schema, dsn = postgres_schema(args.postgres)
        supervisor = contenders(args.fastmcp_python, {"staal"})[0].command
        everyone.append(Contender("pg", STAAL_PG, supervisor, [], staal=True,
                                  env={STORE_ENV: dsn}, postgres=True))
    service = Service(args.service_delay_ms) if GET in scenarios else None
    skipped = set(getattr(args, "skip", ()))  # (server key, scenario key) pairs goals.py leaves out
    results = {(c.name, s.key): Samples() for c in everyone for s in scenarios
               if (c.key, s.key) not in skipped}
    cold: dict[str, list[float]] = {c.name: [] for c in everyone} if args.cold else {}
    try:
        if service:
            run["service_ms"] = service_latency(service.url) * 1e3
        await rounds(everyone, scenarios, results, cold, base, args, service, run)
    finally:
        if service:
            service.close()
        for contender in everyone:
            if contender.env and "PYTHONPATH" in contender.env:
                shutil.rmtree(contender.env["PYTHONPATH"], ignore_errors=True)
        if schema is not None:
            drop_schema(args.postgres, schema)
    run["load_after"] = loads()
    run["fsync_after"] = fsync_latency(base)
    run["load_rounds"] = ", ".join(run["load_rounds"])
    return results, cold, run


async def rounds(everyone: list[Contender], scenarios: list[Scenario],
                 results: dict[tuple[str, str], Samples], cold: dict[str, list[float]], base: Path,
                 args: argparse.Namespace, service: Service | None, run: dict[str, Any]) -> None:
    for r in range(args.rounds):
        run["load_rounds"].append(f"{os.getloadavg()[0]:.2f}")
        shift = r % len(everyone)
        for contender in everyone[shift:] + everyone[:shift]:
            for _ in range(args.cold):
                cold[contender.name].append(await cold_start(contender, base))
            for scenario in scenarios:
                if (contender.name, scenario.key) not in results:
                    continue
                s = results[contender.name, scenario.key]
                try:
                    kept = await session(contender, scenario, s, base, args, service)
                except ExceptionGroup as exc:  # anyio wraps the transport's failure in a group
                    raise SystemExit(f"{contender.name}, {scenario.key}: the session failed ({exc!r}); "
                                     "for staal, a call that never returns is the worker-exit race "
                                     "in supervisor/workers/pool.py (see --exit-race-workaround)") from None
                line = (f"round {r + 1}: {contender.name}, {scenario.key}: "
                        f"p50 {s.p50[-1] * 1e3:.2f} ms, {median_phase(s.sequential[-1:], 'rate'):,.0f} "
                        f"calls/s sequential, {median_phase(s.inflight[-1:], 'rate'):,.0f} calls/s "
                        f"{IN_FLIGHT} in flight; server CPU per call "
                        f"{median_phase(s.sequential[-1:], 'server_cpu') * 1e6:,.0f} µs sequential, "
                        f"{median_phase(s.inflight[-1:], 'server_cpu') * 1e6:,.0f} µs in flight "
                        f"(its main process alone "
                        f"{median_phase(s.sequential[-1:], 'root_cpu') * 1e6:,.0f} µs sequential)")
                if args.cold:
                    line += f"; cold {cold[contender.name][-1] * 1e3:.0f} ms"
                seq, flight = s.sequential[-1], s.inflight[-1]
                if seq.failed or flight.failed:
                    line += (f"; failed: {seq.failed} of {seq.calls} sequential, "
                             f"{flight.failed} of {flight.calls} in flight")
                if kept:
                    line += f"; calls failed, server's stderr kept: {kept / 'stderr.log'}"
                print(line, file=sys.stderr)


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=1000, help="sequential calls per round")
    parser.add_argument("--inflight", type=int, default=2000, help="calls per round, 16 in flight")
    parser.add_argument("--cold", type=int, default=3, help="cold starts per round")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS),
                        help="noop, get (repeat for both; the default); --profile, --py-spy: the first")
    parser.add_argument("--servers", default="staal,mcpserver,fastmcp,dbos,shm",
                        help="which servers, by key, comma-separated")
    parser.add_argument("--service-delay-ms", type=float, default=2.0,
                        help="how long the GET scenario's service waits before it answers")
    parser.add_argument("--runs-per-worker", metavar="N[,N...]",
                        help="staal's server.runs_per_worker, a staal row per setting (such as "
                             "1,100); not given: one row, the key left to its default")
    parser.add_argument("--fastmcp-python", default=sys.executable,
                        help="the interpreter that has fastmcp installed")
    parser.add_argument("--no-shm", action="store_true",
                        help="leave out the staal row with its journals on /dev/shm")
    parser.add_argument("--postgres", metavar="DSN",
                        help="add a staal row with its ledger in the PostgreSQL store at DSN "
                             "(a key=value DSN; a schema of the run's own is made and dropped)")
    parser.add_argument("--profile", action="store_true", help="trace staal's side only")
    parser.add_argument("--exit-race-workaround", action="store_true",
                        help="run staal with the workaround for the worker-exit race in "
                             "supervisor/workers/pool.py (see benchmarks/HISTORY.md)")
    parser.add_argument("--py-spy", action="store_true",
                        help="sample staal's supervisor with py-spy during sequential calls")
    parser.add_argument("--py-spy-workers", action="store_true",
                        help="--py-spy: sample the zygote and its workers instead")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--experiment", action="append", default=[],
                        choices=["defer-fork", "preimport-http", "no-rehearsal",
                                 "fold-arguments", "journal-ahead", "file-dir-together",
                                 "reserve-beside-arguments", "fsyncs-together"],
                        help="try a change to staal from outside (servers/trace/tracer.py), as "
                             "one more staal row (--profile: on the traced server): defer-fork "
                             "asks for a replacement worker when a run ends; preimport-http has "
                             "the zygote import httpcore, h11 and certifi; no-rehearsal has idle "
                             "workers skip serve.rehearse; fold-arguments and journal-ahead "
                             "model two folds of the durable steps (servers/trace/folds.py); "
                             "file-dir-together, reserve-beside-arguments and fsyncs-together "
                             "issue two fsyncs together (servers/trace/pairs.py)")
    parser.add_argument("--worker-costs", action="store_true",
                        help="what one worker costs by CPU time, step by step")
    parser.add_argument("--forks", type=int, default=200, help="--worker-costs: forks per case")
    parser.add_argument("--on-shm", action="store_true",
                        help="--profile, --py-spy: staal's journals on /dev/shm (fsyncs cost nothing)")
    return parser


def main() -> None:
    args = arguments().parse_args()
    args.scenario = args.scenario or ["noop", "get"]
    if args.worker_costs:
        worker_costs(args)
        return
    asyncio.run(py_spy(args) if args.py_spy else profile(args) if args.profile else bench(args))


if __name__ == "__main__":
    main()
