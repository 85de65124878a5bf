"""worker/runs/journal_sink.py: a worker's journal on a shared store, each
record committed by the supervisor before the run goes on; a refusal comes
back as data with its kind, and stops the journal."""

from __future__ import annotations

from pathlib import Path

import pytest

from staal.records.messages import JournalAck, JournalAppend
from staal.records.record import Record
from staal.worker.runs.journal_sink import ChannelSink, JournalRefused

RUN = "ab" * 16


def test_a_refused_record_raises_with_the_kind_the_supervisor_gave_and_closes_the_journal():
    sent: list[Record] = []

    def request(message: Record) -> Record:
        sent.append(message)
        return JournalAck(run=RUN, refused="the run is owned by another instance", kind="fenced")

    sink = ChannelSink(RUN, Path("/journals/t/ab") / f"{RUN}.journal", request)
    with pytest.raises(JournalRefused, match="owned by another instance") as refused:
        sink.append({"type": "print", "text": "x"})
    assert (refused.value.kind, refused.value.store_kind) == ("journal_refused", "fenced")
    assert [type(m) for m in sent] == [JournalAppend]
    with pytest.raises(JournalRefused, match="its journal was closed"):
        sink.append({"type": "print", "text": "y"})
    assert len(sent) == 1  # nothing more was sent after the refusal


def test_a_committed_record_returns_and_the_journal_goes_on():
    sent: list[Record] = []

    def request(message: Record) -> Record:
        sent.append(message)
        return JournalAck(run=RUN)

    sink = ChannelSink(RUN, Path("/journals/x.journal"), request)
    sink.append({"type": "print", "text": "a"})
    sink.append({"type": "print", "text": "b"})
    assert [m.record["text"] for m in sent if isinstance(m, JournalAppend)] == ["a", "b"]
