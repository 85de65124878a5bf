"""What one durable call costs the PostgreSQL server (issue 27 item 5): the
database's own CPU time, its WAL bytes, its commits and WAL flushes, and the
statements and round trips, per call; from which docs/operators.md ("The
ceiling") says what one database serves.

A private cluster (tests/helpers/pg_cluster.py: its own port and directory,
fsync, synchronous_commit and full_page_writes on; the shared server at 5432
is never touched) with `pg_stat_statements` loaded, and checkpoints pushed
past the measurement (`checkpoint_timeout` 30 min): a checkpoint's full-page
images are a cost per checkpoint, not per call.

First, **real calls**: `staal-supervisor serve` over stdio on that
database, `lookup_order` of examples/ (one journaled read of shop.db),
called `--real` times one after another after a warm-up, and the server
stopped (its sessions end, so every statistic is flushed). Its rows tell
what a durable call writes: the reserve, the kept arguments, each journal
record (header, intent, outcome, end), the settle, and the run's end (its
log lines, its arguments removed), each a commit.

Then **the store alone**, that same list of writes performed through the
store's API (`PostgresLedger`, `JournalRows`, `NoteRows`, the records of
one real run copied) by W writer processes, each registered as an
instance, over T tools: `plain` (no quota, no once key: the reserve is one
statement) and `keyed` (a quota on the tool, its window `--window`, and a
once key per call: the reserve is a transaction holding both keys' locks,
and it sums the quota's window in one aggregate statement: schema version
9; before it, it read every run in the window, so its cost grew with the
window's runs). `keyed` with every writer on one tool is the hot key: its
reserves wait for each other.

For each phase, measured from before the first call to after the writers'
sessions ended:

- `db cpu ms/call`: CPU time (user + system) of the whole cluster, the
  postmaster and every process under it (backends, walwriter,
  checkpointer, ...), exited ones included (benchmarks/proctree.py): the
  server's own work, whatever else the machine runs, so it holds on a
  loaded machine (contention for caches and the scheduler's switches still
  add a little).
- `wal bytes/call`, `commits/call` (pg_stat_database.xact_commit),
  `wal flushes/call` (pg_stat_wal.wal_sync: fewer than commits when one
  flush makes several commits durable, group commit).
- `statements/call` and `round trips/call` (pg_stat_statements, BEGIN and
  COMMIT counted as the round trips they are; the measurement's own
  queries left out).
- calls/s and p99 of the writers, the writers' own CPU per call, and the
  bytes the store's tables (indexes and TOAST included) hold per call.

    python benchmarks/store_cost.py [--real 300] [--calls 2000] [--window 24h]
        [--cells plain:1:1,plain:8:16,keyed:1:1,keyed:8:16,keyed:8:1,plain:1:16:8]

A cell is SHAPE:WRITERS:TOOLS[:THREADS]: THREADS calls side by side in each
writer, which is one instance (its ledger's pool; its journal records, kept
arguments and run ends on the one connection an instance has for them).
The machine's load is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proctree import process_cpu

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.pg_cluster import PgCluster  # noqa: E402

DSN_VAR = "STAAL_COST_DSN"
SETTINGS = {"shared_preload_libraries": "'pg_stat_statements'",
            "pg_stat_statements.track_utility": "on",
            "checkpoint_timeout": "30min", "max_wal_size": "4GB"}
WARMUP = 30
WAIT_S = 60.0
# The measurement's own statements, left out of the counts.
MINE = ("pg_stat", "pg_current_wal_lsn", "pg_backend_pid", "CREATE EXTENSION", "CREATE SCHEMA")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        writer(*sys.argv[2:])
        return
    args = parse()
    print(f"load before: {loadavg()}", flush=True)
    with cluster() as pg:
        template = real_calls(pg, args.real)
        for cell in args.cells.split(","):
            shape, writers, tools, *threads = cell.split(":")
            store_calls(pg, template, f"{shape}:{args.window}" if shape == "keyed" else shape,
                        int(writers), int(tools), args.calls, int(threads[0]) if threads else 1)
    print(f"load after: {loadavg()}", flush=True)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--real", type=int, default=300)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--window", default="24h", help="the keyed quota's window")
    parser.add_argument("--cells", default="plain:1:1,plain:8:16,keyed:1:1,keyed:8:16,keyed:8:1,"
                        "plain:1:16:8")
    return parser.parse_args()


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


# -- the cluster and its counters -------------------------------------------------


@contextmanager
def cluster() -> Iterator[PgCluster]:
    pg = PgCluster("staalcost")
    try:
        pg.init()
        pg._configure(SETTINGS)  # read only at start: hence the restart
        pg.restart()
        with connect(pg.dsn) as conn:
            conn.execute("CREATE EXTENSION pg_stat_statements")
        yield pg
    finally:
        pg.destroy()


def connect(dsn: str) -> Any:
    import psycopg

    return psycopg.connect(dsn, autocommit=True)


@dataclass
class Counters:
    cpu: dict[str, float]  # CPU seconds by role: sessions (and exited workers), walwriter, ...
    lsn: str
    wal_syncs: int


class Monitor:
    """One session of its own for a phase's readings, open across it (so no
    session of the measurement starts or ends inside it)."""

    def __init__(self, pg: PgCluster) -> None:
        self.pg = pg
        self.conn = connect(pg.dsn)
        self.postmaster = int((pg.data / "postmaster.pid").read_text().split()[0])

    def counters(self) -> Counters:
        lsn, syncs = self.conn.execute(
            "SELECT pg_current_wal_lsn()::text, wal_sync FROM pg_stat_wal").fetchone()
        return Counters(cluster_cpu(self.postmaster), str(lsn), int(syncs))

    def reset(self) -> Counters:
        self.conn.execute("SELECT pg_stat_statements_reset()")
        return self.counters()

    def statements(self) -> list[tuple[str, int]]:
        """Each statement the phase ran and how many times, most first."""
        rows = self.conn.execute("SELECT query, calls FROM pg_stat_statements "
                                 "ORDER BY calls DESC").fetchall()
        return [(" ".join(str(q).split()), int(n)) for q, n in rows
                if not any(mark in str(q) for mark in MINE)]

    def sessions_ended(self) -> None:
        """Wait (bounded) until no other session is open: an ended session
        has flushed its statistics (its WAL flushes)."""
        give_up = time.monotonic() + WAIT_S
        while time.monotonic() < give_up:
            left = self.conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = "
                "'client backend' AND pid <> pg_backend_pid()").fetchone()[0]
            if left == 0:
                return
            time.sleep(0.05)
        raise SystemExit("the measured sessions did not end")

    def wal(self, start: str, end: str) -> tuple[int, int, int]:
        """WAL bytes, records and commit records between two positions
        (pg_waldump's statistics)."""
        size = self.conn.execute("SELECT %s::pg_lsn - %s::pg_lsn", (end, start)).fetchone()[0]
        said = subprocess.run(
            [str(self.pg.bin / "pg_waldump"), "-p", str(self.pg.data / "pg_wal"), "-s", start,
             "-e", end, "--stats=record"], capture_output=True, text=True, check=True).stdout
        total = re.search(r"^Total\s+(\d+)", said, re.M)
        commits = re.search(r"^Transaction/COMMIT\s+(\d+)", said, re.M)
        return (int(size), int(total.group(1)) if total else 0,
                int(commits.group(1)) if commits else 0)

    def report(self, name: str, before: Counters, calls: int, extra: str = "") -> None:
        self.sessions_ended()
        after = self.counters()
        done = self.statements()
        size, records, commits = self.wal(before.lsn, after.lsn)
        trips = sum(n for _, n in done)
        cpu = {role: (after.cpu.get(role, 0.0) - before.cpu.get(role, 0.0)) * 1000 / calls
               for role in after.cpu}
        roles = ", ".join(f"{role} {ms:.3f}" for role, ms in
                          sorted(cpu.items(), key=lambda item: -item[1]) if ms >= 0.001)
        print(f"{name}: calls {calls}{extra}\n"
              f"  db cpu ms/call {sum(cpu.values()):.3f} ({roles})\n"
              f"  wal bytes/call {size / calls:.0f}"
              f"  wal records/call {records / calls:.1f}"
              f"  commits/call {commits / calls:.2f}"
              f"  wal flushes/call {(after.wal_syncs - before.wal_syncs) / calls:.2f}\n"
              f"  round trips/call {trips / calls:.2f}  statements/call "
              f"{sum(n for q, n in done if q not in ('BEGIN', 'COMMIT')) / calls:.2f}",
              flush=True)
        for query, n in done:
            if n >= calls // 2:
                print(f"    {n / calls:5.2f}  {query[:150]}", flush=True)

    def close(self) -> None:
        self.conn.close()


def cluster_cpu(postmaster: int) -> dict[str, float]:
    """CPU seconds the cluster has used, by role: each background process by
    its title, every session together with the processes that ended (the
    postmaster reaps them all: their time is in its children's)."""
    import psutil

    own, reaped = process_cpu(postmaster)
    roles = {"sessions and exited": reaped, "postmaster": own}
    for child in psutil.Process(postmaster).children():
        try:
            title = " ".join(child.cmdline())
            own, reaped = process_cpu(child.pid)
        except (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError):
            continue  # ended: the postmaster's reaped time holds it
        role = title.split(": ", 1)[-1].strip() if "(" not in title else "sessions and exited"
        roles[role] = roles.get(role, 0.0) + own + reaped
    return roles


# -- real calls ---------------------------------------------------------------------


def real_calls(pg: PgCluster, calls: int) -> dict[str, Any]:
    """`calls` calls of lookup_order through a real server on the store; one
    run's rows, as the template of what a call writes."""
    from tests.helpers.servers import START_WAIT, RawServer, Site

    root = Path(tempfile.mkdtemp(prefix="store_cost_"))
    try:
        for name in ("lookup.py", "shop.db"):
            shutil.copy(ROOT / "examples" / name, root / name)
        manifest = json.loads((ROOT / "examples" / "manifest.json").read_text())
        manifest["tools"] = [t for t in manifest["tools"] if t["name"] == "lookup_order"]
        manifest.pop("resources", None)
        manifest["server"]["store"] = {"postgres": {"dsn": {"env": DSN_VAR}}}
        (root / "manifest.json").write_text(json.dumps(manifest))
        site = Site(root)
        server = RawServer(site, env={DSN_VAR: pg.dsn})
        try:
            server.answer(server.request("initialize", {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "store_cost", "version": "1"}}), START_WAIT)
            server.notify("notifications/initialized")
            for _ in range(WARMUP):
                call(server)
            monitor = Monitor(pg)
            before = monitor.reset()
            began = time.perf_counter()
            for _ in range(calls):
                call(server)
            elapsed = time.perf_counter() - began
        finally:
            server.stop()
        monitor.report("real calls (lookup_order, one client)", before, calls,
                       f"  calls/s {calls / elapsed:.0f} (the whole call: worker, supervisor)")
        monitor.close()
        return template_of(pg)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def call(server: Any) -> None:
    result = server.call_tool("lookup_order", {"order": "ord_1001"})
    if result.get("isError"):
        raise SystemExit(f"lookup_order failed: {result}")


def template_of(pg: PgCluster) -> dict[str, Any]:
    """The last run's journal records and log lines, and its arguments."""
    with connect(pg.dsn) as conn:
        run = conn.execute("SELECT run FROM staal_runs ORDER BY seq DESC LIMIT 1").fetchone()[0]
        records = [r[0] for r in conn.execute(
            "SELECT record FROM staal_journal WHERE run = %s ORDER BY line", (run,))]
        logs = [r[0] for r in conn.execute(
            "SELECT entry FROM staal_logs WHERE run = %s ORDER BY line", (run,))]
    print(f"  a real call writes: reserve, arguments, {len(records)} journal records "
          f"({', '.join(r['type'] for r in records)}), settle, end with {len(logs)} log lines",
          flush=True)
    return {"run": run, "records": records, "logs": logs, "arguments": {"order": "ord_1001"}}


# -- the store alone ------------------------------------------------------------------


def store_calls(pg: PgCluster, template: dict[str, Any], shape: str, writers: int,
                tools: int, calls: int, threads: int = 1) -> None:
    schema = f"store_cost_{uuid.uuid4().hex[:8]}"
    with connect(pg.dsn) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    dsn = f"{pg.dsn} options='-csearch_path={schema}'"
    each = max(1, calls // (writers * threads))
    spec = json.dumps(template)
    procs = [subprocess.Popen(
        [sys.executable, __file__, "--writer", dsn, f"cost-{i}", str(i), shape, str(tools),
         str(each), str(threads)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for i in range(writers)]
    try:
        for proc in procs:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(spec + "\n")
            proc.stdin.flush()
            if proc.stdout.readline().strip() != "ready":
                raise SystemExit("a writer failed to open the store")
        monitor = Monitor(pg)
        before = monitor.reset()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results = [json.loads(proc.communicate(timeout=600)[0]) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    total = each * writers * threads
    rate = sum(r["calls"] / r["seconds"] for r in results)
    latencies = sorted(ms for r in results for ms in r["ms"])
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    client = sum(r["cpu"] for r in results) * 1000 / total
    with connect(pg.dsn) as conn:
        kept = conn.execute(
            "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
            (schema,)).fetchone()[0]
    name = f"store {shape}, writers {writers} tools {tools}" + (
        f" threads {threads} in each (one instance)" if threads > 1 else "")
    monitor.report(name, before, total,
                   f"  calls/s {rate:.0f} p99 {p99:.1f} ms  writers' cpu ms/call {client:.3f}"
                   f"  tables' bytes/call {int(kept) / (total + WARMUP * writers):.0f}")
    monitor.close()
    with connect(pg.dsn) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def writer(dsn: str, instance: str, index: str, shape: str, tools: str, calls: str,
           threads: str = "1") -> None:
    """One writer, one instance: a real call's writes, `calls` times after
    "go" on each of `threads` threads (its calls side by side, as an
    instance's are); then its sessions end (so their statistics are
    flushed) and it reports."""
    import threading

    from staal.manifest.durations import Duration
    from staal.manifest.model import QuotaConfig
    from staal.records.ledger_records import OnceHold
    from staal.runtime.clock import SYSTEM_CLOCK
    from staal.supervisor.store.postgres.journal_rows import JournalRows
    from staal.supervisor.store.postgres.ledger import PostgresLedger
    from staal.supervisor.store.postgres.note_rows import NoteRows

    template = json.loads(sys.stdin.readline())
    shape, _, window = shape.partition(":")  # keyed:WINDOW
    quota = QuotaConfig(Duration.parse(window), calls=10**9) if shape == "keyed" else None
    first, count = int(index), int(tools)
    ledger = PostgresLedger.open(dsn, instance, SYSTEM_CLOCK, lambda text: None)
    rows = JournalRows(dsn, ledger.instance, ledger.fence)
    notes = NoteRows(rows)

    def one(n: int) -> None:
        tool = f"tool-{(first + n) % count}"
        once = None
        if shape == "keyed":
            key = uuid.uuid4().hex * 2
            once = OnceHold(key=key, args=key, keep_ms=None)
        made = ledger.reserve_call(tool, quota, 1, (), once)
        run = made.run  # type: ignore[union-attr]
        rows.keep_inputs(run, template["arguments"])
        for record in template["records"]:
            rows.append(run, {**record, "run": run} if "run" in record else record)
        ledger.settle(run, "done", ())
        notes.end(run, template["logs"])

    for n in range(WARMUP):  # each statement planned and its pages read once
        one(n)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("expected go")
    latencies: list[float] = []

    def loop(offset: int) -> None:
        for n in range(int(calls)):
            began = time.perf_counter()
            one(offset + n)
            latencies.append((time.perf_counter() - began) * 1000)

    cpu = time.process_time()
    start = time.perf_counter()
    workers = [threading.Thread(target=loop, args=(k * int(calls),))
               for k in range(int(threads))]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu
    rows.close()
    ledger.close()
    print(json.dumps({"calls": len(latencies), "seconds": elapsed, "ms": latencies,
                      "cpu": cpu}), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
