"""supervisor/views/timeline.py: a run's journal as the console draws it, read
with the one journal reader; fast, with journals written here."""

from __future__ import annotations

from staal.journal.records import End, Header, Intent, OutcomeRecord, Resolved, Stopped, Value
from staal.journal.writer import JournalWriter
from staal.records.outcomes import Failure
from staal.supervisor.views.timeline import timeline

RUN = "0123456789abcdef0123456789abcdef"
SHA = "ab" * 32
T0 = 1_760_000_000_000


def _journal(path, *records):
    header = Header(run=RUN, tool="refund", program="/srv/refund.py", program_sha256=SHA,
                    config_sha256=SHA, inputs_sha256=SHA, runtime="staal 0.1.0", time=T0)
    with JournalWriter.create(path, header) as writer:
        for record in records:
            writer.write(record)
    return path


def _intent(op, at):
    return Intent(op=op, param="pay", cap="net.http.post", action="post", args_sha256=SHA,
                  time=T0 + at)


def test_an_op_answered_as_not_having_happened_and_attempted_again_is_two_bars(tmp_path):
    path = _journal(tmp_path / "run.journal", Value(op=1, cap="clock.now", value=T0, time=T0 + 1),
                    _intent(2, 10), Stopped(op=2, message="op 2 may or may not have happened",
                                            time=T0 + 20),
                    Resolved(op=2, happened=False, time=T0 + 30), _intent(2, 40),
                    OutcomeRecord(op=2, ok=False, time=T0 + 55,
                                  failure=Failure("action", "402 card declined")),
                    End(outcome="failed", time=T0 + 60, failure=Failure("action", "declined")))
    line = timeline(path, RUN, "refund")
    assert [(e.kind, e.op, e.start_ms, e.end_ms, e.ok) for e in line.events] == [
        ("value", 1, 1, 1, True), ("op", 2, 10, 30, False), ("stop", 2, 20, 20, None),
        ("answer", 2, 30, 30, False), ("op", 2, 40, 55, False), ("end", None, 60, 60, False)]
    assert "answered: it did not happen" in line.events[1].detail
    assert line.events[4].detail.endswith("failed: action")  # its message may quote a URL
    assert line.events[5].detail == "action: declined" and line.span_ms == 60


def test_an_op_with_no_outcome_is_open_and_a_missing_or_damaged_journal_is_a_problem(tmp_path):
    line = timeline(_journal(tmp_path / "run.journal", _intent(1, 5)), RUN, "refund")
    (op,) = line.events
    assert (op.end_ms, op.ok, line.problem) == (None, None, None)
    assert op.detail == "net.http.post; no outcome yet"
    assert timeline(tmp_path / "gone.journal", RUN, "refund").problem.startswith("no journal")
    (tmp_path / "bad.journal").write_text('{"type": "print"}\n')
    assert timeline(tmp_path / "bad.journal", RUN, "refund").problem.startswith(
        "the journal cannot be read")
