"""Two fsyncs in series against the same two issued together (issue 26 item 4).

A call makes two pairs of fsyncs durable where neither needs the other's
result to start:

(a) a new file and its directory: the arguments file (`write_durably`:
    write, fsync the file, fsync its folder) and the journal's creation
    (`AppendLog.create`: header, fsync the file, fsync its folder);
(b) the reserve event and the arguments file: `Calls._reserve_and_keep`
    makes the reservation durable (a ledger fsync, shared by group commit),
    then writes the arguments file and syncs it and its folder.

Each is timed in series, as the server does it now, and together: the one
fsync on a helper thread (a pool made once, as a server would keep it)
while this thread does the other. The pairs use the project's own code on a
journal directory laid out as the server's (a ledger, every run folder),
on the disk `--dir` names (default: a temporary directory, the local disk).
Sequentially, and with `--inflight` threads each doing pairs back to back,
as that many calls in flight would (the ledger's group commit shares their
reserve fsyncs).

    python benchmarks/fsync_pairs.py [--blocks 20] [--block 20] [--inflight 16] [--dir PATH]

Prints the load (`uptime`) before and after, and per case the median and
mean latency of one pair and, with threads in flight, pairs per second.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from staal.money import Money
from staal.records import kept_arguments
from staal.records.fsio import FS
from staal.runtime.clock import SYSTEM_CLOCK
from staal.runtime.ids import new_run_id
from staal.supervisor.store.file_ledger import FileLedger
from staal.supervisor.store.files import RunFiles, make_run_folders

TOOL = "refund_order"
# What a refund call keeps: a few short arguments.
ARGUMENTS = {"order": "pi_3Nq2bA2eZvKYlo2C0g8h7kXy", "amount": "35.00", "currency": "USD",
             "reason": "requested_by_customer"}
HEADER = (b'{"config_sha256":"' + b"c" * 64 + b'","format":1,"program_sha256":"' + b"p" * 64
          + b'","run":"' + b"0" * 32 + b'","runtime":"0.1.0","tool":"refund_order",'
          b'"type":"header"}\n')

Pair = Callable[["Bench"], None]


@dataclass
class Bench:
    journals: Path
    ledger: FileLedger
    helper: ThreadPoolExecutor

    def files(self) -> RunFiles:
        return RunFiles(self.journals, TOOL, new_run_id())


# -- (a) a new file and its directory ------------------------------------------------


def _new_file(bench: Bench, data: bytes) -> tuple[int, int]:
    """A new file in a run folder holding `data`, written, not synced; and
    its folder's descriptor."""
    files = bench.files()
    fd = FS.open(files.journal, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    os.write(fd, data)
    return fd, os.open(files.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def file_then_dir(bench: Bench) -> None:
    fd, dirfd = _new_file(bench, HEADER)
    try:
        os.fsync(fd)
        os.fsync(dirfd)
    finally:
        os.close(fd)
        os.close(dirfd)


def file_and_dir_together(bench: Bench) -> None:
    fd, dirfd = _new_file(bench, HEADER)
    try:
        other = bench.helper.submit(os.fsync, dirfd)
        os.fsync(fd)
        other.result()
    finally:
        os.close(fd)
        os.close(dirfd)


def file_only(bench: Bench) -> None:
    """The floor: one fsync of the new file (not enough by POSIX's rules)."""
    fd, dirfd = _new_file(bench, HEADER)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
        os.close(dirfd)


# -- (b) the reserve event and the arguments file --------------------------------------


def _reserve(bench: Bench) -> str:
    result = bench.ledger.reserve_call(TOOL, None, 1, (Money("50.00", "USD"),), None)
    return result.run  # type: ignore[union-attr]  # no quota, no once key: always Reserved


def reserve_then_arguments(bench: Bench) -> None:
    """Today's `_reserve_and_keep`: the reservation durable, then the file."""
    run = _reserve(bench)
    kept_arguments.keep(RunFiles(bench.journals, TOOL, run).inputs, ARGUMENTS)


def reserve_and_arguments_together(bench: Bench) -> None:
    """The reserve's fsync on the helper while this thread writes and syncs
    the arguments file and its folder (the run id would have to be known
    before the reserve is durable; the cost is the same under any name)."""
    reserving = bench.helper.submit(_reserve, bench)
    kept_arguments.keep(bench.files().inputs, ARGUMENTS)
    reserving.result()


def reserve_and_arguments_all_three(bench: Bench) -> None:
    """Also the arguments file and its folder together: three at once."""
    reserving = bench.helper.submit(_reserve, bench)
    fd, dirfd = _new_file(bench, b'{"order":"pi_3Nq2bA2eZvKYlo2C0g8h7kXy","amount":"35.00"}')
    try:
        folder = bench.helper.submit(os.fsync, dirfd)
        os.fsync(fd)
        folder.result()
    finally:
        os.close(fd)
        os.close(dirfd)
    reserving.result()


CASES: tuple[tuple[str, str, Pair], ...] = (
    ("a", "new file: fsync file, then directory (today)", file_then_dir),
    ("a", "new file: fsync file and directory together", file_and_dir_together),
    ("a", "new file: fsync file only (floor, not durable)", file_only),
    ("b", "reserve, then arguments file and directory (today)", reserve_then_arguments),
    ("b", "reserve together with arguments file, then its directory", reserve_and_arguments_together),
    ("b", "reserve, arguments file and directory, all together", reserve_and_arguments_all_three),
)


# -- running ------------------------------------------------------------------------------


def run_sequential(bench: Bench, pair: Pair, count: int) -> list[float]:
    times = []
    for _ in range(count):
        began = time.perf_counter_ns()
        pair(bench)
        times.append((time.perf_counter_ns() - began) / 1000)
    return times


def run_inflight(bench: Bench, pair: Pair, count: int, threads: int) -> tuple[list[float], float]:
    """`threads` threads doing `count` pairs in all; each pair's latency and
    the pairs per second."""
    times: list[float] = []
    lock = threading.Lock()
    share = [count // threads + (1 if i < count % threads else 0) for i in range(threads)]
    go = threading.Barrier(threads + 1)

    def loop(n: int) -> None:
        go.wait()
        mine = []
        for _ in range(n):
            began = time.perf_counter_ns()
            pair(bench)
            mine.append((time.perf_counter_ns() - began) / 1000)
        with lock:
            times.extend(mine)

    workers = [threading.Thread(target=loop, args=(n,)) for n in share]
    for worker in workers:
        worker.start()
    go.wait()
    began = time.perf_counter()
    for worker in workers:
        worker.join()
    return times, count / (time.perf_counter() - began)


def make_bench(root: Path, threads: int) -> Bench:
    journals = root / "journals"
    journals.mkdir(mode=0o700)
    make_run_folders(journals, [TOOL])
    ledger = FileLedger.open(journals / "server.ledger", SYSTEM_CLOCK)
    return Bench(journals, ledger, ThreadPoolExecutor(max_workers=max(1, threads)))


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def measure(mode_threads: int, blocks: int, block: int, root: Path,
            latencies: dict[str, list[float]], rates: dict[str, list[float]]) -> None:
    """Every case in turn, `block` pairs at a time, `blocks` times over, the
    order rotated each time: the disk is shared with whatever else runs on
    the machine, and its pace drifts, so cases compared are measured
    interleaved, on one journal directory, not one after another."""
    bench = make_bench(Path(tempfile.mkdtemp(prefix="staal-fsync-pairs-", dir=root)),
                       mode_threads)
    try:
        for _, _, pair in CASES:
            run_sequential(bench, pair, 10)  # warm the page cache and the helper
        for number in range(blocks):
            order = CASES[number % len(CASES):] + CASES[:number % len(CASES)]
            for _, name, pair in order:
                if mode_threads == 1:
                    began = time.perf_counter()
                    times = run_sequential(bench, pair, block)
                    rate = block / (time.perf_counter() - began)
                else:
                    times, rate = run_inflight(bench, pair, block, mode_threads)
                latencies.setdefault(name, []).extend(times)
                rates.setdefault(name, []).append(rate)
    finally:
        bench.ledger.close()
        bench.helper.shutdown()
        shutil.rmtree(bench.journals.parent, ignore_errors=True)


def report(mode: str, latencies: dict[str, list[float]], rates: dict[str, list[float]]) -> None:
    print(f"### {mode}")
    print()
    print("| pair | p50 | mean | p90 | pairs/s (median of blocks) | p50 vs today |")
    print("|---|---|---|---|---|---|")
    baseline: dict[str, float] = {}
    for group, name, _ in CASES:
        times = sorted(latencies[name])
        p50 = statistics.median(times)
        baseline.setdefault(group, p50)
        print(f"| ({group}) {name} | {p50:.0f} µs | {statistics.fmean(times):.0f} µs | "
              f"{times[int(len(times) * 0.9)]:.0f} µs | {statistics.median(rates[name]):,.0f} | "
              f"{p50 - baseline[group]:+.0f} µs |")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python benchmarks/fsync_pairs.py")
    parser.add_argument("--blocks", type=int, default=20, help="blocks per case")
    parser.add_argument("--block", type=int, default=20, help="pairs per block (sequential)")
    parser.add_argument("--inflight", type=int, default=16, help="threads in flight (0: none)")
    parser.add_argument("--dir", type=Path, default=None, help="where (default: a temp dir)")
    args = parser.parse_args()
    root = args.dir or Path(tempfile.gettempdir())
    print(f"load before: {uptime()}")
    print(f"disk: {root}")
    modes = [("sequential", 1, args.block)]
    if args.inflight > 0:
        modes.append((f"{args.inflight} in flight", args.inflight, args.block * args.inflight // 2))
    for mode, threads, block in modes:
        latencies: dict[str, list[float]] = {}
        rates: dict[str, list[float]] = {}
        measure(threads, args.blocks, block, root, latencies, rates)
        print(f"after {mode}: load {uptime().split('load average:')[-1].strip()}", flush=True)
        print()
        print(f"{args.blocks} blocks of {block} pairs per case, interleaved")
        print()
        report(mode, latencies, rates)
    print(f"load after: {uptime()}")


if __name__ == "__main__":
    main()
