"""The file ledger: `<journals>/server.ledger`, an `AppendLog` of `LEDGER`
events, read whole at open into a `LedgerState` (state.py); the embedded
implementation of `Ledger` (ledger.py). Every event is durable before the
call that wrote it returns; writers share fsyncs (group commit). Only one
process may write it: the caller holds `ServerLock` first.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from staal.manifest.model import QuotaConfig
from staal.money import Money
from staal.records.appendlog import AppendLog, line_of
from staal.records.fsio import FS, OS_SYNC, Syncer
from staal.records.ledger_records import LEDGER, Forget
from staal.runtime.clock import Clock
from staal.runtime.killpoints import kill_point
from staal.supervisor.store.caller_runs import CallerRuns, page_in
from staal.supervisor.store.entries import (
    Admission,
    Compaction,
    FilesKept,
    OnceRequest,
    OverQuota,
    QuotaUse,
    Reserved,
    ReserveResult,
    RunEntry,
)
from staal.supervisor.store.group_commit import GroupCommit, LedgerUnusable
from staal.supervisor.store.ledger import (
    EndsRuns,
    Stamper,
    Warn,
    build_state,
    check_held,
    checked_encoding,
    decide,
    new_reserve,
    quota_refusal,
    warn_on_stderr,
)
from staal.supervisor.store.state import Event, LedgerState

COMPACT_SUFFIX = ".compact"
# A test's lever (tests/powerloss, scenario "two in flight"): with
# `STAAL_TEST_RESERVES_TOGETHER=<n>`, the first reserve of this process waits
# (at most TOGETHER_S) until n - 1 more events are queued behind it, so that
# n concurrent calls' reserves share one fsync whatever the timing. Unset,
# it costs one lookup at open.
TOGETHER_VARIABLE = "STAAL_TEST_RESERVES_TOGETHER"
TOGETHER_S = 20.0
_TEMP_FLAGS = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC
T = TypeVar("T")


class FileLedger(EndsRuns):
    """The embedded ledger over `<journals>/server.ledger`; made by `open`."""

    def __init__(self, path: Path, log: AppendLog, state: LedgerState, clock: Clock,
                 syncer: Syncer, warn: Warn) -> None:
        self._path = path
        self._state = state
        self._syncer = syncer
        self._stamper = Stamper(clock, warn, str(path))
        self._lock = threading.Lock()
        self._commit = GroupCommit(log)
        self._together = int(os.environ.get(TOGETHER_VARIABLE) or 0)

    @classmethod
    def open(cls, path: str | os.PathLike[str], clock: Clock, syncer: Syncer = OS_SYNC,
             warn: Warn | None = None) -> FileLedger:
        """Open (or create, in a 0700 directory) the ledger at `path` and read
        it: a torn last line is cut off, any other damage raises `LogDamaged`
        naming the line. `warn` receives a message when the clock is found
        behind the ledger (default: a line on stderr)."""
        target = Path(path)
        log, read = AppendLog.open_or_create(target, LEDGER.decode, syncer)
        try:
            state = build_state(read.records, os.fspath(target))
        except BaseException:
            log.close()
            raise
        ledger = cls(target, log, state, clock, syncer, warn or warn_on_stderr)
        ledger.now_ms()  # a clock behind the ledger is reported at once
        return ledger

    @property
    def path(self) -> Path:
        return self._path

    # -- time ---------------------------------------------------------------

    def now_ms(self) -> int:
        with self._lock:
            return self._stamp()

    def _stamp(self) -> int:
        return self._stamper.stamp(self._state.last_ms)

    # -- writing --------------------------------------------------------------

    def reserve_call(self, tool: str, quota: QuotaConfig | None, calls: int,
                     money: tuple[Money, ...], once: OnceRequest | None,
                     admission: Admission | None = None) -> ReserveResult:
        """Find the run holding `once`'s key, check `quota` (and the
        caller's own limits, `admission`), or reserve a new run; all under
        one lock, and answered only once durable."""
        check_held(calls, money, "money")
        with self._lock:
            self._commit.check_usable()
            now = self._stamp()
            result: ReserveResult | None = decide(self._state, tool, quota, calls, money, once,
                                                 admission, now)
            if result is None:
                entry, seq = self._append(new_reserve(tool, now, calls, money, once, admission))
                result = Reserved(entry.run, now, entry)
            else:
                seq = self._commit.last()
        if self._together and isinstance(result, Reserved):
            self._wait_for_company(seq)
        self._commit.wait(seq)
        return result

    def _wait_for_company(self, seq: int) -> None:
        """The test's lever (TOGETHER_VARIABLE), once: hold this reserve
        back, unflushed, until the reserves of the calls beside it are
        queued behind it (counted by sequence, which only grows, so a
        flush that took them meanwhile does not hide them)."""
        with self._lock:
            more, self._together = self._together - 1, 0
        self._commit.wait_for(lambda commit: commit.submitted >= seq + more, TOGETHER_S)

    def forget(self, run: str) -> RunEntry:
        """Release a settled run's once key: an operator's, made holding the
        server lock while no server serves (supervisor/recovery/forget.py)."""
        return self._end(lambda now: Forget(run=run, time=now))

    def _end(self, make: Callable[[int], Event]) -> RunEntry:
        with self._lock:
            self._commit.check_usable()
            entry, seq = self._append(make(self._stamp()))
        self._commit.wait(seq)
        return entry

    def _append(self, event: Event) -> tuple[RunEntry, int]:
        """Check `event` as a restart would read it back, apply it, and queue
        it for the next flush. Called under the lock, so the queue is in the
        order the state saw."""
        encoded = checked_encoding(event)
        entry = self._state.apply(event)
        return entry, self._commit.submit(encoded)

    # -- reading --------------------------------------------------------------

    def run(self, run_id: str) -> RunEntry | None:
        return self._read(lambda: self._state.run(run_id))

    def runs(self) -> tuple[RunEntry, ...]:
        return self._read(self._state.runs)

    def caller_runs(self, which: CallerRuns) -> tuple[RunEntry, ...]:
        """Filtered in memory: this process holds the whole ledger anyway."""
        return self._read(lambda: page_in(reversed(self._state.runs()), which))

    def once_holder(self, tool: str, key: str) -> RunEntry | None:
        """The run holding `tool`'s once `key` now, if one does."""
        return self._read(lambda: self._state.once_holder(tool, key, self._stamp()))

    def unsettled(self) -> tuple[RunEntry, ...]:
        return self._read(self._state.unsettled)

    def mine(self) -> tuple[RunEntry, ...]:
        return self.runs()

    def mine_unsettled(self) -> tuple[RunEntry, ...]:
        return self.unsettled()

    def renew_lease(self, lease_ms: int) -> bool:
        return True  # one process, holding the directory's lock, for as long as it runs

    def quota_use(self, tool: str, quota: QuotaConfig, now: int | None = None) -> QuotaUse:
        """`tool`'s use of `quota` over the window ending at `now` (default:
        ledger time)."""
        def use() -> QuotaUse:
            return self._state.quota_use(tool, quota, self._stamp() if now is None else now)
        return self._read(use)

    def over_quota(self, tool: str, quota: QuotaConfig | None, calls: int,
                   money: tuple[Money, ...], admission: Admission | None = None) -> OverQuota | None:
        """A refusal is given once the events it was decided on are durable;
        a call let on waits for no fsync (the reserve decides and waits)."""
        with self._lock:
            self._commit.check_usable()
            over = quota_refusal(self._state, tool, quota, calls, money, admission, self._stamp())
            seq = self._commit.last()
        if over is not None:
            self._commit.wait(seq)
        return over

    def _read(self, query: Callable[[], T]) -> T:
        """Answer from the state, once every event it reflects is durable."""
        with self._lock:
            self._commit.check_usable()
            answer, seq = query(), self._commit.last()
        self._commit.wait(seq)
        return answer

    # -- compaction -------------------------------------------------------------

    def compact(self, files_kept: FilesKept, windows: Mapping[str, int]) -> Compaction:
        """Rewrite the ledger with only the runs seed 000 section 6 keeps.

        `files_kept`: the runs whose journal or log is still kept (a set of
        run ids, or a predicate on a `RunEntry`); `windows`: each tool's quota
        window in ms. The new ledger is written to a temporary file beside the
        old, fsync'd, renamed over it and the directory fsync'd, so a crash
        leaves one whole ledger or the other. Calls wait while it runs."""
        with self._lock:
            self._commit.flush()
            now = self._stamp()
            state = self._state
            keeps = {e.run: state.keeps(e, files_kept, windows, now) for e in state.runs()}
            kept = tuple(run for run, keep in keeps.items() if keep)
            dropped = tuple(run for run, keep in keeps.items() if not keep)
            temp = self._path.with_name(self._path.name + COMPACT_SUFFIX)
            _unlink_if_there(temp)
            if dropped:
                self._rewrite(temp, state.events_of(kept))
            return Compaction(kept, dropped)

    def _rewrite(self, temp: Path, events: list[Event]) -> None:
        data = b"".join(line_of(LEDGER.encode(e)) for e in events)
        try:
            _write_synced(temp, data, self._syncer)
        except BaseException:
            _unlink_if_there(temp)
            raise
        kill_point("supervisor", "compact.synced")
        try:
            FS.replace(temp, self._path)
            kill_point("supervisor", "compact.renamed")
            self._syncer.sync_dir(self._path.parent)
            kill_point("supervisor", "compact.done")
            log, read = AppendLog.open(self._path, LEDGER.decode, self._syncer)
            self._commit.replace_log(log).close()
            state = build_state(read.records, os.fspath(self._path))
        except BaseException as exc:
            # Which file the name holds after a power cut is unknown now.
            self._commit.fail(exc)
            raise LedgerUnusable(f"compacting {self._path} failed after the rename: {exc}") \
                from exc
        # Dropped events may have been the latest; time still never goes back.
        state.last_ms = max(self._state.last_ms, state.last_ms)
        self._state = state

    def close(self) -> None:
        """Flush what is pending and close the file; after a failed write,
        just close it."""
        with self._lock:
            try:
                if self._commit.usable:
                    self._commit.flush()
            finally:
                self._commit.close()

    def __enter__(self) -> FileLedger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _write_synced(path: Path, data: bytes, syncer: Syncer) -> None:
    fd = FS.open(path, _TEMP_FLAGS, 0o600)
    try:
        os.fchmod(fd, 0o600)
        FS.write(fd, data)
        kill_point("supervisor", "compact.written")
        syncer.sync_file(fd)
    finally:
        os.close(fd)


def _unlink_if_there(path: Path) -> None:
    try:
        FS.unlink(path)
    except FileNotFoundError:
        pass
