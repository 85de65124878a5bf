"""The PostgreSQL store as its ledger grows (issue 27 item 3): an instance's
memory and a reserve's p99, on a ledger of each size in `--events`.

For each size, a schema of its own is made by the store, then grown in bulk
SQL to that many events (half reserves, half settles, of 16 tools, spread
over the two days before now, so older than any quota window; as a ledger
compacted rarely looks), then one writer process opens the store as an
instance and performs `--pairs` reserves of a tool with a quota (an hour's
window: the window query runs) and a once key, each settled. It reports

    events E: open S s, rss after open A MiB, after pairs B MiB, reserve p99 M ms

Each size's writer runs `--rounds` times, the sizes interleaved so the
machine's load falls on both alike; p99 is the median round's, memory and
open time the worst round's.
    python benchmarks/store_grown.py [--events 0,1000000] [--pairs 400]
        [--rounds 3] [--stores new] [--dsn DSN]

`--stores` as in store_load.py (`ref:main` measures today's store).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import uuid

from store_load import DEFAULT_DSN, ROOT, importable, loadavg, numbers

DAY_MS = 86_400_000


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        writer(sys.argv[2], int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", default="0,1000000")
    parser.add_argument("--pairs", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stores", default="new")
    parser.add_argument("--dsn", default=os.environ.get("STAAL_TEST_POSTGRES_DSN", DEFAULT_DSN))
    args = parser.parse_args()
    print(f"load before: {loadavg()}", flush=True)
    for store in args.stores.split(","):
        with importable(store) as path:
            env = dict(os.environ)
            if path is not None:
                env["PYTHONPATH"] = path
            sizes = numbers(args.events)
            schemas = {events: grown(args.dsn, env, events) for events in sizes}
            try:
                runs: dict[int, list[dict[str, float]]] = {events: [] for events in sizes}
                for _ in range(args.rounds):  # the sizes interleaved, so load hits both
                    for events, dsn in schemas.items():
                        runs[events].append(json.loads(run(dsn, env, args.pairs)))
                for events, got in runs.items():
                    print(f"[{store}] {summary(events, got)}", flush=True)
            finally:
                drop(args.dsn, schemas.values())
    print(f"load after: {loadavg()}", flush=True)


def summary(events: int, got: list[dict[str, float]]) -> str:
    p99 = sorted(r["p99"] for r in got)[len(got) // 2]
    return (f"events {events}: open {max(r['open_s'] for r in got):.2f} s, rss after open "
            f"{max(r['rss_open'] for r in got):.0f} MiB, after pairs "
            f"{max(r['rss_end'] for r in got):.0f} MiB, reserve p99 {p99:.1f} ms "
            f"(median of {len(got)} rounds)")


def grown(dsn: str, env: dict[str, str], events: int) -> str:
    """A schema of its own, made by the store and grown to `events`; its DSN."""
    import psycopg

    schema = f"store_grown_{uuid.uuid4().hex[:10]}"
    scoped = f"{dsn} options='-csearch_path={schema}'"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    run(scoped, env, 0)  # the store makes its schema
    with psycopg.connect(scoped, autocommit=True) as conn:
        grow(conn, events // 2)
    return scoped


def drop(dsn: str, scoped: object) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for each in scoped:  # type: ignore[attr-defined]
            schema = each.split("search_path=")[1].rstrip("'")
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def run(dsn: str, env: dict[str, str], pairs: int) -> str:
    done = subprocess.run([sys.executable, __file__, "--writer", dsn, str(pairs)], env=env,
                          cwd=ROOT if env.get("PYTHONPATH") is None else "/",
                          stdout=subprocess.PIPE, text=True, timeout=3600, check=True)
    return done.stdout


def grow(conn: object, runs: int) -> None:
    """`runs` settled runs, each a reserve and a settle, in bulk, their
    times in the order of their seq (as today's store requires)."""
    now = int(time.time() * 1000)
    columns = {row[0] for row in conn.execute(  # type: ignore[attr-defined]
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'staal_runs' "
        "AND table_schema = current_schema()").fetchall()}
    extra = (", ended", ", true") if "ended" in columns else ("", "")
    conn.execute(  # type: ignore[attr-defined]
        "INSERT INTO staal_instances VALUES ('bulk', nextval('staal_fence_seq'), 0, NULL, 'b')")
    conn.execute(  # type: ignore[attr-defined]
        f"INSERT INTO staal_runs (run, tool, reserved_ms, seq, event, owner, fence{extra[0]}) "
        "SELECT md5(g::text), 'tool-' || (g %% 16), %(start)s + g, nextval('staal_event_seq'), "
        "jsonb_build_object('v', 1, 'event', 'reserve', 'run', md5(g::text), "
        "'tool', 'tool-' || (g %% 16), 'time', %(start)s + g, 'calls', 1, 'money', '[]'::jsonb), "
        f"'bulk', (SELECT fence FROM staal_instances WHERE instance = 'bulk'){extra[1]} "
        "FROM generate_series(1, %(runs)s) g", {"start": now - 2 * DAY_MS, "runs": runs})
    conn.execute(  # type: ignore[attr-defined]
        "INSERT INTO staal_ends (run, kind, ended_ms, seq, event) "
        "SELECT run, 'settle', reserved_ms + %(runs)s, nextval('staal_event_seq'), "
        "jsonb_build_object('v', 1, 'event', 'settle', 'run', run, "
        "'time', reserved_ms + %(runs)s, 'outcome', 'done', 'charged', '[]'::jsonb) "
        "FROM (SELECT * FROM staal_runs WHERE owner = 'bulk' ORDER BY reserved_ms) r",
        {"runs": runs})
    conn.execute("ANALYZE")  # type: ignore[attr-defined]


def writer(dsn: str, pairs: int) -> None:
    """One instance: open, then `pairs` reserves with a quota and a once key."""
    from staal.manifest.durations import Duration
    from staal.manifest.model import QuotaConfig
    from staal.records.ledger_records import OnceHold
    from staal.runtime.clock import SYSTEM_CLOCK
    from staal.supervisor.store.postgres.ledger import PostgresLedger

    quota = QuotaConfig(window=Duration.parse("1h"), calls=1_000_000)
    began = time.perf_counter()
    with PostgresLedger.open(dsn, "grown", SYSTEM_CLOCK, lambda text: None) as ledger:
        opened, rss_open = time.perf_counter() - began, rss_mib()
        latencies = []
        for _ in range(pairs):
            once = OnceHold(key=uuid.uuid4().hex * 2, args="0" * 64, keep_ms=None)
            start = time.perf_counter()
            made = ledger.reserve_call("tool-1", quota, 1, (), once)
            latencies.append((time.perf_counter() - start) * 1000)
            ledger.settle(made.run, "done", ())  # type: ignore[union-attr]
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] if latencies else 0.0
    print(json.dumps({"open_s": opened, "rss_open": rss_open, "rss_end": rss_mib(), "p99": p99}))


def rss_mib() -> float:
    """The process's peak resident memory so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


if __name__ == "__main__":
    main()
