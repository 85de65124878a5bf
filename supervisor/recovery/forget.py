"""`staal-supervisor forget MANIFEST --run RUN`: an operator releases an
ended run's `once` key (issue 24 item 9), so that the next identical call
starts a new run: after the program that failed is fixed, say, instead of
answering the stale failure for the key's whole `keep`.

The release is a ledger event, `forget` (shared/records/ledger_records.py), durable
before the command answers; replay at start and compaction keep it
(supervisor/store/state.py), so no restart brings the key back. The run itself
stays settled: its journal is kept for `server.keep` days as any run's,
`staal_run_status` still answers its outcome, and what it spent still
counts against its quota. Only an ended run's key is released: a running
or waiting run still acts under it.

Where it is written, as `staal-supervisor resolve` does:
- PostgreSQL: from any machine with the DSN, while instances serve, in one
  transaction holding the run's row and its once key (as a reserve with that
  key does, so none decides in between); every instance's next decision on
  the key reads it, and a serving instance logs it when it next reads a
  once key's holder.
- The file store: its ledger is one server's, held in that server's memory
  (seed 000 section 6), so the command takes the journal directory's server
  lock as a server would, and is refused while a server holds it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import orjson

from staal.manifest.model import ServerConfig
from staal.records.waiting import WaitingRecord
from staal.runtime.clock import SYSTEM_CLOCK, Clock
from staal.runtime.ids import is_run_id
from staal.runtime.utc import for_people as when
from staal.supervisor.errors import SupervisorError
from staal.supervisor.store.choice import dsn_of
from staal.supervisor.store.entries import RunEntry
from staal.supervisor.store.errors import StoreRefused
from staal.supervisor.store.file_ledger import FileLedger
from staal.supervisor.store.files import RunFiles
from staal.supervisor.store.ledger import LEDGER_FILE
from staal.supervisor.store.lockfile import ServerLock, ServerLockHeld
from staal.supervisor.store.notes import FileNotes
from staal.supervisor.store.postgres.forget_rows import commit_forget
from staal.supervisor.telemetry.log import log_file_line


class ForgetRefused(SupervisorError):
    """The run's key cannot be forgotten: nothing was written."""

    kind = "forget_refused"


# A server starting meanwhile may hold the lock a moment; one serving holds it.
LOCK_WAIT_S = 1.0
# The run's own log line (for people; the ledger event is the record).
LOG_EVENT = "once_forgotten"

_RUNNING = "running"
_INTERRUPTED = "interrupted (the server resumes it at its next start)"


def forget_run(server: ServerConfig, run: str, clock: Clock = SYSTEM_CLOCK,
               environ: Mapping[str, str] = os.environ) -> str:
    """Release `run`'s once key in the manifest's store; what was done, for
    the operator. `ForgetRefused` (nothing written) when it cannot be."""
    if not is_run_id(run):
        raise ForgetRefused(f"--run: {run!r} is not a run id (32 hexadecimal digits, as "
                            "calls and status show them)")
    if server.store is None:
        entry = forget_in_files(server.journals, run, clock)
        seen = "the server sees it when it next starts"
    else:
        entry = forget_in_store(dsn_of(server, environ), run, clock)
        seen = "every instance sees it at its next call"
    assert entry.ended_ms is not None  # only an ended run's key is forgotten (`refusal`)
    return (f"run {run} ({entry.tool}, ended {entry.outcome} at {when(entry.ended_ms)}): its "
            f"once key is forgotten; the next identical call starts a new run ({seen}). Its "
            "journal is kept as any run's, and what it spent still counts against its quota")


def refusal(entry: RunEntry | None, run: str, waiting: WaitingRecord | None, now_ms: int,
            unfinished: str = _RUNNING) -> str | None:
    """Why `run`'s key cannot be forgotten at `now_ms`, or None. `waiting`
    is its waiting record; `unfinished` names the state of a run that has
    not ended and waits for no one."""
    only = "only an ended run's once key can be forgotten"
    if entry is None:
        return (f"run {run} is not in the ledger: no such run, or it was dropped from it "
                "long after it ended")
    if entry.state == "unsettled" and waiting is not None:
        return (f"run {run} is waiting for an operator (op {waiting.op} in doubt), not "
                f"ended: {only}; answer it first ({waiting.resolve})")
    if entry.state == "unsettled":
        return f"run {run} is {unfinished}, not ended: {only}"
    if entry.state == "released":
        return f"run {run} never started (its reservation was released): it holds no once key"
    if entry.once is None:
        return (f"run {run} has no once key (its tool {entry.tool} has no `once`): there is "
                "no key to forget")
    if entry.forgotten_ms is not None:
        return f"run {run}'s once key was forgotten already, at {when(entry.forgotten_ms)}"
    if not entry.holds_key(now_ms):
        return (f"run {run}'s once key is held no more: its keep ended; the next identical "
                "call starts a new run already")
    return None


def forget_in_files(journals: Path, run: str, clock: Clock = SYSTEM_CLOCK) -> RunEntry:
    """The file store: holding the server lock, the forget event appended to
    `<journals>/server.ledger` and fsync'd, and a line in the run's log."""
    path = journals / LEDGER_FILE
    if not path.is_file():
        raise ForgetRefused(f"run {run} is not in the ledger: {path} does not exist")
    try:
        lock = ServerLock.acquire(journals, LOCK_WAIT_S)
    except ServerLockHeld as exc:
        raise ForgetRefused(
            f"{exc.message}. The file store's ledger is that server's alone: stop it, forget "
            "the run, then start it again") from None
    with lock, FileLedger.open(path, clock) as ledger:
        entry = ledger.run(run)
        files = RunFiles(journals, entry.tool if entry else "", run)
        waiting = FileNotes(journals).waiting(files) if entry else None
        problem = refusal(entry, run, waiting, ledger.now_ms(), _INTERRUPTED)
        if problem is not None:
            raise ForgetRefused(problem)
        forgotten = ledger.forget(run)
        FileNotes(journals).log(files, log_file_line(LOG_EVENT, by="staal-supervisor forget"))
    return forgotten


def forget_in_store(dsn: str, run: str, clock: Clock = SYSTEM_CLOCK) -> RunEntry:
    """The PostgreSQL store: the forget event committed with a line of the
    run's log (store/postgres/forget_rows.py), refused by `refusal`'s rule."""
    log_line = orjson.loads(log_file_line(LOG_EVENT, by="staal-supervisor forget"))
    try:
        return commit_forget(dsn, run, refusal, log_line, clock)
    except StoreRefused as exc:
        raise ForgetRefused(exc.message) from None
