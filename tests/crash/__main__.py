"""python -m tests.crash --report > docs/crash-matrix.md: run the crash
matrix and print it as that document; the exit status says whether every
cell passed."""

from __future__ import annotations

import argparse
import datetime
import sys

from tests.crash.harness import CELLS, Cell, Observed, run_cell

INTRO = """\
# The crash matrix

Produced by `python -m tests.crash --report > docs/crash-matrix.md` ({date}); every
row is the run's own observation. Each row is one `refund_order` call (a GET of the
payment intent, then a keyed refund POST), made through the official Python SDK against
the fake payment service, during which the server or its worker SIGKILLs itself right
after that step is durable (`shared/runtime/killpoints.py`); the server is started again and
the call repeated. `tests/crash/test_crash_matrix.py` runs every row in CI, and a row
passes only if everything it expects is what happened:

- **first call sees**: the answer, or the connection closed: the transport's end of
  file from a server process that is gone. A read timeout, an error, or a connection
  closed by a server still running is none of these.
- **recovery**: the server's own log lines (`worker_lost`, and `recovered` with its
  `rule`), in order: while the first server runs (a worker's death, recovered by
  resuming the run in a new worker) and at the next start, before anything is served.
- **service**: the GET and POST requests the fake service received and the refunds it
  made, counted there, so a second POST under the same key fails its row even though
  the key kept it from refunding twice. Every POST must carry the key `<run id>-2` of a
  run in the ledger, one key per refund.
- and in every row: the repeat is answered (with once, by the refund that was made, and
  as the first call was when it was answered), no run is left unsettled, the ledger's
  settlements add up to what the service refunded, no arguments file is left, and every
  journal holds one end record, as its last.

Rows with once "no" show the documented behaviour without `once`: a repeat after a
crash is a new run, bounded only by the quota.

The last three rows are warm workers (`runs_per_worker` 100): there the first server is
made two calls, each with its own order, so the service sees two refunds, each under its
run's own key, and each call must be answered by its own refund. No worker may die unused
there (a `worker_died_unused` line fails the row: a warm worker that served a run is no
fork that did no good).
"""

NOTES = """
## Reading some rows

- **worker:intent** and **worker:outcome** are the GET's intent and outcome records
  (op 1), **intent#2** and **outcome#2** the refund's. After an intent the request was
  never sent, and the new worker sends it (the refund under the key its intent
  recorded); after an outcome the new worker replays the op from the journal. Either
  way the service sees one request.
- **worker:end** kills the worker after its end record is durable and before it tells
  the supervisor; the running server resumes the run in a new worker, which finds the
  journal ended and reports that end without running anything.
- **supervisor:refund held** is not a kill point: the service holds the refund POST
  (the fake's `hang` fault) and the harness SIGKILLs the supervisor while it does.
  Its zygote and workers die with it (`PR_SET_PDEATHSIG`, and the zygote kills its
  workers when its stdin closes; the harness checks that the run's worker was among
  the supervisor's children and that none outlived it). The service sees the worker
  hang up while it holds the request; released, it makes the refund anyway, as a slow
  real service would, and the answer goes to nobody (the fake records `hung_up`). The
  journal has the refund's intent and no outcome, so the next start resumes the run and
  sends the refund again under the key its intent recorded; the service answers with the
  saved refund: two POSTs, one key, one refund.
- **supervisor:ended** kills the supervisor after it received the worker's end and
  before it settled: the journal has the end, the ledger no settlement, and the next
  start settles the run from its end record (`supervisor/recovery/at_start.py`).
- **supervisor:waiting**: the service makes the refund and drops the connection, and
  drops it again each time the worker sends it again under the same key, until the
  tool's `max_wait` (3 s here: five POSTs in all) is spent; the run stops in doubt, the
  waiting record is written and the server killed. The next start resumes it, sends the
  refund once more under its key and gets the saved refund: six POSTs, one refund.
- **supervisor:answer** kills the server right after the answer was written: the client
  has it (it listed the tools first, as clients do, so the SDK needs nothing more).
- **worker:idle** is not a kill point: after a first call, the harness SIGKILLs the
  worker that served it (its pid from `run_started`) while it rests between runs, and
  waits for the pool's `worker_died_between_runs` line; then the cell's call is made. No
  run was at stake, so nothing is recovered, and the call runs in a fresh worker (the row
  fails if it ran in the killed one).
- **worker:journal#2** kills the warm worker at its second run's journal header (kill
  points count per process): the first call ran in it, and the second call's run is
  resumed in a new worker, as a first run killed there is. The row fails if the second
  run did not start in the first call's worker.
- **worker:intent#2 (another call at once)** makes two calls at the same time with one
  fresh worker kept ahead (`STAAL_TEST_POOL_AHEAD=1`, honoured only with kill points on),
  so the later call waits in the pool's line for a worker while the other runs (unless
  that worker's fork was already ready: the row does not check which). Whichever
  run gets to its refund's intent first loses its worker there, and is resumed in a new
  one; both calls are done, one refund each.
"""


def recovery_text(running: tuple[str, ...] | list[str], start: tuple[str, ...] | list[str]) -> str:
    parts = []
    if running:
        parts.append("running: " + ", ".join(running))
    if start:
        parts.append("next start: " + ", ".join(start))
    return "; ".join(parts) or "none"


def service_text(get: int, post: int, refunds: int) -> str:
    return f"{get} GET, {post} POST, {refunds} refund{'' if refunds == 1 else 's'}"


def row(cell: Cell, observed: Observed) -> str:
    expected_recovery = recovery_text(cell.at_first, cell.at_restart)
    observed_recovery = recovery_text([e for _, e in observed.at_first],
                                      [e for _, e in observed.at_restart])
    result = "pass" if observed.passed else "FAIL: " + "; ".join(observed.problems)
    return (f"| {cell.label} | {'yes' if cell.once else 'no'} | {cell.first} | "
            f"{observed.first.get('seen', '?')} | {expected_recovery} | {observed_recovery} | "
            f"{service_text(*cell.requests, cell.refunds)} | "
            f"{service_text(observed.count('GET'), observed.count('POST'), len(observed.refunds))}"
            f" | {result} |")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.crash")
    parser.add_argument("--report", action="store_true",
                        help="print the matrix as docs/crash-matrix.md holds it")
    args = parser.parse_args()
    rows, failed = [], 0
    for cell in CELLS:
        observed = run_cell(cell)
        failed += not observed.passed
        rows.append(row(cell, observed))
        print(f"{cell.name}: {'pass' if observed.passed else 'FAIL ' + observed.explain()}",
              file=sys.stderr)
    if args.report:
        print(INTRO.format(date=datetime.date.today().isoformat()))
        print("| cell | once | first call sees: expected | observed | recovery expected | "
              "recovery observed | service expected | service observed | result |")
        print("|---|---|---|---|---|---|---|---|---|")
        print("\n".join(rows))
        print(NOTES, end="")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
