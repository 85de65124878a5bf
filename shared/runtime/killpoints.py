"""Kill points for the crash harness (DESIGN.md section 7).

With `STAAL_TEST_KILL_POINTS=1` and `STAAL_KILL_AT=<process>:<name>` set, the
process kills itself with SIGKILL right after that step is durable.
`STAAL_KILL_AT=worker:intent#2` kills at the second time it gets there.
`STAAL_KILL_ONCE=<path>` makes it happen once across restarts: the first
process to get there creates the file and dies; later ones see the file and
go on. Without the two variables this costs one dictionary lookup.

The names, each right after the step it names is durable:

- supervisor: `reserve` (the reserve event), `inputs` (the arguments file),
  `waiting` (the waiting record), `ended` (a worker's end received, before
  the settle), `settle` (the settle event), `answer` (the answer written),
  `cancel` (a task's cancel recorded, before it is passed on or answered);
- worker: `journal_file` (the journal's file created, before its header is
  written: a journal cut during its creation), `journal` (the journal's
  first line), `intent` and `outcome` (the two halves of each op), `end`
  (the end record, before the worker says so).

tests/crash runs a call through each of these (docs/crash-matrix.md is its
report). The ledger's compaction has its own, `compact.written`,
`compact.synced`, `compact.renamed` and `compact.done`, which
tests/supervisor/store/test_ledger.py kills at.

`STAAL_PAUSE_AT=<process>:<name>` (with `STAAL_TEST_KILL_POINTS=1`) makes
the process wait there instead, the first time it gets there: it writes
`staal: paused at <process>:<name>` on stderr, then waits until the test
opens the FIFO `STAAL_PAUSE_FIFO` for writing and closes it (what happens
meanwhile is the test's: a task's cancel before its run is sent, say).

`STAAL_TEST_POOL_AHEAD=<n>`, honoured only with `STAAL_TEST_KILL_POINTS=1`,
keeps `n` fresh workers on their way instead of the pool's own number
(`pool_ahead`): with one, a second call of a tool waits in the pool's line
for a worker, as the crash matrix's concurrent cell needs.

`STAAL_TEST_LOCK_WAIT_S=<s>`, honoured only with `STAAL_TEST_KILL_POINTS=1`,
is how long a server waits for its journal directory's lock instead of
5 s (`lock_wait_s`): a test of what happens while it waits needs the wait to
outlast a loaded machine's delays, one of the refusal none.
"""

from __future__ import annotations

import os
import signal
import sys

_counts: dict[str, int] = {}
_paused: set[str] = set()


def kill_point(process: str, name: str) -> None:
    if os.environ.get("STAAL_TEST_KILL_POINTS") != "1":
        return
    _pause(f"{process}:{name}")
    target = os.environ.get("STAAL_KILL_AT", "")
    where, _, nth = target.partition("#")
    if where != f"{process}:{name}":
        return
    _counts[where] = _counts.get(where, 0) + 1
    if _counts[where] != (int(nth) if nth else 1):
        return
    once = os.environ.get("STAAL_KILL_ONCE")
    if once:
        try:
            os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            return
    os.kill(os.getpid(), signal.SIGKILL)


def _pause(at: str) -> None:
    if os.environ.get("STAAL_PAUSE_AT") != at or at in _paused:
        return
    _paused.add(at)
    print(f"staal: paused at {at}", file=sys.stderr, flush=True)
    with open(os.environ["STAAL_PAUSE_FIFO"], "rb") as fifo:  # until the test writes and closes it
        fifo.read()


def pool_ahead(usual: int) -> int:
    """The fresh workers the pool keeps on their way: `usual`, unless the
    crash harness sets fewer (a test-only variable, ignored in production)."""
    if os.environ.get("STAAL_TEST_KILL_POINTS") != "1":
        return usual
    value = os.environ.get("STAAL_TEST_POOL_AHEAD", "")
    if not value:
        return usual
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"STAAL_TEST_POOL_AHEAD must be a whole number of at least 1, "
                         f"not {value!r}")
    return int(value)


def lock_wait_s(usual: float) -> float:
    """How long a starting server waits for the journal directory's lock:
    `usual`, unless a test sets it (a test-only variable, ignored in production)."""
    if os.environ.get("STAAL_TEST_KILL_POINTS") != "1":
        return usual
    value = os.environ.get("STAAL_TEST_LOCK_WAIT_S", "")
    if not value:
        return usual
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"STAAL_TEST_LOCK_WAIT_S must be a number of seconds, not {value!r}") from None
