"""The worker's journal sink on a shared store (issue 15): each record goes
to the supervisor over the run's ZeroMQ channel, and `append` returns once
the supervisor answered that it committed the record as a row, so "durable
before anything depends on it" is that commit. The worker never holds the
store's DSN or its instance's fencing token: the supervisor writes the row,
and the row's condition is the fence.

A refused record (the run is no longer this instance's: it was taken over;
or the store failed) raises `JournalRefused`, which ends the run: nothing
after a record that is not durable may be performed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from staal.records.messages import JournalAck, JournalAppend
from staal.records.record import Record
from staal.worker.errors import WorkerError


class JournalRefused(WorkerError):
    """The supervisor did not commit a journal record: nothing was written.
    `store_kind` is the kind the supervisor gave its refusal (`fenced`,
    `store`, ...), when it gave one."""

    kind = "journal_refused"
    store_kind: str | None = None


class ChannelSink:
    """A `JournalSink` whose records the supervisor commits; `request` sends
    one message and returns the supervisor's answer (worker/processes/serve.py's
    channel)."""

    def __init__(self, run: str, path: Path, request: Callable[[Record], Record]) -> None:
        self.run = run
        self.path = path  # the supervisor's copy of the journal, for a stop's resolve hint
        self._request = request
        self._closed = False

    def append(self, record: Mapping[str, Any], sync: bool = True) -> None:
        # Every record waits for its commit, `sync` or not: a row is cheap
        # next to a round trip saved by not waiting, and a later record
        # can then never be durable before an earlier one.
        if self._closed:
            raise JournalRefused(f"run {self.run}: its journal was closed")
        answer = self._request(JournalAppend(run=self.run, record=dict(record)))
        if not isinstance(answer, JournalAck) or answer.run != self.run:
            raise JournalRefused(f"run {self.run}: the supervisor answered a journal record "
                                 f"with {type(answer).__name__}, not its acknowledgement")
        if answer.refused is not None:
            self._closed = True
            refused = JournalRefused(f"run {self.run}: the journal record was not written: "
                                     f"{answer.refused}")
            refused.store_kind = answer.kind  # the supervisor's kind for it (`fenced`, `store`)
            raise refused

    def close(self) -> None:
        self._closed = True
