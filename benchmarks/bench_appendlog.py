"""The append-only log against references, in the same run.

Each append is fsync'd before it returns, so the disk sets the pace. The
references are the floor (the same bytes written with os.write + os.fsync,
no serialising, no lock) and what many would reach for instead (SQLite in
WAL mode with synchronous=FULL, one INSERT committed per record). Also
canonical JSON against the standard library's sorted json.dumps.

    python benchmarks/bench_appendlog.py [--records 1000] [--rounds 3]

Prints a Markdown table of medians and ratios (staal / reference).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from staal.money import Money
from staal.records.appendlog import AppendLog
from staal.records.canonical import canonical_json
from staal.records.ledger_records import LEDGER, OnceHold, Reserve
from staal.runtime.ids import new_run_id


def ledger_records(count: int) -> list[dict]:
    return [
        LEDGER.encode(Reserve(run=new_run_id(), tool="refund_order", time=1_700_000_000_000 + i,
                              calls=1, money=(Money("50.00", "USD"),),
                              once=OnceHold(key="ab" * 32, args="cd" * 32, keep_ms=86_400_000)))
        for i in range(count)
    ]


def staal_appends(directory: Path, records: list[dict]) -> float:
    log = AppendLog.create(directory / "staal.ledger")
    start = time.perf_counter()
    for record in records:
        log.append(record)
    elapsed = time.perf_counter() - start
    log.close()
    return elapsed


def raw_write_fsync(directory: Path, records: list[dict]) -> float:
    lines = [canonical_json(r) + b"\n" for r in records]
    fd = os.open(directory / "raw.ledger", os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
    start = time.perf_counter()
    for line in lines:
        os.write(fd, line)
        os.fsync(fd)
    elapsed = time.perf_counter() - start
    os.close(fd)
    return elapsed


def sqlite_wal_full(directory: Path, records: list[dict]) -> float:
    db = sqlite3.connect(directory / "ledger.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
    start = time.perf_counter()
    for record in records:
        db.execute("BEGIN")
        db.execute("INSERT INTO events (body) VALUES (?)", (json.dumps(record, sort_keys=True),))
        db.execute("COMMIT")
    elapsed = time.perf_counter() - start
    db.close()
    return elapsed


def canonical_dumps(records: list[dict]) -> float:
    start = time.perf_counter()
    for record in records:
        canonical_json(record)
    return time.perf_counter() - start


def stdlib_dumps(records: list[dict]) -> float:
    start = time.perf_counter()
    for record in records:
        json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    records = ledger_records(args.records)
    durable = {"staal AppendLog.append": [], "os.write + os.fsync": [], "SQLite WAL, synchronous=FULL": []}
    encode = {"staal canonical_json": [], "json.dumps(sort_keys=True)": []}
    for _ in range(args.rounds):
        # Interleaved, so a change in the machine's load touches every contender.
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
            directory = Path(tmp)
            durable["staal AppendLog.append"].append(staal_appends(directory, records))
            durable["os.write + os.fsync"].append(raw_write_fsync(directory, records))
            durable["SQLite WAL, synchronous=FULL"].append(sqlite_wal_full(directory, records))
        big = records * 20
        encode["staal canonical_json"].append(canonical_dumps(big))
        encode["json.dumps(sort_keys=True)"].append(stdlib_dumps(big))
    report("Durable append of one ledger event", durable, args.records, "staal AppendLog.append")
    report("Serialising one ledger event", encode, args.records * 20, "staal canonical_json")


def report(title: str, results: dict[str, list[float]], count: int, ours: str) -> None:
    medians = {name: statistics.median(times) / count for name, times in results.items()}
    print(f"\n### {title}\n")
    print("| contender | median per record | staal / this |")
    print("|---|---|---|")
    for name, per_record in medians.items():
        ratio = medians[ours] / per_record
        print(f"| {name} | {per_record * 1e6:.1f} µs | {ratio:.2f} |")


if __name__ == "__main__":
    main()
