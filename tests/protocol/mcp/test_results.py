"""From a call's outcome to its tool result, row by row of seed 000 section
5's outcome table, checked under both revisions against the SDK's types."""

from __future__ import annotations

import orjson
import pytest

from staal.manifest.model import RUN_STATUS_TOOL
from staal.protocol.mcp.results import (
    MAX_RESULT,
    REFUSAL_KINDS,
    Done,
    Errored,
    Failed,
    Refused,
    RunStatus,
    Stopped,
    content_items,
    shape_outcome,
)
from staal.protocol.mcp.revisions import LEGACY, MODERN
from staal.records.content import ContentPart
from tests.helpers.content_parts import PARTS
from tests.protocol.test_support import (
    MODERN_ONLY_KEYS,
    RUN,
    descriptor,
    feed,
    initialized,
    legacy,
    modern,
    result_of,
    sent,
    started,
)

BROKER_MESSAGE = (
    "'payments.stripe.refund' allows at most 50.00 USD per action; this action needs 300.00 USD"
)
REVISIONS = pytest.mark.parametrize(("make", "revision"), [(legacy, LEGACY), (modern, MODERN)],
                                    ids=[LEGACY, MODERN])


def answered(tmp_path, make, revision, outcome, tool="refund_order", arguments=None):
    """The result a call of `tool` gets for `outcome`, as the SDK reads it."""
    conn = initialized([descriptor(tmp_path)])
    call = started(conn, make(1, "tools/call", {"name": tool, "arguments": arguments or {}}))
    result = result_of(conn.answer_call(call, outcome), "tools/call", revision)
    assert result.get("resultType", "complete") == "complete"  # never input_required
    return {k: v for k, v in result.items() if k not in MODERN_ONLY_KEYS}


def text_of(result) -> str:
    (item,) = result["content"]
    assert item["type"] == "text"
    return item["text"]


# -- the outcome table -------------------------------------------------


@REVISIONS
def test_a_done_run_answers_its_result_as_structured_content_and_as_json_text(
        tmp_path, make, revision):
    value = {"refund": "re_1", "amount": {"amount": "35.00", "currency": "USD"}, "n": [1, None]}
    result = answered(tmp_path, make, revision, Done(RUN, value))
    assert result["isError"] is False
    assert result["structuredContent"] == {"result": value}
    assert orjson.loads(text_of(result)) == value


@REVISIONS
@pytest.mark.parametrize("value", [None, 3, "text", [1, 2], True])
def test_a_done_result_of_any_json_value_is_wrapped_in_an_object(tmp_path, make, revision, value):
    result = answered(tmp_path, make, revision, Done(RUN, value))
    assert result["structuredContent"] == {"result": value}
    assert orjson.loads(text_of(result)) == value


@REVISIONS
def test_a_capability_failure_answers_the_brokers_message_verbatim(tmp_path, make, revision):
    result = answered(tmp_path, make, revision, Failed(RUN, "capability", BROKER_MESSAGE))
    assert result["isError"] is True and "structuredContent" not in result
    assert text_of(result) == BROKER_MESSAGE


@REVISIONS
@pytest.mark.parametrize("kind", ["validation", "action", "value", "provider", "budget", "deadline"])
def test_other_failures_answer_their_kind_and_message(tmp_path, make, revision, kind):
    result = answered(tmp_path, make, revision, Failed(RUN, kind, "refund exceeds what was paid"))
    assert result["isError"] is True
    assert text_of(result) == f"{kind}: refund exceeds what was paid"


@REVISIONS
def test_an_internal_failure_names_the_run_and_keeps_its_details_out(tmp_path, make, revision):
    secret_detail = "Traceback: KeyError('/var/lib/staal/x') at worker.py:42"
    result = answered(tmp_path, make, revision, Failed(RUN, "internal", secret_detail))
    assert result["isError"] is True
    assert RUN in text_of(result) and "internal" in text_of(result)
    assert "KeyError" not in text_of(result) and "worker.py" not in text_of(result)


@REVISIONS
def test_an_internal_failure_before_any_run_says_nothing_ran(tmp_path, make, revision):
    result = answered(tmp_path, make, revision, Failed(None, "internal", "OSError: disk full"))
    assert result["isError"] is True
    assert text_of(result) == ("An internal error happened in the server before this call "
                               "started a run, so nothing ran. The details are in the server's "
                               "log, for the operator.")


@REVISIONS
def test_a_stopped_run_says_it_waits_for_an_operator_and_gives_its_run_id(tmp_path, make, revision):
    result = answered(tmp_path, make, revision, Stopped(RUN, 2, "the refund POST may have been sent"))
    assert result["isError"] is True
    assert result["structuredContent"] == {"status": "waiting_for_operator", "run": RUN}
    text = text_of(result)
    assert RUN in text and "operator" in text and "may already have happened" in text
    assert "not call the tool again" in text


@REVISIONS
@pytest.mark.parametrize("kind", ["input", "config"])
def test_a_config_or_input_problem_answers_the_problem(tmp_path, make, revision, kind):
    result = answered(tmp_path, make, revision, Errored(RUN, kind, "amount: 1.001 has 3 decimals"))
    assert result["isError"] is True
    assert text_of(result) == f"{kind}: amount: 1.001 has 3 decimals"


@REVISIONS
@pytest.mark.parametrize("kind", REFUSAL_KINDS)
def test_a_refused_call_answers_the_applications_text(tmp_path, make, revision, kind):
    message = f"refused ({kind}): the text the application wrote"
    result = answered(tmp_path, make, revision, Refused(kind, message))
    assert result == {"content": [{"type": "text", "text": message}], "isError": True}


# -- results over 1 MiB ------------------------------------------------


def value_of_json_length(length: int) -> str:
    return "x" * (length - 2)  # a JSON string: the characters and two quotes


@REVISIONS
def test_a_result_of_exactly_1_mib_of_json_is_sent(tmp_path, make, revision):
    value = value_of_json_length(MAX_RESULT)
    assert len(orjson.dumps(value)) == MAX_RESULT
    result = answered(tmp_path, make, revision, Done(RUN, value))
    assert result["isError"] is False and result["structuredContent"] == {"result": value}


@REVISIONS
def test_a_result_over_1_mib_is_not_sent_and_the_answer_names_the_run(tmp_path, make, revision):
    value = value_of_json_length(MAX_RESULT + 1)
    result = answered(tmp_path, make, revision, Done(RUN, value))
    assert result["isError"] is True and "structuredContent" not in result
    assert RUN in text_of(result) and "too large" in text_of(result)
    assert len(orjson.dumps(result)) < 4096


# -- staal_run_status --------------------------------------------------


STATUSES = [
    (RunStatus(RUN, "running"), {"run": RUN, "status": "running"}),
    (RunStatus(RUN, "done", result={"refund": "re_1"}),
     {"run": RUN, "status": "done", "result": {"refund": "re_1"}}),
    (RunStatus(RUN, "done", result=None), {"run": RUN, "status": "done", "result": None}),
    (RunStatus(RUN, "failed", kind="validation", message="too much"),
     {"run": RUN, "status": "failed", "failure": {"kind": "validation", "message": "too much"}}),
    (RunStatus(RUN, "waiting_for_operator", op=3),
     {"run": RUN, "status": "waiting_for_operator", "op": 3}),
    (RunStatus(RUN, "waiting_for_operator", op=3, message="POST /v1/refunds in doubt"),
     {"run": RUN, "status": "waiting_for_operator", "op": 3,
      "message": "POST /v1/refunds in doubt"}),
    (RunStatus(RUN, "expired"), {"run": RUN, "status": "expired"}),
    (RunStatus(RUN, "unknown"), {"run": RUN, "status": "unknown"}),
]


@REVISIONS
@pytest.mark.parametrize(("status", "expected"), STATUSES, ids=lambda v: getattr(v, "status", ""))
def test_run_status_answers_the_run_and_its_status_as_structured_content_and_text(
        tmp_path, make, revision, status, expected):
    result = answered(tmp_path, make, revision, status, RUN_STATUS_TOOL, {"run": RUN})
    assert result["isError"] is False
    assert result["structuredContent"] == expected
    assert orjson.loads(text_of(result)) == expected


def test_run_status_keeps_an_internal_failures_details_out():
    shaped = shape_outcome(RunStatus(RUN, "failed", kind="internal", message="Traceback ..."))
    assert "Traceback" not in shaped.text
    assert shaped.structured["failure"]["kind"] == "internal"
    assert RUN in shaped.structured["failure"]["message"]


def test_run_status_returns_a_result_too_large_for_a_call_answer():
    big = value_of_json_length(MAX_RESULT + 10)
    shaped = shape_outcome(RunStatus(RUN, "done", result=big))
    assert shaped.structured["result"] == big and not shaped.is_error


@REVISIONS
@pytest.mark.parametrize("arguments", [
    {}, {"run": "short"}, {"run": RUN.upper()}, {"run": 5}, {"run": RUN, "extra": 1}])
def test_run_status_with_arguments_that_are_not_a_run_id_is_answered_at_once_as_an_error(
        tmp_path, make, revision, arguments):
    conn = initialized([descriptor(tmp_path)])
    message = sent(conn, make(1, "tools/call", {"name": RUN_STATUS_TOOL, "arguments": arguments}))
    result = result_of(message, "tools/call", revision)
    assert result["isError"] is True
    assert conn.in_flight() == []


def test_a_call_is_answered_with_the_outcome_type_that_fits_its_tool(tmp_path):
    conn = initialized([descriptor(tmp_path)])
    status_call = started(conn, legacy(1, "tools/call",
                                       {"name": RUN_STATUS_TOOL, "arguments": {"run": RUN}}))
    tool_call = started(conn, legacy(2, "tools/call", {"name": "refund_order"}))
    with pytest.raises(TypeError):
        conn.answer_call(status_call, Done(RUN, 1))
    with pytest.raises(TypeError):
        conn.answer_call(tool_call, RunStatus(RUN, "running"))
    assert len(conn.in_flight()) == 2


# -- the outcome types check themselves --------------------------------


@pytest.mark.parametrize("make", [
    lambda: Failed(RUN, "config", "m"),
    lambda: Failed(RUN, "oops", "m"),
    lambda: Failed(None, "value", "only an internal error comes before a run"),
    lambda: Errored(RUN, "validation", "m"),
    lambda: Refused("later", "m"),
    lambda: RunStatus(RUN, "paused"),
    lambda: RunStatus(RUN, "failed"),
    lambda: RunStatus(RUN, "waiting_for_operator"),
])
def test_an_outcome_that_is_not_in_the_table_is_refused(make):
    with pytest.raises(ValueError):
        make()


def test_shaping_something_that_is_not_an_outcome_is_refused():
    with pytest.raises(TypeError, match=r"^not a call outcome: dict$"):
        shape_outcome({"run": RUN})  # type: ignore[arg-type]


def test_no_outcome_is_ever_answered_as_input_required(tmp_path):
    outcomes = [Done(RUN, 1), Failed(RUN, "action", "m"), Stopped(RUN, 1, "m"),
                Errored(None, "input", "m"), Refused("busy", "m")]
    conn = initialized([descriptor(tmp_path)])
    for request_id, outcome in enumerate(outcomes):
        (call,) = feed(conn, modern(request_id, "tools/call", {"name": "refund_order"}))
        assert conn.answer_call(call, outcome)["result"]["resultType"] == "complete"


# -- results of content parts (images, audio, embedded resources) ------


ITEMS = [
    {"type": "text", "text": "the chart:"},
    {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
    {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
    {"type": "resource", "resource": {"uri": "test://r", "mimeType": "application/json",
                                      "text": '{"a":1}'}},
    {"type": "resource", "resource": {"uri": "file:///a.pdf", "blob": "JVBERg=="}},
]


@REVISIONS
def test_a_done_run_of_content_parts_answers_them_as_content_items_in_order(
        tmp_path, make, revision):
    result = answered(tmp_path, make, revision, Done(RUN, None, PARTS))
    assert result == {"content": ITEMS, "isError": False}


def content_of_json_length(length: int) -> tuple[ContentPart, ...]:
    """A text and an image whose content items are `length` bytes of JSON."""
    image = ContentPart("image", data="AAAA", mime_type="image/png")
    base = len(orjson.dumps(content_items((ContentPart("text", text=""), image))))
    return ContentPart("text", text="x" * (length - base)), image


@REVISIONS
def test_content_of_exactly_1_mib_of_json_is_sent(tmp_path, make, revision):
    parts = content_of_json_length(MAX_RESULT)
    assert len(orjson.dumps(content_items(parts))) == MAX_RESULT
    result = answered(tmp_path, make, revision, Done(RUN, None, parts))
    assert result["isError"] is False and [i["type"] for i in result["content"]] == ["text", "image"]


@REVISIONS
def test_content_over_1_mib_is_not_sent_and_the_answer_names_the_run(tmp_path, make, revision):
    result = answered(tmp_path, make, revision, Done(RUN, None, content_of_json_length(MAX_RESULT + 1)))
    assert result["isError"] is True and "structuredContent" not in result
    assert RUN in text_of(result) and "too large" in text_of(result)
    assert len(orjson.dumps(result)) < 4096


@REVISIONS
def test_run_status_of_a_run_that_answered_content_gives_its_status_then_the_same_items(
        tmp_path, make, revision):
    status = RunStatus(RUN, "done", content=PARTS)
    result = answered(tmp_path, make, revision, status, RUN_STATUS_TOOL, {"run": RUN})
    assert result["structuredContent"] == {"run": RUN, "status": "done"}
    assert result["content"][0] == {"type": "text", "text": orjson.dumps(
        {"run": RUN, "status": "done"}).decode()}
    assert result["content"][1:] == ITEMS


def test_run_status_of_content_over_1_mib_says_so_in_place_of_the_items():
    shaped = shape_outcome(RunStatus(RUN, "done", content=content_of_json_length(MAX_RESULT + 1)))
    (status, too_large) = shaped.to_wire()["content"]
    assert orjson.loads(status["text"]) == {"run": RUN, "status": "done"}
    assert "too large" in too_large["text"] and RUN in too_large["text"]
