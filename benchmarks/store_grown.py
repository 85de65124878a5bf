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
        [--rounds 3] [--stores new] [--dsn DSN] [--callers N] [--status]

`--stores` as in store_load.py (`ref:main` measures today's store).

With `--status`, no writer: for each size a reader process runs what an
operator runs beside the servers, `staal-supervisor status` (collected and
rendered) and the console's overview and one run's page (issue 27 item 1),
on a manifest of the 16 tools, each with an hour's quota, and reports

    events E: status S s, console overview O s, a run's page P s; peak RSS ...

(medians of the rounds; a reader that failed says how). `--callers N`
gives each grown run one of N callers, so status counts each caller's runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import time
import uuid
from typing import Any

from store_load import DEFAULT_DSN, ROOT, importable, loadavg, numbers

DAY_MS = 86_400_000


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        writer(sys.argv[2], int(sys.argv[3]))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--reader":
        reader(sys.argv[2])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", default="0,1000000")
    parser.add_argument("--pairs", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stores", default="new")
    parser.add_argument("--callers", type=int, default=0,
                        help="give each grown run one of this many callers")
    parser.add_argument("--status", action="store_true",
                        help="measure `status` and the console's overview instead of a writer")
    parser.add_argument("--dsn", default=os.environ.get("STAAL_TEST_POSTGRES_DSN", DEFAULT_DSN))
    args = parser.parse_args()
    print(f"load before: {loadavg()}", flush=True)
    for store in args.stores.split(","):
        with importable(store) as path:
            env = dict(os.environ)
            if path is not None:
                env["PYTHONPATH"] = path
            sizes = numbers(args.events)
            schemas = {events: grown(args.dsn, env, events, args.callers) for events in sizes}
            try:
                runs: dict[int, list[dict[str, float]]] = {events: [] for events in sizes}
                for _ in range(args.rounds):  # the sizes interleaved, so load hits both
                    for events, dsn in schemas.items():
                        runs[events].append(json.loads(
                            run(dsn, env, args.pairs, "--reader" if args.status else "--writer")))
                for events, got in runs.items():
                    told = read_summary(events, got) if args.status else summary(events, got)
                    print(f"[{store}] {told}", flush=True)
            finally:
                drop(args.dsn, schemas.values())
    print(f"load after: {loadavg()}", flush=True)


def summary(events: int, got: list[dict[str, float]]) -> str:
    p99 = sorted(r["p99"] for r in got)[len(got) // 2]
    return (f"events {events}: open {max(r['open_s'] for r in got):.2f} s, rss after open "
            f"{max(r['rss_open'] for r in got):.0f} MiB, after pairs "
            f"{max(r['rss_end'] for r in got):.0f} MiB, reserve p99 {p99:.1f} ms "
            f"(median of {len(got)} rounds)")


def grown(dsn: str, env: dict[str, str], events: int, callers: int = 0) -> str:
    """A schema of its own, made by the store and grown to `events`; its DSN."""
    import psycopg

    schema = f"store_grown_{uuid.uuid4().hex[:10]}"
    scoped = f"{dsn} options='-csearch_path={schema}'"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    run(scoped, env, 0)  # the store makes its schema
    with psycopg.connect(scoped, autocommit=True) as conn:
        grow(conn, events // 2, callers)
    return scoped


def drop(dsn: str, scoped: object) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for each in scoped:  # type: ignore[attr-defined]
            schema = each.split("search_path=")[1].rstrip("'")
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def read_summary(events: int, got: list[dict[str, Any]]) -> str:
    def median(key: str) -> str:
        took = sorted(r[f"{key}_s"] for r in got)[len(got) // 2]
        failed = {r[f"{key}_error"] for r in got if f"{key}_error" in r}
        return f"{took:.3f} s" + (f" (failed: {'; '.join(sorted(failed))})" if failed else "")

    return (f"events {events}: status {median('status')}, console overview "
            f"{median('overview')}, a run's page {median('run')} (medians of {len(got)} "
            f"rounds); peak RSS {max(r['rss_start'] for r in got):.0f} MiB before, "
            f"{max(r['rss_end'] for r in got):.0f} MiB after")


def run(dsn: str, env: dict[str, str], pairs: int, mode: str = "--writer") -> str:
    done = subprocess.run([sys.executable, __file__, mode, dsn, str(pairs)], env=env,
                          cwd=ROOT if env.get("PYTHONPATH") is None else "/",
                          stdout=subprocess.PIPE, text=True, timeout=3600, check=True)
    return done.stdout


def grow(conn: object, runs: int, callers: int = 0) -> None:
    """`runs` settled runs, each a reserve and a settle, in bulk, their
    times in the order of their seq (as today's store requires); with
    `callers`, each run is one of that many callers'."""
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
    if callers:
        conn.execute(  # type: ignore[attr-defined]
            "UPDATE staal_runs r SET caller = c.h, "
            "event = r.event || jsonb_build_object('caller', c.h, 'profile', 'default') "
            "FROM (SELECT run, md5(x) || md5(x) AS h FROM (SELECT run, "
            "'c' || (abs(hashtext(run)) %% %(callers)s) AS x FROM staal_runs "
            "WHERE owner = 'bulk') AS s) AS c WHERE r.run = c.run", {"callers": callers})
        conn.execute("VACUUM staal_runs")  # type: ignore[attr-defined]
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


def reader(dsn: str) -> None:
    """`status` and the console's overview and a run's page, as an operator
    runs them beside the servers, on a manifest of the 16 tools, each with
    a quota of an hour."""
    import tempfile
    from pathlib import Path

    import psycopg

    from staal.errors import StaalError
    from staal.manifest.check import load_manifest
    from staal.supervisor.views.console import Console
    from staal.supervisor.views.status import collect, render

    os.environ["STAAL_GROWN_DSN"] = dsn
    with tempfile.TemporaryDirectory(prefix="store_grown_") as tmp:
        folder = Path(tmp)
        (folder / "noop.py").write_text("def main(n: int) -> int:\n    return n\n")
        tools = [{"name": f"tool-{i}", "description": "A tool.", "program": "noop.py",
                  "grants": {}, "quota": {"window": "1h", "calls": 1000},
                  "net": {"timeout_ms": 5000, "connect_timeout_ms": 2000}} for i in range(16)]
        store = {"postgres": {"dsn": {"env": "STAAL_GROWN_DSN"}}}
        (folder / "manifest.json").write_text(json.dumps(
            {"server": {"name": "grown", "journals": "journals", "store": store}, "tools": tools}))
        manifest = load_manifest(folder / "manifest.json")
        rss_start = rss_mib()
        console = Console(manifest)
        found: dict[str, object] = {"rss_start": rss_start}
        steps = {"status": lambda: render(collect(manifest)),
                 "overview": lambda: console.route("/", ""),
                 "run": lambda: console.route(f"/runs/{hashlib.md5(b'1').hexdigest()}", "")}
        for name, step in steps.items():
            began = time.perf_counter()
            try:
                answer = step()
                if isinstance(answer, tuple) and answer[0] not in (200, 404):
                    found[f"{name}_error"] = f"HTTP {answer[0]}: {answer[1][-200:]}"
            except (psycopg.Error, StaalError) as exc:  # a reader's failure is a result too
                found[f"{name}_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            found[f"{name}_s"] = time.perf_counter() - began
    found["rss_end"] = rss_mib()
    print(json.dumps(found))


def rss_mib() -> float:
    """The process's peak resident memory so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


if __name__ == "__main__":
    main()
