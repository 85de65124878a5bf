"""supervisor/views/disclosure.py: one rule for what of a journal may be shown,
read by the caller's journal resource (journal_view.py) and the operator's
timeline (timeline.py), the audiences' difference written as data."""

from __future__ import annotations

import json

from staal.journal.reader import read_journal
from staal.journal.records import End, Header, Intent, OutcomeRecord, Print
from staal.journal.writer import JournalWriter
from staal.protocol.mcp.results import content_items, internal_error_text
from staal.records.outcomes import Failure, Frame
from staal.supervisor.views.journal_view import record_data
from staal.supervisor.views.timeline import timeline
from tests.helpers.content_parts import PARTS

RUN = "0123456789abcdef0123456789abcdef"
SHA = "ab" * 32
T0 = 1_760_000_000_000
PRINTED = "refunding order A-17 for jane@example.com"
ACTION_MESSAGE = "402 from https://pay.example/v1/refunds?card=4242"
INTERNAL = "KeyError: 'ledger' in /srv/staal/supervisor/calls.py"
FRAME = Frame(file="/srv/refund.py", line=12, function="main", source="pay.post(body)")


def _journal(path, end):
    header = Header(run=RUN, tool="refund", program="/srv/refund.py", program_sha256=SHA,
                    config_sha256=SHA, inputs_sha256=SHA, runtime="staal 0.1.0", time=T0)
    records = (Print(seq=1, text=PRINTED, time=T0 + 1),
               Intent(op=1, param="pay", cap="net.http.post", action="post", args_sha256=SHA,
                      time=T0 + 2),
               OutcomeRecord(op=1, ok=False, time=T0 + 3, failure=Failure("action", ACTION_MESSAGE)),
               end)
    with JournalWriter.create(path, header) as writer:
        for record in records:
            writer.write(record)
    return path


def _both(path):
    caller = [record_data(r, RUN) for r in read_journal(path).history]
    operator = timeline(path, RUN, "refund")
    return json.dumps(caller), operator


def test_the_operator_sees_what_a_program_printed_and_the_caller_only_that_it_printed(tmp_path):
    path = _journal(tmp_path / "run.journal", End(outcome="done", time=T0 + 4, result={"ok": 1}))
    caller, operator = _both(path)
    assert PRINTED not in caller and '"type": "print"' in caller
    assert [e.detail for e in operator.events if e.kind == "print"] == [PRINTED]


def test_an_actions_failure_message_is_shown_to_neither_only_its_kind(tmp_path):
    path = _journal(tmp_path / "run.journal", End(outcome="done", time=T0 + 4, result={"ok": 1}))
    caller, operator = _both(path)
    assert ACTION_MESSAGE not in caller and '"failure": {"kind": "action"}' in caller
    shown = " ".join(f"{e.label} {e.detail}" for e in operator.events)
    assert ACTION_MESSAGE not in shown and "failed: action" in shown


def test_an_internal_failure_reads_as_its_answer_to_the_caller_and_as_itself_to_the_operator(
        tmp_path):
    end = End(outcome="failed", time=T0 + 4, failure=Failure("internal", INTERNAL, (FRAME,)))
    caller, operator = _both(_journal(tmp_path / "run.journal", end))
    assert INTERNAL not in caller and "/srv/refund.py" not in caller
    assert json.dumps(internal_error_text(RUN)) in caller
    last = operator.events[-1]
    assert (last.kind, last.detail) == ("end", f"internal: {INTERNAL}")
    assert any('File "/srv/refund.py", line 12, in main' in line for line in last.traceback)


def test_a_done_runs_result_is_the_callers_and_left_off_the_operators_page(tmp_path):
    path = _journal(tmp_path / "run.journal",
                    End(outcome="done", time=T0 + 4, result={"refund": "re_unique_3141"}))
    caller, operator = _both(path)
    assert "re_unique_3141" in caller
    assert all("re_unique_3141" not in f"{e.label} {e.detail}" for e in operator.events)


def test_a_done_runs_content_is_the_callers_as_it_was_answered_and_left_off_the_operators_page(
        tmp_path):
    path = _journal(tmp_path / "run.journal", End(outcome="done", time=T0 + 4, content=PARTS))
    caller, operator = _both(path)
    (end,) = [r for r in json.loads(caller) if r["type"] == "end"]
    assert end["content"] == list(content_items(PARTS))
    shown = " ".join(f"{e.label} {e.detail}" for e in operator.events)
    assert "iVBORw0KGgo=" not in shown and "the chart:" not in shown
