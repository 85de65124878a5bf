"""The PostgreSQL store under many writers (issue 27 item 3).

N processes, each registered as an instance of the fleet, each performing
pairs directly against the store (no MCP, no workers): reserve a run of one
of T tools (no quota, no once key), commit one journal record for it, and
settle it, back to back for `--seconds`. For each cell it prints

    writers W tools T: pairs/s N p99 M ms

where pairs/s is the sum over writers of their pairs over their own measured
time, and p99 is over every pair's latency (reserve, record and settle).

`--stores` picks the implementations measured in the same run, one after
another over the same cells: `new` is this checkout's store; `ref:REF` is
the store of git revision REF (e.g. `ref:main`), exported with `git archive`
into a temporary directory that the writer processes import `staal` from.
Each cell runs on a PostgreSQL schema of its own, dropped afterwards.

    python benchmarks/store_load.py [--writers 1,4,16,32] [--tools 1,16]
        [--seconds 5] [--stores ref:main,new] [--dsn DSN]

The machine's load (`/proc/loadavg`) is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=test"
# The packages of the `staal` distribution and the folders they live in
# (pyproject.toml's package-dir), for a revision exported by `git archive`.
PACKAGE_DIRS = {"protocol": "protocol", "supervisor": "supervisor", "worker": "worker"}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        writer(*sys.argv[2:])
        return
    args = parse()
    print(f"load before: {loadavg()}", flush=True)
    for store in args.stores.split(","):
        with importable(store) as path:
            for tools in numbers(args.tools):
                for writers in numbers(args.writers):
                    pairs, p99 = cell(args.dsn, path, writers, tools, args.seconds)
                    print(f"[{store}] writers {writers} tools {tools}: pairs/s {pairs:.0f} "
                          f"p99 {p99:.1f} ms", flush=True)
    print(f"load after: {loadavg()}", flush=True)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", default="1,4,16,32")
    parser.add_argument("--tools", default="1,16")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--stores", default="ref:main,new")
    parser.add_argument("--dsn", default=os.environ.get("STAAL_TEST_POSTGRES_DSN", DEFAULT_DSN))
    return parser.parse_args()


def numbers(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


@contextmanager
def importable(store: str) -> Iterator[str | None]:
    """The PYTHONPATH entry the writers import `staal` from: None for this
    checkout (installed), or a temporary export of a git revision."""
    if store == "new":
        yield None
        return
    if not store.startswith("ref:"):
        raise SystemExit(f"--stores: {store!r} is neither 'new' nor 'ref:REVISION'")
    with tempfile.TemporaryDirectory(prefix="store_load_") as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", store[4:]],
                                 check=True, capture_output=True).stdout
        with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
            tar.extractall(tree, filter="data")
        for package, folder in PACKAGE_DIRS.items():
            (tree / "shared" / package).symlink_to(tree / folder, target_is_directory=True)
        (Path(tmp) / "staal").symlink_to(tree / "shared", target_is_directory=True)
        yield tmp


def cell(dsn: str, path: str | None, writers: int, tools: int,
         seconds: float) -> tuple[float, float]:
    """Pairs per second and the p99 latency (ms) of `writers` processes over
    `tools` tools, on a schema of their own."""
    import psycopg

    schema = f"store_load_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = path
    scoped = f"{dsn} options='-csearch_path={schema}'"
    try:
        # The schema made once, before the writers race to register.
        run_writers(scoped, env, 1, 1, 0.0)
        results = run_writers(scoped, env, writers, tools, seconds)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
    rate = sum(r["pairs"] / r["seconds"] for r in results if r["seconds"] > 0)
    latencies = sorted(ms for r in results for ms in r["ms"])
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] if latencies else 0.0
    return rate, p99


def run_writers(dsn: str, env: dict[str, str], writers: int, tools: int,
                seconds: float) -> list[dict[str, float | list[float]]]:
    procs = [subprocess.Popen(
        [sys.executable, __file__, "--writer", dsn, f"load-{i}", str(i), str(tools),
         str(seconds)], env=env, cwd=ROOT if env.get("PYTHONPATH") is None else "/",
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for i in range(writers)]
    try:
        for proc in procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise SystemExit("a writer failed to open the store")
        for proc in procs:  # every one registered; now they race
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        return [json.loads(proc.communicate(timeout=seconds + 120)[0]) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def writer(dsn: str, instance: str, index: str, tools: str, seconds: str) -> None:
    """One writer process: reserve, record, settle, for `seconds` after "go"."""
    from staal.runtime.clock import SYSTEM_CLOCK
    from staal.supervisor.store.postgres.journal_rows import JournalRows
    from staal.supervisor.store.postgres.ledger import PostgresLedger

    first, count, until = int(index), int(tools), float(seconds)
    with PostgresLedger.open(dsn, instance, SYSTEM_CLOCK, lambda text: None) as ledger:
        rows = JournalRows(dsn, ledger.instance, ledger.fence)
        print("ready", flush=True)
        if sys.stdin.readline().strip() != "go":
            raise SystemExit("expected go")
        latencies: list[float] = []
        start = time.perf_counter()
        while time.perf_counter() - start < until:
            began = time.perf_counter()
            tool = f"tool-{(first + len(latencies)) % count}"
            made = ledger.reserve_call(tool, None, 1, (), None)
            run = made.run  # type: ignore[union-attr]
            rows.append(run, header(run, tool))
            ledger.settle(run, "done", ())
            latencies.append((time.perf_counter() - began) * 1000)
        elapsed = time.perf_counter() - start
        rows.close()
    print(json.dumps({"pairs": len(latencies), "seconds": elapsed, "ms": latencies}), flush=True)


def header(run: str, tool: str) -> dict[str, object]:
    """A journal's first record, as a worker writes it."""
    return {"v": 1, "type": "header", "run": run, "tool": tool, "program": "/bench.py",
            "program_sha256": "0" * 64, "config_sha256": "0" * 64, "inputs_sha256": "0" * 64,
            "runtime": "store_load", "time": int(time.time() * 1000)}


if __name__ == "__main__":
    main()
