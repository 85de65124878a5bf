"""Framing, the limits applied before parsing, and the JSON-RPC error codes
kept apart (seed 000 section 3)."""

from __future__ import annotations

import orjson
import pytest

import staal.protocol.mcp.jsonrpc as jsonrpc_module
from staal.protocol.mcp.framing import (
    MAX_DEPTH,
    MAX_LINE,
    Line,
    LineReader,
    Oversized,
    encode_line,
    too_deep,
)
from tests.protocol.test_support import (
    connection,
    descriptor,
    error_code,
    feed,
    initialize,
    initialized,
    legacy,
    line,
    modern,
    notification,
    request,
    sent,
)

# -- the line reader ----------------------------------------------------


def test_lines_are_split_at_newlines_and_kept_across_reads():
    reader = LineReader()
    assert reader.feed(b'{"a":1}\n{"b"') == [Line(b'{"a":1}')]
    assert reader.feed(b":2}\n\n") == [Line(b'{"b":2}'), Line(b"")]


def test_a_carriage_return_before_the_newline_is_tolerated():
    assert LineReader().feed(b'{"a":1}\r\n') == [Line(b'{"a":1}')]


def test_a_line_of_exactly_4_mib_is_read():
    body = b"x" * MAX_LINE
    assert LineReader().feed(body + b"\n") == [Line(body)]
    assert LineReader().feed(body + b"\r\n") == [Line(body)]


def test_a_line_one_byte_over_4_mib_is_oversized():
    assert LineReader().feed(b"x" * (MAX_LINE + 1) + b"\n") == [Oversized()]
    assert LineReader().feed(b"x" * (MAX_LINE + 1) + b"\r\n") == [Oversized()]


def test_an_oversized_line_is_not_kept_and_the_next_line_is_read():
    reader = LineReader()
    events = []
    chunk = b"y" * (1024 * 1024)
    for _ in range(12):
        events += reader.feed(chunk)
        assert len(reader._pending) <= MAX_LINE + 1
    events += reader.feed(b'tail\n{"next":true}\n')
    assert events == [Oversized(), Line(b'{"next":true}')]


def test_an_unterminated_last_line_is_given_at_the_end_of_the_stream():
    reader = LineReader()
    assert reader.feed(b'{"a":1}') == []
    assert reader.finish() == [Line(b'{"a":1}')]
    assert reader.finish() == []


def test_an_outgoing_message_is_one_line_even_with_newlines_in_its_strings():
    encoded = encode_line({"text": "a\nb\r\nc", "n": [1, 2]})
    assert encoded.endswith(b"\n") and encoded.count(b"\n") == 1
    assert orjson.loads(encoded) == {"text": "a\nb\r\nc", "n": [1, 2]}


# -- the depth pre-scan -------------------------------------------------


def nested(depth: int, opener: str = "[", closer: str = "]") -> bytes:
    return (opener * depth + closer * depth).encode()


def test_nesting_of_exactly_64_is_allowed_and_65_is_too_deep():
    assert not too_deep(nested(MAX_DEPTH))
    assert too_deep(nested(MAX_DEPTH + 1))
    mixed = b'{"a":' * 33 + b"[" * 31 + b"]" * 31 + b"}" * 33
    assert not too_deep(mixed)
    assert too_deep(b'{"a":' * 33 + b"[" * 32 + b"]" * 32 + b"}" * 33)


def test_brackets_inside_strings_do_not_count():
    quoted = b'["' + b"[{" * 100 + b'"]'
    assert not too_deep(quoted)
    escaped = b'["\\"' + b"[" * 100 + b'"]'
    assert not too_deep(escaped)
    after_escapes = b'["\\\\"' + b"[" * 100 + b"]" * 101
    assert too_deep(after_escapes)


def test_unclosed_brackets_count_as_deep_as_they_open():
    assert too_deep(b"[" * 65)
    assert not too_deep(b"]" * 200 + b"[" * 10)


def call_nested(depth: int) -> bytes:
    """A tools/call whose whole message nests exactly `depth` levels."""
    inner = "[" * (depth - 3) + "]" * (depth - 3)
    return (
        '{"jsonrpc":"2.0","id":7,"method":"tools/call",'
        '"params":{"name":"refund_order","arguments":{"deep":' + inner + "}}}"
    ).encode()


def test_a_request_nested_exactly_64_deep_is_served(tmp_path):
    conn = initialized([descriptor(tmp_path)])
    assert too_deep(call_nested(64)) is False
    (event,) = feed(conn, call_nested(64))
    assert event.name == "refund_order"


def test_a_request_nested_65_deep_is_invalid_and_not_parsed(tmp_path, monkeypatch):
    conn = initialized([descriptor(tmp_path)])

    def never(_data):
        raise AssertionError("a line over the depth limit was parsed")

    monkeypatch.setattr(jsonrpc_module.orjson, "loads", never)
    message = sent(conn, call_nested(65))
    assert error_code(message) == -32600 and message["id"] is None


def test_a_line_over_4_mib_is_a_parse_error_with_a_null_id(monkeypatch):
    conn = connection()
    monkeypatch.setattr(jsonrpc_module.orjson, "loads", lambda _data: pytest.fail("parsed"))
    (event,) = conn.receive_data(b'{"jsonrpc":"2.0","id":1,"method":"' + b"x" * MAX_LINE + b'"}\n')
    assert error_code(event.message) == -32700 and event.message["id"] is None


def test_the_connection_goes_on_reading_after_a_refused_line():
    conn = connection()
    data = b"x" * (MAX_LINE + 5) + b"\n" + b"[" * 70 + b"\n" + line(initialize(3)) + b"\n"
    codes = [event.message.get("error", {}).get("code") for event in conn.receive_data(data)]
    assert codes == [-32700, -32600, None]


# -- batches ------------------------------------------------------------


def test_a_batch_is_invalid_and_nothing_in_it_runs(tmp_path):
    conn = initialized([descriptor(tmp_path)])
    call = legacy(5, "tools/call", {"name": "refund_order", "arguments": {"order": "o1"}})
    events = feed(conn, [call, initialize(6), legacy(7, "tools/list")])
    assert len(events) == 1
    assert error_code(events[0].message) == -32600 and events[0].message["id"] is None
    assert conn.in_flight() == []


def test_an_empty_batch_is_invalid_too():
    assert error_code(sent(connection(), [])) == -32600


# -- each error code for its own fault ---------------------------------


@pytest.mark.parametrize("data", [b"{", b"not json", b'{"a":1,}', b"\xff\xfe", b"NaN", b"1e400"])
def test_a_line_that_is_not_json_is_a_parse_error(data):
    message = sent(connection(), data)
    assert error_code(message) == -32700 and message["id"] is None


@pytest.mark.parametrize("value", [1, "text", None, True])
def test_json_that_is_not_an_object_is_an_invalid_request(value):
    assert error_code(sent(connection(), value)) == -32600


@pytest.mark.parametrize(("message", "readable_id"), [
    ({"id": 1, "method": "tools/list"}, 1),
    ({"jsonrpc": "1.0", "id": 1, "method": "tools/list"}, 1),
    ({"jsonrpc": 2.0, "id": "a", "method": "tools/list"}, "a"),
    ({"jsonrpc": "2.0", "id": True, "method": "tools/list"}, None),
    ({"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"}, None),
    ({"jsonrpc": "2.0", "id": None, "method": "tools/list"}, None),
    ({"jsonrpc": "2.0", "id": {"x": 1}, "method": "tools/list"}, None),
    ({"jsonrpc": "2.0", "id": 2}, 2),
    ({"jsonrpc": "2.0", "id": 3, "method": 7}, 3),
    ({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": [1]}, 4),
    ({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": None}, 5),
    ({"jsonrpc": "2.0", "method": ["x"]}, None),
], ids=lambda v: orjson.dumps(v).decode()[:60] if isinstance(v, dict) else repr(v))
def test_a_message_that_is_not_a_valid_request_is_invalid_with_its_id_when_readable(
        message, readable_id):
    answer = sent(initialized(), message)
    assert error_code(answer) == -32600
    assert answer["id"] == readable_id


@pytest.mark.parametrize("make", [legacy, modern], ids=["2025-11-25", "2026-07-28"])
@pytest.mark.parametrize("method", ["resources/list", "prompts/list", "logging/setLevel", "x"])
def test_an_unknown_method_is_method_not_found(make, method):
    message = sent(initialized(), make(9, method))
    assert error_code(message) == -32601 and message["id"] == 9


@pytest.mark.parametrize("make", [legacy, modern], ids=["2025-11-25", "2026-07-28"])
@pytest.mark.parametrize("params", [
    {"name": "no_such_tool", "arguments": {}},
    {"arguments": {}},
    {"name": 5},
    {"name": "refund_order", "arguments": [1, 2]},
    {"name": "refund_order", "arguments": "order=1"},
    {"name": "refund_order", "_meta": {"progressToken": 1.5}},
    {"name": "refund_order", "_meta": {"progressToken": True}},
], ids=lambda p: orjson.dumps(p).decode())
def test_invalid_call_params_are_invalid_params(tmp_path, make, params):
    conn = initialized([descriptor(tmp_path)])
    message = sent(conn, make(11, "tools/call", params))
    assert error_code(message) == -32602 and message["id"] == 11
    assert conn.in_flight() == []


def test_a_meta_that_is_not_an_object_is_invalid_params():
    assert error_code(sent(initialized(), legacy(1, "tools/list", {"_meta": [1]}))) == -32602


def test_a_cursor_this_server_never_gave_is_invalid_params():
    assert error_code(sent(initialized(), legacy(1, "tools/list", {"cursor": "c"}))) == -32602
    assert error_code(sent(initialized(), modern(2, "tools/list", {"cursor": "c"}))) == -32602


@pytest.mark.parametrize("params", [
    {},
    {"protocolVersion": 20251125, "capabilities": {}, "clientInfo": {}},
    {"protocolVersion": "2025-11-25", "clientInfo": {}},
    {"protocolVersion": "2025-11-25", "capabilities": {}},
], ids=lambda p: orjson.dumps(p).decode())
def test_initialize_with_invalid_params_is_invalid_params_and_initializes_nothing(params):
    conn = connection()
    assert error_code(sent(conn, request(1, "initialize", params))) == -32602
    assert not conn.initialized


# -- what gets no answer -----------------------------------------------


@pytest.mark.parametrize("message", [
    {"jsonrpc": "2.0", "id": 1, "result": {}},
    {"jsonrpc": "2.0", "id": "x", "error": {"code": -1, "message": "no"}},
    {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "no"}},
], ids=["result", "error", "error-null-id"])
def test_answers_from_the_client_are_ignored(message):
    conn = initialized()
    assert feed(conn, message) == []


@pytest.mark.parametrize("method", [
    "notifications/initialized", "notifications/roots/list_changed",
    "notifications/progress", "notifications/whatever", "tools/call",
])
def test_notifications_the_server_does_not_use_get_no_answer_and_change_nothing(method):
    conn = connection()
    assert feed(conn, notification(method, {"name": "x"})) == []
    assert not conn.initialized and conn.in_flight() == []


def test_a_blank_line_is_no_message_and_gets_no_answer():
    conn = connection()
    assert conn.receive_data(b"\n  \r\n\t\n") == []
