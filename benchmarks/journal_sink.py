"""What one journal record costs on each sink (issue 15).

- file: `JournalWriter` on the journal file, each record fsync'd (the file
  store; the worker writes it itself);
- store: the worker's `ChannelSink` over a real ZeroMQ DEALER/ROUTER pair on
  an ipc socket, the supervisor's side committing each record as a fenced
  `staal_journal` row (`JournalRows.append`) before it answers; and its two
  parts alone: the round trip with an immediate answer, and the commit.

    python benchmarks/journal_sink.py --dsn "host=127.0.0.1 port=5432 dbname=test user=postgres" \
        [--records 500] [--rounds 3]

Prints a Markdown table of medians (per record: p50 and mean, over rounds).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg
import zmq

from staal.journal.records import JOURNAL, Header, Print
from staal.journal.writer import JournalWriter
from staal.records.messages import JournalAck, JournalAppend, pack, unpack
from staal.runtime.clock import SYSTEM_CLOCK
from staal.supervisor.store.postgres.journal_rows import JournalRows
from staal.supervisor.store.postgres.ledger import PostgresLedger
from staal.worker.runs.journal_sink import ChannelSink

HEADER = dict(tool="t", program="/p.py", program_sha256="0" * 64, config_sha256="0" * 64,
              inputs_sha256="0" * 64, runtime="bench", time=1)


def timed(records: int, append: Callable[[int], None]) -> list[float]:
    took = []
    for i in range(records):
        start = time.perf_counter()
        append(i)
        took.append(time.perf_counter() - start)
    return took


def file_sink(records: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        run = uuid.uuid4().hex
        writer = JournalWriter.create(Path(tmp) / "r.journal", Header(run=run, **HEADER))
        took = timed(records, lambda i: writer.write(Print(seq=i + 1, text="x", time=1)))
        writer.close()
    return took


def channel(answer: Callable[[JournalAppend], str | None], records: int, run: str) -> list[float]:
    """The worker's side in a thread, the supervisor's ROUTER here."""
    context = zmq.Context()
    endpoint = f"ipc://{tempfile.gettempdir()}/staal-bench-{uuid.uuid4().hex[:8]}"
    router = context.socket(zmq.ROUTER)
    router.bind(endpoint)
    result: list[float] = []

    def worker() -> None:
        dealer = context.socket(zmq.DEALER)
        dealer.connect(endpoint)

        def request(message):  # as worker/processes/serve.py's Channel.request
            dealer.send(pack(message))
            return unpack(dealer.recv())

        sink = ChannelSink(run, Path(tempfile.gettempdir()) / f"{run}.journal", request)
        writer = JournalWriter(sink, SYSTEM_CLOCK)
        writer.write(Header(run=run, **HEADER))
        result.extend(timed(records, lambda i: writer.write(Print(seq=i + 1, text="x", time=1))))
        dealer.close()

    thread = threading.Thread(target=worker)
    thread.start()
    for _ in range(records + 1):
        identity, frame = router.recv_multipart()
        message = unpack(frame)
        router.send_multipart([identity, pack(JournalAck(run=message.run,
                                                         refused=answer(message)))])
    thread.join()
    router.close()
    context.term()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--records", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    schema = f"bench_journals_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    dsn = f"{args.dsn} options='-csearch_path={schema}'"
    try:
        ledger = PostgresLedger.open(dsn, "bench", SYSTEM_CLOCK)
        rows = JournalRows(dsn, ledger.instance, ledger.fence)

        def new_run() -> str:
            return ledger.reserve_call("t", None, 1, (), None).run

        def commit_only(records: int) -> list[float]:
            run = new_run()
            rows.append(run, JOURNAL.encode(Header(run=run, **HEADER)))
            return timed(records, lambda i: rows.append(
                run, JOURNAL.encode(Print(seq=i + 1, text="x", time=1))))

        def round_trip(records: int) -> list[float]:
            return channel(lambda m: None, records, uuid.uuid4().hex)

        def store_sink(records: int) -> list[float]:
            run = new_run()
            return channel(lambda m: (rows.append(m.run, m.record), None)[1], records, run)

        cases = {"file sink (fsync per record)": file_sink,
                 "store sink: round trip + commit": store_sink,
                 "  its ZeroMQ round trip alone": round_trip,
                 "  its commit alone": commit_only}
        print("| one journal record | p50 | mean |")
        print("|---|---|---|")
        for name, case in cases.items():
            p50s, means = [], []
            for _ in range(args.rounds):
                took = case(args.records)
                p50s.append(statistics.median(took))
                means.append(statistics.fmean(took))
            print(f"| {name} | {statistics.median(p50s) * 1e6:,.0f} µs | "
                  f"{statistics.median(means) * 1e6:,.0f} µs |")
        rows.close()
        ledger.close()
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


if __name__ == "__main__":
    main()
