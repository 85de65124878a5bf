"""Ledger events, journal records and worker messages: versioned, and
validated field by field when read."""

from __future__ import annotations

import dataclasses

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from staal.errors import RecordError
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
from staal.money import Money
from staal.records.ledger_records import LEDGER, Forget, OnceHold, Release, Reserve, Settle
from staal.records.messages import (
    MESSAGES,
    ActionSpan,
    Check,
    Checked,
    Ended,
    Heartbeat,
    JournalAck,
    JournalAppend,
    PrintLine,
    Progress,
    Retire,
    Run,
    RunSpans,
    Started,
    StoppedMsg,
    Verified,
    VerifierReady,
    Verify,
    pack,
    unpack,
)
from staal.records.outcomes import ERROR_KINDS, FAILURE_KINDS, Failure, Frame, Usage
from staal.runtime.ids import new_run_id

RUN = "0123456789abcdef0123456789abcdef"
SHA = "ab" * 32
USD = Money("12.50", "USD")

EXAMPLES = {
    LEDGER: [
        Reserve(run=RUN, tool="refund_order", time=1, calls=1, money=(Money("50", "USD"),),
                once=OnceHold(key=SHA, args=SHA, keep_ms=86_400_000)),
        Reserve(run=RUN, tool="lookup", time=2, calls=1),
        Settle(run=RUN, time=3, outcome="done", charged=(USD, Money("100", "JPY"))),
        Settle(run=RUN, time=3, outcome="failed"),
        Release(run=RUN, time=4),
        Forget(run=RUN, time=5),
    ],
    JOURNAL: [
        Header(run=RUN, tool="refund_order", program="/srv/refund.py", program_sha256=SHA,
               config_sha256=SHA, inputs_sha256=SHA, runtime="staal 0.1.0", time=1,
               config="/srv/refund.json"),
        Intent(op=1, param="pay", cap="net.http.post", action="post", args_sha256=SHA, time=2,
               idempotency_key=f"{RUN}-1"),
        OutcomeRecord(op=1, ok=True, time=3, result={"id": "re_1"}, charged=(USD,)),
        OutcomeRecord(op=2, ok=False, time=3, failure=Failure("action", "HTTP 402")),
        Print(seq=1, text="refunded re_1", time=4),
        Value(op=3, cap="clock.now", value=1_700_000_000_000, time=5),
        Stopped(op=4, message="op 4 may have happened", time=6),
        Resolved(op=4, happened=True, result={"id": "re_2"}, time=7),
        End(outcome="done", time=8, result={"refund": "re_1"},
            usage={"pay": Usage(actions=2, charged=(USD,))}),
        End(outcome="failed", time=8, failure=Failure("capability", "no")),
        End(outcome="error", time=8, failure=Failure("input", "amount: required")),
    ],
    MESSAGES: [
        Run(run=RUN, tool="t", journal="/j/t/01/x.journal", inputs="/j/t/01/x.inputs.json"),
        Started(run=RUN, pid=42),
        PrintLine(run=RUN, text="hello"),
        Progress(run=RUN, message="started"),
        StoppedMsg(run=RUN, op=2, message="in doubt"),
        Ended(run=RUN, outcome="done", result=[1, 2], usage={"get": Usage(actions=1)}),
        Ended(run=RUN, outcome="done", result=1, stays=True),
        Ended(run=RUN, outcome="failed", failure=Failure("budget", "max_memory"), retires="budget"),
        Run(run=RUN, tool="t", journal="/j", inputs="/i", last=False),
        Retire(),
        Heartbeat(pid=42),
        Heartbeat(pid=42, run=RUN),
        Run(run=RUN, tool="t", journal="/j/t/01/x.journal", inputs="/i", sink="supervisor"),
        JournalAppend(run=RUN, record={"v": 1, "type": "print", "seq": 1, "text": "x", "time": 1}),
        JournalAck(run=RUN),
        JournalAck(run=RUN, refused="run is not this instance's to journal"),
        Check(manifest="/etc/staal/manifest.json", tool="t"),
        Checked(tool="t", ok=True, inputs={"order": {"type": "str"}}, schema={"type": "object"}),
        Checked(tool="t", ok=False, problems=("missing entry 'main'",)),
        Verify(id=1, method="POST", path="/mcp", headers={"x-api-key": ("k1", "k2")}),
        Verified(id=1, principal={"subject": "ops", "scopes": ["tools"]}, printed=("saw POST",)),
        Verified(id=2, refusal={"status": 401, "description": "unknown key"}),
        Verified(id=3, failure=Failure("value", "the verifier raised ValueError: x")),
        VerifierReady(pid=12, problems=("auth.credential.entry: no function 'verify'",)),
        Run(run=RUN, tool="refund", journal="/j", inputs="/i",
            traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        RunSpans(run=RUN, traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                 span_id="a" * 16, tool="refund", outcome="failed", start_ns=1, end_ns=5, pid=12,
                 resumed=True, failure_kind="capability", actions=(
                     ActionSpan(span_id="b" * 16, op=1, cap="net.http.post", action="post",
                                param="post", outcome="refused", start_ns=2, end_ns=3,
                                key_sha256="c" * 64, replayed=False),)),
    ],
}
CASES = [(family, record) for family, records in EXAMPLES.items() for record in records]


@pytest.mark.parametrize("family, record", CASES, ids=lambda x: getattr(x, "TYPE", getattr(x, "name", "")))
def test_every_record_round_trips_through_json(family, record):
    data = orjson.loads(orjson.dumps(family.encode(record)))
    assert data["v"] == family.version
    assert data[family.tag] == record.TYPE
    assert family.decode(data) == record


def test_every_record_type_of_every_family_has_an_example():
    for family, records in EXAMPLES.items():
        assert {type(r) for r in records} == set(family.types), family.name


@pytest.mark.parametrize("family, record", CASES, ids=lambda x: getattr(x, "TYPE", getattr(x, "name", "")))
def test_an_unknown_field_is_refused(family, record):
    data = family.encode(record)
    data["surprise"] = 1
    with pytest.raises(RecordError) as caught:
        family.decode(data)
    assert caught.value.path == "surprise"


@pytest.mark.parametrize("family, record", CASES, ids=lambda x: getattr(x, "TYPE", getattr(x, "name", "")))
def test_a_missing_required_field_is_named(family, record):
    required = [f.name for f in dataclasses.fields(record)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    for name in required:
        data = family.encode(record)
        del data[name]
        with pytest.raises(RecordError) as caught:
            family.decode(data)
        assert caught.value.path == name


@pytest.mark.parametrize("family", list(EXAMPLES), ids=lambda f: f.name)
def test_another_version_is_refused(family):
    data = family.encode(EXAMPLES[family][0])
    for version in (0, 2, "1", None):
        data["v"] = version
        with pytest.raises(RecordError) as caught:
            family.decode(data)
        assert caught.value.path == "v"
    del data["v"]
    with pytest.raises(RecordError):
        family.decode(data)


@pytest.mark.parametrize("family", list(EXAMPLES), ids=lambda f: f.name)
def test_an_unknown_record_type_is_refused(family):
    data = family.encode(EXAMPLES[family][0])
    data[family.tag] = "surprise"
    with pytest.raises(RecordError) as caught:
        family.decode(data)
    assert caught.value.path == family.tag
    with pytest.raises(RecordError):
        family.decode([1, 2])


@pytest.mark.parametrize(
    "change, path",
    [
        (lambda d: d.__setitem__("run", "not-a-run-id"), "run"),
        (lambda d: d.__setitem__("run", RUN.upper()), "run"),
        (lambda d: d.__setitem__("time", -1), "time"),
        (lambda d: d.__setitem__("time", True), "time"),
        (lambda d: d.__setitem__("time", 1.5), "time"),
        (lambda d: d.__setitem__("calls", "1"), "calls"),
        (lambda d: d.__setitem__("money", {"amount": "1", "currency": "USD"}), "money"),
        (lambda d: d["money"][0].__setitem__("amount", 50), "money[0].amount"),
        (lambda d: d["money"][0].__setitem__("currency", "XYZ"), "money[0].currency"),
        (lambda d: d["once"].__setitem__("key", "short"), "once.key"),
        (lambda d: d["once"].__setitem__("keep_ms", -5), "once.keep_ms"),
        (lambda d: d["once"].__setitem__("extra", 1), "once.extra"),
    ],
)
def test_a_wrong_field_is_refused_naming_its_path(change, path):
    data = LEDGER.encode(EXAMPLES[LEDGER][0])
    change(data)
    with pytest.raises(RecordError) as caught:
        LEDGER.decode(data)
    assert caught.value.path == path
    assert caught.value.kind == "record"


def test_an_outcome_must_be_one_of_the_three():
    data = LEDGER.encode(Settle(run=RUN, time=1, outcome="done"))
    data["outcome"] = "stopped"
    with pytest.raises(RecordError) as caught:
        LEDGER.decode(data)
    assert caught.value.path == "outcome"


def test_amounts_held_or_charged_are_one_per_currency():
    with pytest.raises(RecordError) as made:
        Settle(run=RUN, time=1, outcome="done", charged=(USD, USD))
    data = LEDGER.encode(Settle(run=RUN, time=1, outcome="done", charged=(USD,)))
    data["charged"].append(data["charged"][0])
    with pytest.raises(RecordError) as decoded:
        LEDGER.decode(data)
    for caught in (made, decoded):
        assert (caught.value.path, caught.value.reason) == ("charged", "USD appears twice")


@pytest.mark.parametrize("kind", FAILURE_KINDS)
def test_a_failed_run_carries_a_failure_of_a_run_kind(kind):
    assert End(outcome="failed", time=1, failure=Failure(kind, "m")).failure.kind == kind
    with pytest.raises(RecordError):
        End(outcome="error", time=1, failure=Failure(kind, "m"))


@pytest.mark.parametrize("kind", ERROR_KINDS)
def test_an_error_carries_a_config_or_input_failure(kind):
    assert Ended(run=RUN, outcome="error", failure=Failure(kind, "m")).failure.kind == kind
    with pytest.raises(RecordError):
        Ended(run=RUN, outcome="failed", failure=Failure(kind, "m"))


def test_done_has_no_failure_and_failed_needs_one():
    for make, reason in [
        (lambda: End(outcome="done", time=1, failure=Failure("value", "x")),
         "a done outcome has no failure"),
        (lambda: End(outcome="failed", time=1), "a failed outcome needs a failure"),
        (lambda: OutcomeRecord(op=1, ok=False, time=1), "a failed outcome needs a failure"),
        (lambda: OutcomeRecord(op=1, ok=True, time=1, failure=Failure("action", "x")),
         "a successful outcome has no failure"),
    ]:
        with pytest.raises(RecordError) as caught:
            make()
        assert (caught.value.path, caught.value.reason) == ("failure", reason)


def test_op_numbers_start_at_one():
    data = JOURNAL.encode(Intent(op=1, param="p", cap="net.http.get", action="get",
                                 args_sha256=SHA, time=1))
    data["op"] = 0
    with pytest.raises(RecordError) as caught:
        JOURNAL.decode(data)
    assert caught.value.path == "op"


def test_messages_pack_to_bytes_and_refuse_garbage_frames():
    message = Ended(run=RUN, outcome="failed", failure=Failure("capability", "no"))
    assert unpack(pack(message)) == message
    for frame in (b"", b"not json", b"[]", b'{"v":1}', b'{"v":1,"type":"ended"}'):
        with pytest.raises(RecordError):
            unpack(frame)


def test_a_failure_crosses_the_process_boundary_as_plain_data():
    data = orjson.loads(pack(Ended(run=RUN, outcome="failed", failure=Failure("internal", "boom"))))
    assert data["failure"] == {"kind": "internal", "message": "boom", "traceback": []}
    frames = (Frame(file="/srv/p.py", line=3, function="main", source="x = 1 / 0"),)
    failed = Ended(run=RUN, outcome="failed", failure=Failure("value", "ZeroDivisionError", frames))
    assert orjson.loads(pack(failed))["failure"]["traceback"] == [
        {"file": "/srv/p.py", "line": 3, "function": "main", "source": "x = 1 / 0"}]
    assert unpack(pack(failed)) == failed


def test_encoding_a_record_of_another_family_is_a_bug():
    with pytest.raises(TypeError, match=r"^Print is not a ledger record$"):
        LEDGER.encode(Print(seq=1, text="x", time=1))


json_values = st.recursive(
    st.none() | st.booleans() | st.text(max_size=5) | st.integers(-(2**53), 2**53),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)


@given(st.builds(new_run_id), st.integers(0, 2**62), json_values)
def test_any_json_result_round_trips_in_an_ended_message(run, time, result):
    message = Ended(run=run, outcome="done", result=result)
    assert unpack(pack(message)) == message
    end = End(outcome="done", time=time, result=result)
    assert JOURNAL.decode(orjson.loads(orjson.dumps(JOURNAL.encode(end)))) == end


def test_encodings_prepared_ahead_leave_a_forked_worker_no_type_hints_to_evaluate():
    """The zygote prepares every journal and message type and the dataclasses
    they hold (worker/processes/zygote.py `warm`); a run's end, with its usage and a
    failure with frames, then evaluates no type hints when it is encoded."""
    import subprocess
    import sys

    script = """
import json
from staal.records import record as records
from staal.journal.records import JOURNAL, End
from staal.records.messages import MESSAGES
from staal.money import Money
from staal.records.outcomes import Failure, Frame, Usage

def end():
    return End(outcome="failed", time=1, failure=Failure("value", "no", (Frame("p.py", 3, "f", "x"),)),
               usage={"pay": Usage(actions=1, charged=(Money("1.00", "EUR"),))})

if PREPARE:
    records.prepare_encoding(JOURNAL.types + MESSAGES.types)
before = records._hints.cache_info().misses
encoded = JOURNAL.encode(end())
print(json.dumps({"evaluated": records._hints.cache_info().misses - before,
                  "same": JOURNAL.decode(encoded) == end()}))
"""
    results = {}
    for prepare in (False, True):
        out = subprocess.run([sys.executable, "-c", f"PREPARE = {prepare}\n" + script],
                             capture_output=True, text=True, timeout=60, check=True).stdout
        results[prepare] = orjson.loads(out)
    assert results[False]["evaluated"] > 0  # unprepared, the encoder evaluates hints
    assert results[True] == {"evaluated": 0, "same": True}
