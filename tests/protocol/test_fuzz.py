"""Garbage in, only JSON-RPC out: whatever arrives on stdin, the connection
never raises, and everything it answers is a valid JSON-RPC error or result
that fits on one line (seed 000 section 3; DESIGN.md section 9, "fuzzed bad
input")."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp_types.jsonrpc import JSONRPCError, JSONRPCResponse

from staal.manifest.model import RUN_STATUS_TOOL
from staal.protocol.mcp.connection import CallTool, Cancel, Connection, Send
from staal.protocol.mcp.framing import encode_line
from staal.protocol.mcp.results import (
    REFUSAL_KINDS,
    RUN_STATUSES,
    Done,
    Errored,
    Failed,
    Refused,
    RunStatus,
    Stopped,
)
from staal.protocol.mcp.revisions import (
    CLIENT_CAPABILITIES_KEY,
    CLIENT_INFO_KEY,
    LEGACY,
    MODERN,
    PROTOCOL_VERSION_KEY,
)
from staal.protocol.mcp.tools import Annotations, ToolDescriptor
from tests.protocol.test_support import CLIENT_INFO, RUN, SCHEMA, SERVER

KNOWN_CODES = {-32700, -32600, -32601, -32602, -32022}
TOOL = ToolDescriptor("refund_order", "Refund an order", "Refunds.", SCHEMA,
                      Annotations("Refund an order", False, True, False, True))
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8))
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children,
                                                                      max_size=4),
    max_leaves=12,
)
ids = (st.integers(-(2**63), 2**64 - 1) | st.text(max_size=4) | st.none() | st.booleans()
       | st.floats(allow_nan=False, allow_infinity=False) | st.just([1]) | st.integers(0, 3))
KNOWN_METHODS = ["initialize", "ping", "tools/list", "tools/call", "server/discover",
                 "notifications/cancelled", "notifications/initialized", "resources/list"]
methods = st.sampled_from(KNOWN_METHODS) | st.text(max_size=12)
request_ids = st.integers(0, 3) | st.text(max_size=2)
chaotic_metas = st.fixed_dictionaries({}, optional={
    PROTOCOL_VERSION_KEY: st.sampled_from([MODERN, LEGACY, "2099-01-01"]) | json_values,
    CLIENT_CAPABILITIES_KEY: st.just({}) | json_values,
    CLIENT_INFO_KEY: st.just(CLIENT_INFO) | json_values,
    "progressToken": ids,
})
envelopes = st.fixed_dictionaries(
    {PROTOCOL_VERSION_KEY: st.just(MODERN), CLIENT_CAPABILITIES_KEY: st.just({}),
     CLIENT_INFO_KEY: st.just(CLIENT_INFO)},
    optional={"progressToken": request_ids},
)
metas = envelopes | st.fixed_dictionaries({}, optional={"progressToken": request_ids}) \
    | chaotic_metas
params = st.fixed_dictionaries({}, optional={
    "_meta": metas | json_values,
    "name": st.sampled_from(["refund_order", RUN_STATUS_TOOL, "nope"]) | json_values,
    "arguments": st.just({"run": RUN}) | st.just({"order": "o1"}) | json_values,
    "requestId": request_ids | ids,
    "protocolVersion": st.just(LEGACY) | json_values,
    "capabilities": st.just({}) | json_values,
    "clientInfo": st.just(CLIENT_INFO) | json_values,
    "cursor": json_values,
})
# Mostly well-formed requests and notifications, so the fuzz reaches every
# handler, and some with any key missing or of any type.
well_formed = st.fixed_dictionaries(
    {"jsonrpc": st.just("2.0"), "method": st.sampled_from(KNOWN_METHODS)},
    optional={"id": request_ids, "params": params},
)
chaotic = st.fixed_dictionaries({}, optional={
    "jsonrpc": st.just("2.0") | json_values,
    "id": ids,
    "method": methods,
    "params": params | json_values,
    "result": json_values,
    "error": json_values,
})
tool_calls = st.fixed_dictionaries({
    "jsonrpc": st.just("2.0"), "id": request_ids, "method": st.just("tools/call"),
    "params": st.fixed_dictionaries(
        {"name": st.sampled_from(["refund_order", RUN_STATUS_TOOL])},
        optional={"arguments": st.just({"run": RUN}) | st.dictionaries(st.text(max_size=4),
                                                                        json_values, max_size=3),
                  "_meta": metas}),
})
cancels = st.fixed_dictionaries({
    "jsonrpc": st.just("2.0"), "method": st.just("notifications/cancelled"),
    "params": st.fixed_dictionaries({"requestId": request_ids}, optional={"_meta": metas}),
})
messages = tool_calls | cancels | well_formed | chaotic
results64 = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children,
                                                                      max_size=3),
    max_leaves=8,
)
text = st.text(max_size=20)
tool_outcomes = st.one_of(
    st.builds(Done, st.just(RUN), results64),
    st.builds(Failed, st.just(RUN), st.sampled_from(
        ["capability", "validation", "action", "value", "provider", "budget", "deadline",
         "internal"]), text),
    st.builds(Errored, st.just(RUN) | st.none(), st.sampled_from(["config", "input"]), text),
    st.builds(Stopped, st.just(RUN), st.integers(1, 9), text),
    st.builds(Refused, st.sampled_from(REFUSAL_KINDS), text),
)
statuses = st.builds(RunStatus, st.just(RUN), st.sampled_from(RUN_STATUSES), results64,
                     st.just("action"), text, st.integers(1, 9))


def check_answer(message: dict[str, Any]) -> None:
    """A valid JSON-RPC error or result, written as exactly one line."""
    encoded = encode_line(message)
    assert encoded.count(b"\n") == 1 and encoded.endswith(b"\n")
    assert orjson.loads(encoded) == message
    if "error" in message:
        JSONRPCError.model_validate(message)
        assert message["error"]["code"] in KNOWN_CODES
    else:
        JSONRPCResponse.model_validate(message)


def check_events(events: list[Any]) -> list[CallTool]:
    calls = []
    for event in events:
        assert isinstance(event, (Send, CallTool, Cancel))
        if isinstance(event, Send):
            check_answer(event.message)
        elif isinstance(event, CallTool):
            calls.append(event)
    return calls


@FUZZ
@given(st.lists(st.binary(max_size=64), max_size=8))
def test_any_bytes_give_only_valid_json_rpc_answers(chunks):
    conn = Connection(SERVER, [TOOL])
    for chunk in chunks:
        check_events(conn.receive_data(chunk))
        check_events(conn.receive(chunk))


@FUZZ
@given(st.lists(messages | json_values, min_size=1, max_size=8), st.data())
def test_any_json_gives_only_valid_json_rpc_answers_and_calls_answer_validly(sequence, data):
    conn = Connection(SERVER, [TOOL])
    stream = b"".join(json.dumps(item).encode() + b"\n" for item in sequence)
    events = conn.receive_data(stream)
    cancelled = {event.request_id for event in events if isinstance(event, Cancel)}
    for call in check_events(events):
        outcome = data.draw(statuses if call.name == RUN_STATUS_TOOL else tool_outcomes)
        progress = conn.progress(call, f"run {RUN} started")
        if progress is not None:
            assert encode_line(progress).count(b"\n") == 1
        answer = conn.answer_call(call, outcome)
        assert (answer is None) == (call.request_id in cancelled)
        if answer is not None:
            check_answer(answer)
    assert conn.in_flight() == []


@FUZZ
@given(st.lists(messages, min_size=1, max_size=6))
def test_requests_with_the_envelope_never_answer_2025_11_25_fields_or_the_reverse(sequence):
    conn = Connection(SERVER, [TOOL])
    for item in sequence:
        for event in check_events_of(conn, item):
            result = event.message.get("result")
            if result is None or item.get("method") == "initialize":
                continue
            meta = item.get("params", {}).get("_meta") if isinstance(item.get("params"), dict) \
                else None
            modern_request = isinstance(meta, dict) and PROTOCOL_VERSION_KEY in meta
            assert ("resultType" in result) == modern_request


def check_events_of(conn: Connection, item: dict[str, Any]) -> list[Send]:
    events = conn.receive(json.dumps(item).encode())
    check_events(events)
    return [event for event in events if isinstance(event, Send)]
