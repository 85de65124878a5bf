"""A tool call's life on a connection: started, given progress, cancelled,
answered (seed 000 section 3, "Cancellation", and section 5)."""

from __future__ import annotations

import pytest

from staal.protocol.mcp.connection import (
    CALL_TRANSITIONS,
    PHASE_TRANSITIONS,
    CallState,
    CallTool,
    Cancel,
    IllegalTransition,
    Phase,
    advance,
)
from staal.protocol.mcp.results import Done, Failed
from staal.protocol.mcp.revisions import ENVELOPE_KEYS, LEGACY, MODERN
from tests.protocol.test_support import (
    ENVELOPE,
    RUN,
    connection,
    descriptor,
    error_code,
    feed,
    initialized,
    legacy,
    line,
    modern,
    notification,
    notification_of,
    result_of,
    sent,
    started,
)

REVISIONS = pytest.mark.parametrize(("make", "revision"), [(legacy, LEGACY), (modern, MODERN)],
                                    ids=[LEGACY, MODERN])
CALL = {"name": "refund_order", "arguments": {"order": "o1", "amount": "35"}}


def cancel(request_id, *, envelope: bool = False) -> dict:
    params = {"requestId": request_id, "reason": "timed out"}
    if envelope:
        params["_meta"] = ENVELOPE
    return notification("notifications/cancelled", params)


@pytest.fixture
def conn(tmp_path):
    return initialized([descriptor(tmp_path)])


# -- starting a call ---------------------------------------------------


@REVISIONS
def test_a_call_becomes_a_call_tool_event_for_the_application(conn, make, revision):
    call = started(conn, make("req-1", "tools/call", CALL))
    assert call == CallTool("req-1", "refund_order", CALL["arguments"], revision, None)
    assert conn.in_flight() == [call]


@REVISIONS
def test_a_call_without_arguments_has_empty_arguments(conn, make, revision):
    assert started(conn, make(1, "tools/call", {"name": "refund_order"})).arguments == {}
    assert started(conn, make(2, "tools/call", {"name": "refund_order", "arguments": None})) \
        .arguments == {}


@REVISIONS
def test_a_call_carries_its_progress_token(conn, make, revision):
    params = {**CALL, "_meta": {"progressToken": "tok-9"}}
    assert started(conn, make(1, "tools/call", params)).progress_token == "tok-9"
    params = {**CALL, "_meta": {"progressToken": 0}}
    assert started(conn, make(2, "tools/call", params)).progress_token == 0


def test_a_request_reusing_the_id_of_a_call_in_flight_is_invalid(conn):
    started(conn, legacy(7, "tools/call", CALL))
    for again in (legacy(7, "tools/call", CALL), modern(7, "tools/list"), legacy(7, "ping")):
        message = sent(conn, again)
        assert error_code(message) == -32600 and message["id"] == 7
    assert len(conn.in_flight()) == 1


def test_an_id_is_free_again_once_its_call_is_answered(conn):
    first = started(conn, legacy(7, "tools/call", CALL))
    conn.answer_call(first, Done(RUN, 1))
    second = started(conn, legacy(7, "tools/call", CALL))
    assert second is not first and conn.in_flight() == [second]


def test_ids_of_different_types_are_different_ids(conn):
    started(conn, legacy(1, "tools/call", CALL))
    assert isinstance(started(conn, legacy("1", "tools/call", CALL)), CallTool)


# -- answering ---------------------------------------------------------


@REVISIONS
def test_answering_a_call_gives_a_result_for_its_request_id(conn, make, revision):
    call = started(conn, make("abc", "tools/call", CALL))
    message = conn.answer_call(call, Failed(RUN, "validation", "no"))
    assert message["id"] == "abc"
    assert result_of(message, "tools/call", revision)["isError"] is True
    assert conn.in_flight() == []


def test_answering_a_call_twice_is_an_illegal_transition(conn):
    call = started(conn, legacy(1, "tools/call", CALL))
    conn.answer_call(call, Done(RUN, 1))
    with pytest.raises(IllegalTransition, match=r"^answer is not allowed in state answered$"):
        conn.answer_call(call, Done(RUN, 1))


def test_answering_a_call_the_connection_never_started_is_an_illegal_transition(conn, tmp_path):
    other = initialized([descriptor(tmp_path)])
    stranger = started(other, legacy(1, "tools/call", CALL))
    started(conn, legacy(1, "tools/call", CALL))
    with pytest.raises(IllegalTransition):
        conn.answer_call(stranger, Done(RUN, 1))
    assert len(conn.in_flight()) == 1


# -- cancellation ------------------------------------------------------


@REVISIONS
@pytest.mark.parametrize("envelope", [False, True], ids=["plain", "enveloped"])
def test_cancelling_a_call_in_flight_gives_a_cancel_event(conn, make, revision, envelope):
    call = started(conn, make(5, "tools/call", CALL))
    assert feed(conn, cancel(5, envelope=envelope)) == [Cancel(5)]
    assert conn.in_flight() == [call]


@REVISIONS
def test_nothing_more_is_sent_for_a_cancelled_call(conn, make, revision):
    params = {**CALL, "_meta": {"progressToken": "p"}}
    call = started(conn, make(5, "tools/call", params))
    feed(conn, cancel(5))
    assert conn.progress(call, f"run {RUN} started") is None
    assert conn.answer_call(call, Done(RUN, {"refund": "re_1"})) is None
    assert conn.in_flight() == []


def test_a_second_cancel_is_harmless(conn):
    call = started(conn, legacy(5, "tools/call", CALL))
    feed(conn, cancel(5))
    assert feed(conn, cancel(5)) == [Cancel(5)]
    assert conn.answer_call(call, Done(RUN, 1)) is None


@pytest.mark.parametrize("request_id", [99, "5", None, True, 5.0, [5]], ids=repr)
def test_cancelling_something_not_in_flight_changes_nothing(conn, request_id):
    call = started(conn, legacy(5, "tools/call", CALL))
    assert feed(conn, cancel(request_id)) == []
    assert conn.answer_call(call, Done(RUN, 1)) is not None


def test_a_cancel_arriving_after_the_answer_is_ignored(conn):
    call = started(conn, legacy(5, "tools/call", CALL))
    conn.answer_call(call, Done(RUN, 1))
    assert feed(conn, cancel(5)) == []


def test_a_cancel_sent_as_a_request_is_method_not_found(conn):
    started(conn, legacy(5, "tools/call", CALL))
    message = sent(conn, legacy(6, "notifications/cancelled", {"requestId": 5}))
    assert error_code(message) == -32601
    assert len(conn.in_flight()) == 1


# -- progress ----------------------------------------------------------


@REVISIONS
def test_a_call_with_a_progress_token_gets_progress_carrying_the_message(conn, make, revision):
    call = started(conn, make(1, "tools/call", {**CALL, "_meta": {"progressToken": 42}}))
    params = notification_of(conn.progress(call, f"run {RUN} started"), revision)
    assert params == {"progressToken": 42, "progress": 0, "message": f"run {RUN} started"}


@REVISIONS
def test_a_call_without_a_progress_token_gets_no_progress(conn, make, revision):
    call = started(conn, make(1, "tools/call", CALL))
    assert conn.progress(call, f"run {RUN} started") is None


def test_progress_for_an_answered_call_is_an_illegal_transition(conn):
    call = started(conn, legacy(1, "tools/call", {**CALL, "_meta": {"progressToken": 1}}))
    conn.answer_call(call, Done(RUN, 1))
    with pytest.raises(IllegalTransition, match=r"^progress is not allowed in state answered$"):
        conn.progress(call, "late")


# -- the transition tables ---------------------------------------------


def test_every_transition_not_in_the_tables_raises():
    events = ("progress", "cancel", "answer", "initialize")
    for state in CallState:
        for event in events:
            if (state, event) in CALL_TRANSITIONS:
                assert advance(CALL_TRANSITIONS, state, event) is CALL_TRANSITIONS[(state, event)]
            else:
                with pytest.raises(IllegalTransition):
                    advance(CALL_TRANSITIONS, state, event)
    assert all(to is Phase.INITIALIZED for to in PHASE_TRANSITIONS.values())


def test_an_answered_call_can_do_nothing_more():
    assert not [key for key in CALL_TRANSITIONS if key[0] is CallState.ANSWERED]


# -- bytes in ----------------------------------------------------------


def test_bytes_fed_in_any_pieces_give_the_same_events(tmp_path):
    stream = b"".join(line(m) + b"\r\n" for m in (
        legacy(0, "initialize", {"protocolVersion": LEGACY, "capabilities": {},
                                 "clientInfo": {"name": "c", "version": "1"}}),
        legacy(1, "tools/call", CALL),
        cancel(1),
    ))
    whole = connection([descriptor(tmp_path)]).receive_data(stream)
    pieces = connection([descriptor(tmp_path)])
    events = [event for i in range(0, len(stream), 7) for event in pieces.receive_data(stream[i:i + 7])]
    assert events == whole
    assert [type(event).__name__ for event in events] == ["Send", "CallTool", "Cancel"]


def test_envelope_keys_are_the_three_the_2026_07_28_revision_requires():
    assert set(ENVELOPE_KEYS) == set(ENVELOPE)
