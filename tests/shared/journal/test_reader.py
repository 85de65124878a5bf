"""staal.journal.reader: a run's journal written with JournalWriter and read
back as one coherent story; any record that does not fit the story is
damage named by its line (DESIGN.md section 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from staal.errors import LogDamaged, LogExists
from staal.journal.reader import OpEntry, read_journal
from staal.journal.records import (
    JOURNAL,
    End,
    Header,
    Intent,
    OutcomeRecord,
    Print,
    Resolved,
    Stopped,
    Value,
)
from staal.journal.writer import JournalWriter
from staal.money import Money
from staal.records.appendlog import AppendLog
from staal.records.canonical import canonical_json
from staal.records.outcomes import Failure, Usage
from staal.records.record import Record
from staal.runtime.clock import FixedClock

RUN = "0123456789abcdef0123456789abcdef"
SHA = "ab" * 32
T0 = 1_760_000_000_000


def header() -> Header:
    return Header(run=RUN, tool="refund_order", program="/srv/refund.py", program_sha256=SHA,
                  config_sha256=SHA, inputs_sha256=SHA, runtime="staal 0.1.0", time=T0)


def intent(op: int, cap: str = "net.http.get", action: str = "get",
           key: str | None = None) -> Intent:
    return Intent(op=op, param="pay", cap=cap, action=action, args_sha256=SHA, time=T0 + op,
                  idempotency_key=key)


def outcome(op: int, **fields) -> OutcomeRecord:
    return OutcomeRecord(op=op, ok=fields.pop("ok", True), time=T0 + op, **fields)


def value(op: int) -> Value:
    return Value(op=op, cap="clock.now", value=T0 + op, time=T0 + op)


def printed(seq: int) -> Print:
    return Print(seq=seq, text=f"line {seq}", time=T0)


def stopped(op: int) -> Stopped:
    return Stopped(op=op, message=f"op {op} may or may not have happened", time=T0)


def resolved(op: int, happened: bool, result=None) -> Resolved:
    return Resolved(op=op, happened=happened, time=T0, result=result)


def end(outcome_kind: str = "done", **fields) -> End:
    return End(outcome=outcome_kind, time=T0 + 1000, **fields)


def write(path: Path, *records: Record) -> Path:
    """Every record as one durable line, exactly as given (no story checks)."""
    with AppendLog.create(path) as log:
        for record in records:
            log.append(JOURNAL.encode(record))
    return path


def line_of(record: Record) -> bytes:
    return canonical_json(JOURNAL.encode(record)) + b"\n"


def damage_line(path: Path) -> int:
    with pytest.raises(LogDamaged) as caught:
        read_journal(path)
    assert caught.value.kind == "log_damaged"
    assert caught.value.path == str(path)
    return caught.value.line


# -- a well-formed story ------------------------------------------------


def test_a_journal_written_by_journal_writer_is_read_back_as_its_story(tmp_path):
    path = tmp_path / "run.journal"
    clock = FixedClock(T0)
    writer = JournalWriter.create(path, header(), clock)
    records = [
        intent(1), outcome(1, result={"status": 200}),
        value(2),
        printed(1),
        intent(3, cap="net.http.post", action="post", key=f"{RUN}-3"),
        stopped(3),
        resolved(3, True, {"status": 201}),
        printed(2),
        intent(4, cap="net.http.post", action="post"),
        outcome(4, ok=False, failure=Failure("action", "HTTP 402")),
        intent(5, cap="payments.stripe.refund", action="refund"),
        outcome(5, result={"id": "re_1"}, charged=(Money("35", "USD"),)),
        end("done", result={"refund": "re_1"},
            usage={"pay": Usage(actions=4, charged=(Money("35", "USD"),))}),
    ]
    for record in records:
        writer.write(record)
    writer.close()

    state = read_journal(path)
    assert state.path == path
    assert state.header == header()
    assert sorted(state.ops) == [1, 2, 3, 4, 5]
    assert state.last_op == 5
    assert state.ops[1].intent == intent(1)
    assert state.ops[1].outcome == outcome(1, result={"status": 200})
    assert state.ops[2].value == value(2) and state.ops[2].intent is None
    assert state.ops[3].resolved == resolved(3, True, {"status": 201})
    assert state.ops[3].outcome is None
    assert state.ops[4].outcome.failure == Failure("action", "HTTP 402")
    assert state.ops[5].outcome.charged == (Money("35.00", "USD"),)
    assert state.prints == 2
    assert state.stopped is None  # op 4 began after the stop at op 3
    assert state.end == records[-1]
    assert state.records == len(records) + 1
    assert state.in_doubt() == []
    assert all(entry.settled for entry in state.ops.values())


def test_a_header_alone_is_a_journal_with_nothing_done(tmp_path):
    state = read_journal(write(tmp_path / "j", header()))
    assert state.ops == {} and state.last_op == 0
    assert state.prints == 0 and state.stopped is None and state.end is None
    assert state.in_doubt() == []


def test_an_intent_without_an_outcome_is_in_doubt_and_unsettled(tmp_path):
    state = read_journal(write(tmp_path / "j", header(), intent(1), outcome(1), intent(2)))
    assert state.in_doubt() == [2]
    assert not state.ops[2].settled
    assert state.ops[2].in_doubt
    assert state.ops[1].settled and not state.ops[1].in_doubt


def test_a_stop_for_an_op_in_doubt_is_the_journal_state(tmp_path):
    state = read_journal(write(tmp_path / "j", header(), intent(1), stopped(1)))
    assert state.stopped == stopped(1)
    assert state.in_doubt() == [1]
    assert state.end is None


def test_an_outcome_after_a_stop_clears_the_stop(tmp_path):
    # A resumed run that could send the op again (a read) records its outcome.
    state = read_journal(write(tmp_path / "j", header(), intent(1), stopped(1), outcome(1)))
    assert state.stopped is None
    assert state.in_doubt() == []


def test_a_resolution_that_it_happened_settles_the_op(tmp_path):
    state = read_journal(write(tmp_path / "j", header(), intent(1), stopped(1),
                               resolved(1, True, {"status": 200})))
    entry = state.ops[1]
    assert entry.settled and not entry.in_doubt
    assert state.in_doubt() == []


def test_a_resolution_that_it_did_not_happen_leaves_the_op_to_be_performed(tmp_path):
    state = read_journal(write(tmp_path / "j", header(), intent(1), stopped(1),
                               resolved(1, False)))
    entry = state.ops[1]
    assert not entry.settled  # it still has to be performed
    assert not entry.in_doubt  # but nobody need be asked again
    assert state.in_doubt() == []


def test_an_op_resolved_as_not_happened_may_then_be_performed(tmp_path):
    state = read_journal(write(tmp_path / "j", header(), intent(1), stopped(1),
                               resolved(1, False), outcome(1), intent(2), outcome(2), end()))
    assert state.ops[1].settled
    assert state.end is not None


def test_an_op_resolved_as_not_happened_is_attempted_again_under_a_new_intent(tmp_path):
    again = Intent(op=1, param="pay", cap="net.http.get", action="get", args_sha256=SHA,
                   time=T0 + 99)
    state = read_journal(write(tmp_path / "j", header(), intent(1), stopped(1),
                               resolved(1, False), again))
    assert state.ops[1].intent == again
    assert state.ops[1].resolved is None
    # That attempt's answer was lost too: it is in doubt again, and can be resolved again.
    assert state.in_doubt() == [1]
    state = read_journal(write(tmp_path / "k", header(), intent(1), stopped(1),
                               resolved(1, False), again, stopped(1), resolved(1, True, {})))
    assert state.ops[1].settled


def test_a_new_intent_for_an_op_resolved_as_not_happened_must_be_the_same_action(tmp_path):
    other = Intent(op=1, param="pay", cap="net.http.post", action="post", args_sha256=SHA,
                   time=T0 + 99)
    path = write(tmp_path / "j", header(), intent(1), resolved(1, False), other)
    assert damage_line(path) == 4


def test_op_entry_settled_follows_what_is_known():
    assert not OpEntry(1, intent=intent(1)).settled
    assert OpEntry(1, intent=intent(1), outcome=outcome(1)).settled
    assert OpEntry(1, value=value(1)).settled
    assert OpEntry(1, intent=intent(1), resolved=resolved(1, True)).settled
    assert not OpEntry(1, intent=intent(1), resolved=resolved(1, False)).settled


def test_a_failed_end_is_read_back(tmp_path):
    ending = end("failed", failure=Failure("capability", "'net.http.get' allows 1 action"))
    state = read_journal(write(tmp_path / "j", header(), intent(1), outcome(1), ending))
    assert state.end == ending


# -- damage, named by line ---------------------------------------------


def test_an_empty_journal_is_damaged_at_line_one(tmp_path):
    path = tmp_path / "j"
    AppendLog.create(path).close()
    assert damage_line(path) == 1


def test_a_journal_holding_only_a_torn_line_is_damaged_at_line_one(tmp_path):
    path = tmp_path / "j"
    path.write_bytes(b'{"v":1,"type":"hea')
    assert damage_line(path) == 1


def test_a_journal_whose_first_record_is_not_a_header_is_damaged_at_line_one(tmp_path):
    assert damage_line(write(tmp_path / "j", intent(1), outcome(1))) == 1


def test_a_second_header_is_damage_at_its_line(tmp_path):
    assert damage_line(write(tmp_path / "j", header(), intent(1), outcome(1), header())) == 4


@pytest.mark.parametrize("records, line", [
    ((intent(2),), 2),                                 # the first op is 1
    ((intent(1), outcome(1), intent(3)), 4),           # skipping
    ((intent(1), outcome(1), value(3)), 4),
    ((value(1), value(1)), 3),                         # repeating
    ((intent(1), outcome(1), intent(1)), 4),
    ((intent(1), outcome(1), intent(2), outcome(2), value(2)), 6),
])
def test_op_numbers_that_skip_or_repeat_are_damage_at_their_line(tmp_path, records, line):
    assert damage_line(write(tmp_path / "j", header(), *records)) == line


@pytest.mark.parametrize("records, line", [
    ((outcome(1),), 2),                                # no op at all
    ((value(1), outcome(1)), 3),                       # a value has no intent
    ((intent(1), outcome(1), outcome(2)), 4),
])
def test_an_outcome_with_no_intent_is_damage_at_its_line(tmp_path, records, line):
    assert damage_line(write(tmp_path / "j", header(), *records)) == line


def test_a_second_outcome_is_damage_at_its_line(tmp_path):
    assert damage_line(write(tmp_path / "j", header(), intent(1), outcome(1),
                             outcome(1, ok=False, failure=Failure("action", "x")))) == 4


def test_an_outcome_for_an_op_resolved_as_having_happened_is_damage(tmp_path):
    assert damage_line(write(tmp_path / "j", header(), intent(1), resolved(1, True),
                             outcome(1))) == 4


@pytest.mark.parametrize("records, line", [
    ((intent(1), intent(2)), 3),
    ((intent(1), value(2)), 3),
    ((intent(1), stopped(1), intent(2)), 4),
    ((intent(1), resolved(1, False), intent(2)), 4),   # not happened: it must be performed first
])
def test_a_new_op_while_an_earlier_one_is_unsettled_is_damage(tmp_path, records, line):
    assert damage_line(write(tmp_path / "j", header(), *records)) == line


@pytest.mark.parametrize("records, line", [
    ((resolved(1, True),), 2),                         # no such op
    ((intent(1), outcome(1), resolved(1, True)), 4),   # it has an outcome
    ((value(1), resolved(1, False)), 3),               # a value is never in doubt
    ((intent(1), resolved(1, True), resolved(1, False)), 4),  # answered already
    ((intent(1), resolved(1, False), resolved(1, False)), 4),
])
def test_a_resolution_for_an_op_not_in_doubt_is_damage(tmp_path, records, line):
    assert damage_line(write(tmp_path / "j", header(), *records)) == line


@pytest.mark.parametrize("records, line", [
    ((printed(2),), 2),
    ((printed(1), printed(1)), 3),
    ((printed(1), printed(3)), 3),
    ((printed(1), printed(2), intent(1), outcome(1), printed(2)), 6),
])
def test_print_seq_out_of_order_is_damage(tmp_path, records, line):
    assert damage_line(write(tmp_path / "j", header(), *records)) == line


def test_a_stop_after_the_last_op_is_damage(tmp_path):
    assert damage_line(write(tmp_path / "j", header(), intent(1), outcome(1), stopped(3))) == 4


@pytest.mark.parametrize("after", [intent(2), outcome(1), printed(1), stopped(1), end(), header(),
                                   resolved(1, True)])
def test_anything_after_the_end_is_damage(tmp_path, after):
    assert damage_line(write(tmp_path / "j", header(), intent(1), outcome(1), end(), after)) == 5


@pytest.mark.parametrize("records, line", [
    ((intent(1), end()), 3),
    ((intent(1), stopped(1), end()), 4),
    ((intent(1), resolved(1, False), end()), 4),
])
def test_an_end_while_an_op_is_unsettled_is_damage(tmp_path, records, line):
    assert damage_line(write(tmp_path / "j", header(), *records)) == line


def test_a_record_that_is_not_a_journal_record_is_damage_at_its_line(tmp_path):
    path = write(tmp_path / "j", header(), intent(1))
    with open(path, "ab") as stream:
        stream.write(b'{"v":1,"type":"outcome","op":1,"ok":"yes","time":1}\n')
    assert damage_line(path) == 3


def test_a_line_that_is_not_json_in_the_middle_is_damage(tmp_path):
    path = write(tmp_path / "j", header())
    with open(path, "ab") as stream:
        stream.write(b"{not json\n")
        stream.write(line_of(intent(1)))
    assert damage_line(path) == 2


# -- a torn last line ----------------------------------------------------


@pytest.mark.parametrize("torn", [b'{"v":1,"type":"outcome","op":1,"ok":tr', b"{", b"garbage"])
def test_a_torn_last_line_is_left_out(tmp_path, torn):
    path = write(tmp_path / "j", header(), intent(1))
    with open(path, "ab") as stream:
        stream.write(torn)
    state = read_journal(path)
    assert state.in_doubt() == [1]
    assert state.ops[1].outcome is None
    assert state.records == 2


def test_a_torn_last_line_after_the_end_is_left_out(tmp_path):
    path = write(tmp_path / "j", header(), intent(1), outcome(1), end())
    with open(path, "ab") as stream:
        stream.write(line_of(printed(1))[:-1])  # whole but for its newline
    assert read_journal(path).end is not None


def test_reopening_a_journal_with_a_torn_line_cuts_it_before_appending(tmp_path):
    path = write(tmp_path / "j", header(), intent(1))
    with open(path, "ab") as stream:
        stream.write(b'{"v":1,"type":"outc')
    writer = JournalWriter.reopen(path, FixedClock(T0))
    writer.write(outcome(1))
    writer.close()
    state = read_journal(path)
    assert state.ops[1].settled
    assert state.records == 3


def test_journal_writer_takes_its_time_from_its_clock(tmp_path):
    clock = FixedClock(T0)
    writer = JournalWriter.create(tmp_path / "j", header(), clock)
    clock.advance(250)
    assert writer.now() == T0 + 250
    writer.close()


def test_journal_writer_refuses_to_create_over_an_existing_journal(tmp_path):
    path = write(tmp_path / "j", header())
    with pytest.raises(LogExists):
        JournalWriter.create(path, header(), FixedClock(T0))
    assert read_journal(path).header == header()
