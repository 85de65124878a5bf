"""Group commit for the ledger: concurrent writers share fsyncs.

Events are appended in the order they were decided, and whichever waiting
caller finds no flush under way writes all that are pending with one fsync
and wakes the rest (the leader/follower scheme `FileLedger` relies on).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from staal.records.appendlog import AppendLog
from staal.supervisor.errors import SupervisorError

__all__ = ["GroupCommit", "LedgerUnusable"]


class LedgerUnusable(SupervisorError):
    """A ledger write or fsync failed: what is on disk is no longer known, so
    nothing more is written or answered. Restarting reopens the ledger, which
    cuts a torn tail."""

    kind = "ledger_unusable"


class GroupCommit:
    """Appends queued events so that concurrent writers share fsyncs.

    Leader/follower: `submit` queues an event and returns its sequence
    number; `wait(seq)` returns once an fsync covers it. A waiter that finds
    no flush under way becomes the leader: it takes everything queued, writes
    it (`sync=False` for all but the last line, then one fsync) and wakes
    every waiter; events queued meanwhile go out together in the next flush.
    """

    def __init__(self, log: AppendLog) -> None:
        self._log = log
        self._cond = threading.Condition()
        self._queue: list[dict[str, Any]] = []
        self._submitted = 0
        self._durable = 0
        self._flushing = False
        self._failure: BaseException | None = None
        self._waiting = 0
        self._watchers = 0

    def submit(self, record: dict[str, Any]) -> int:
        with self._cond:
            self._queue.append(record)
            self._submitted += 1
            if self._watchers:
                self._cond.notify_all()
            return self._submitted

    def last(self) -> int:
        with self._cond:
            return self._submitted

    def flush(self) -> None:
        self.wait(self.last())

    def wait(self, seq: int) -> None:
        with self._cond:
            while True:
                self._check_failure()
                if self._durable >= seq:
                    return
                if not self._flushing:
                    break
                self._follow()
            self._flushing = True
            batch, self._queue = self._queue, []
            upto = self._submitted
        self._lead(batch, upto)

    def _follow(self) -> None:
        self._waiting += 1
        if self._watchers:
            self._cond.notify_all()
        try:
            self._cond.wait()
        finally:
            self._waiting -= 1

    def _lead(self, batch: list[dict[str, Any]], upto: int) -> None:
        try:
            for record in batch[:-1]:
                self._log.append(record, sync=False)
            self._log.append(batch[-1], sync=True)
        except BaseException as exc:
            self.fail(exc)
            raise LedgerUnusable(f"writing the ledger {self._log.path} failed: {exc}") from exc
        with self._cond:
            self._durable = upto
            self._flushing = False
            self._cond.notify_all()

    def fail(self, exc: BaseException) -> None:
        with self._cond:
            self._failure = exc
            self._flushing = False
            self._cond.notify_all()

    @property
    def usable(self) -> bool:
        with self._cond:
            return self._failure is None and not self._log.closed

    def check_usable(self) -> None:
        with self._cond:
            self._check_failure()

    def _check_failure(self) -> None:
        if self._failure is not None:
            raise LedgerUnusable(
                f"an earlier write to the ledger {self._log.path} failed "
                f"({self._failure}); restart to reopen it") from self._failure
        if self._log.closed:
            raise LedgerUnusable(f"the ledger {self._log.path} is closed")

    @property
    def submitted(self) -> int:
        return self._submitted

    @property
    def waiting(self) -> int:
        """Callers waiting behind a flush under way."""
        return self._waiting

    def wait_for(self, condition: Callable[[GroupCommit], bool], timeout: float) -> bool:
        """Block until `condition(self)` holds (checked whenever a caller
        queues an event or starts waiting); for tests that hold a flush open
        to see who shares it."""
        with self._cond:
            self._watchers += 1
            try:
                return self._cond.wait_for(lambda: condition(self), timeout)
            finally:
                self._watchers -= 1

    def replace_log(self, log: AppendLog) -> AppendLog:
        """Append to `log` from now on (after compaction); the old one is returned."""
        with self._cond:
            old, self._log = self._log, log
            return old

    def close(self) -> None:
        self._log.close()
