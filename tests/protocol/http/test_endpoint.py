"""The Streamable HTTP rules (protocol/http/endpoint.py), sans I/O: a head and a body
in, a status, headers and body out, for each rule of the 2026-07-28
transport and of 2025-11-25 over HTTP, without a socket."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from staal.protocol.http.call import KEEPALIVE
from staal.protocol.http.endpoint import (
    HEADER_MISMATCH,
    Call,
    Cancel,
    Endpoint,
    HttpSettings,
    decode_header_value,
)
from staal.protocol.http.messages import Head, HttpResponse
from staal.protocol.mcp.dispatch import Dispatcher
from staal.protocol.mcp.results import Done, Refused
from staal.protocol.mcp.revisions import LEGACY, MODERN
from tests.protocol.test_support import (
    ENVELOPE,
    INITIALIZE_PARAMS,
    RUN,
    SERVER,
    descriptor,
    result_of,
    unsupported_version_data,
)

SETTINGS = HttpSettings(path="/mcp", origins=frozenset({"http://127.0.0.1:8080",
                                                       "https://app.example.com"}),
                        hosts=frozenset({"127.0.0.1:8080"}), max_body=1000)
GOOD = {"host": "127.0.0.1:8080", "content-type": "application/json",
        "accept": "application/json, text/event-stream"}


@pytest.fixture
def endpoint(tmp_path) -> Endpoint:
    return Endpoint(Dispatcher(SERVER, [descriptor(tmp_path)]), SETTINGS)


def head(method: str = "POST", path: str = "/mcp", **headers: str) -> Head:
    merged = {**GOOD, **{k.replace("_", "-"): v for k, v in headers.items()}}
    return Head.of(method, path, [(k, v) for k, v in merged.items() if v is not None])


def modern_headers(method: str, name: str | None = None, **more: str) -> dict[str, str]:
    headers = {"mcp_protocol_version": MODERN, "mcp_method": method}
    if name is not None:
        headers["mcp_name"] = name
    return {**headers, **more}


def body(method: str, params: dict[str, Any] | None = None, request_id: Any = 1,
         envelope: bool = True) -> bytes:
    params = dict(params or {})
    if envelope:
        params["_meta"] = {**ENVELOPE, **params.get("_meta", {})}
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if request_id is not None:
        message["id"] = request_id
    return orjson.dumps(message)


def answered(reply: Any) -> tuple[int, dict[str, Any] | None]:
    assert isinstance(reply, HttpResponse), reply
    return reply.status, orjson.loads(reply.body) if reply.body else None


def code_of(reply: Any) -> tuple[int, int]:
    status, message = answered(reply)
    return status, message["error"]["code"]


def modern_call(endpoint: Endpoint, method: str, params: dict | None = None,
                **headers: str) -> Any:
    name = (params or {}).get("name")
    h = head(**modern_headers(method, name, **headers))
    return endpoint.message(h, body(method, params))


# -- the head ------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT"])
def test_only_post_is_served_and_anything_else_is_405_allowing_post(endpoint, method):
    reply = endpoint.head(head(method))
    assert reply.status == 405 and ("allow", "POST") in reply.headers


def test_another_path_is_404(endpoint):
    assert endpoint.head(head(path="/other")).status == 404


def test_a_foreign_host_is_421_and_a_foreign_origin_403(endpoint):
    assert endpoint.head(head(host="evil.example.com")).status == 421
    assert endpoint.head(head(origin="http://evil.example.com")).status == 403


def test_a_listed_origin_or_none_at_all_passes(endpoint):
    assert endpoint.head(head(origin="https://app.example.com")) is None
    assert endpoint.head(head(origin="HTTP://127.0.0.1:8080")) is None
    assert endpoint.head(head()) is None


@pytest.mark.parametrize("accept", ["application/json", "text/event-stream", "text/html", None])
def test_accept_must_list_json_and_the_event_stream_or_it_is_406(endpoint, accept):
    assert endpoint.head(head(accept=accept)).status == 406


@pytest.mark.parametrize("accept", ["*/*", "application/json;q=0.9, text/event-stream",
                                    "application/*, text/*"])
def test_accept_ranges_that_cover_both_pass(endpoint, accept):
    assert endpoint.head(head(accept=accept)) is None


def test_a_body_that_is_not_json_by_its_content_type_is_415(endpoint):
    assert endpoint.head(head(content_type="text/plain")).status == 415
    assert endpoint.head(head(content_type="application/json; charset=utf-8")) is None


def test_a_declared_length_over_the_limit_is_413_before_the_body_is_read(endpoint):
    assert endpoint.head(head(content_length="1001")).status == 413
    assert endpoint.head(head(content_length="1000")) is None


# -- the body: limits and JSON-RPC ------------------------------------------------------------


def test_a_body_over_the_limit_is_413(endpoint):
    assert endpoint.message(head(), b" " * 1001).status == 413


@pytest.mark.parametrize("raw, expected", [
    (b"not json", (400, -32700)),
    (b"[" + body("tools/list") + b"]", (400, -32600)),
    (b"[" * 65 + b"]" * 65, (400, -32600)),
    (b'{"jsonrpc": "1.0", "id": 1, "method": "tools/list"}', (400, -32600)),
])
def test_bodies_the_stdio_limits_refuse_are_400_with_their_code(endpoint, raw, expected):
    assert code_of(endpoint.message(head(), raw)) == expected


def test_a_notification_is_202_with_no_body(endpoint):
    reply = endpoint.message(head(), body("notifications/initialized", request_id=None))
    assert reply.status == 202 and reply.body == b""
    assert ("content-length", "0") in reply.headers


# -- 2026-07-28 ---------------------------------------------------------------------------------


def test_a_modern_request_with_its_headers_is_answered_as_json(endpoint):
    status, message = answered(modern_call(endpoint, "tools/list"))
    assert status == 200
    assert result_of(message, "tools/list", MODERN)["resultType"] == "complete"


@pytest.mark.parametrize("version, code", [
    (None, HEADER_MISMATCH), (LEGACY, HEADER_MISMATCH), ("1999-01-01", HEADER_MISMATCH)])
def test_a_protocol_version_header_missing_or_unlike_the_body_is_400_header_mismatch(
        endpoint, version, code):
    reply = modern_call(endpoint, "tools/list", mcp_protocol_version=version)
    assert code_of(reply) == (400, code)


def test_an_unsupported_version_in_body_and_header_is_400_32022(endpoint):
    h = head(**modern_headers("tools/list", mcp_protocol_version="1999-01-01"))
    reply = endpoint.message(h, body("tools/list", {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "1999-01-01"}}))
    status, message = answered(reply)
    assert status == 400
    data = unsupported_version_data(message)
    assert data.requested == "1999-01-01" and MODERN in data.supported


def test_a_modern_header_without_an_envelope_is_400_invalid_params(endpoint):
    h = head(**modern_headers("tools/list"))
    assert code_of(endpoint.message(h, body("tools/list", envelope=False))) == (400, -32602)


def test_an_envelope_without_client_capabilities_is_400_invalid_params(endpoint):
    h = head(**modern_headers("tools/list"))
    params = {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN}}
    raw = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params})
    assert code_of(endpoint.message(h, raw)) == (400, -32602)


@pytest.mark.parametrize("method_header", [None, "tools/call", " tools/listx "])
def test_mcp_method_missing_or_unlike_the_body_is_400_header_mismatch(endpoint, method_header):
    reply = modern_call(endpoint, "tools/list", mcp_method=method_header)
    assert code_of(reply) == (400, HEADER_MISMATCH)


def test_mcp_method_is_compared_trimmed(endpoint):
    assert answered(modern_call(endpoint, "tools/list", mcp_method="  tools/list "))[0] == 200


@pytest.mark.parametrize("name", [None, "other_tool", "=?base64?not base64?="])
def test_mcp_name_missing_or_unlike_the_tool_is_400_header_mismatch(endpoint, name):
    params = {"name": "refund_order", "arguments": {"order": "o1"}}
    h = head(**modern_headers("tools/call", name))
    assert code_of(endpoint.message(h, body("tools/call", params))) == (400, HEADER_MISMATCH)


@pytest.mark.parametrize("name", ["refund_order", "  refund_order ",
                                  "=?base64?" + base64.b64encode(b"refund_order").decode() + "?="])
def test_mcp_name_matching_plainly_trimmed_or_base64_starts_the_call(endpoint, name):
    params = {"name": "refund_order", "arguments": {"order": "o1"}}
    reply = endpoint.message(head(**modern_headers("tools/call", name)), body("tools/call", params))
    assert isinstance(reply, Call) and reply.http.call.name == "refund_order"


@pytest.mark.parametrize("method", ["initialize", "ping", "no/such/method"])
def test_a_method_2026_07_28_does_not_have_is_404_method_not_found(endpoint, method):
    assert code_of(modern_call(endpoint, method)) == (404, -32601)


def test_session_and_last_event_id_headers_are_ignored(endpoint):
    reply = modern_call(endpoint, "tools/list", mcp_session_id="abc", last_event_id="7")
    assert reply.status == 200
    assert all(name != "mcp-session-id" for name, _ in reply.headers)


def test_header_values_decode_from_the_base64_sentinel():
    encoded = "=?base64?" + base64.b64encode("Grüße".encode()).decode() + "?="
    assert decode_header_value(encoded) == "Grüße"
    assert decode_header_value("plain") == "plain"
    assert decode_header_value("=?base64?%%%?=") is None


# -- a call's answer ------------------------------------------------------------------------


def test_a_call_without_progress_is_answered_as_one_json_object(endpoint):
    params = {"name": "refund_order", "arguments": {"order": "o1"}}
    reply = endpoint.message(head(**modern_headers("tools/call", "refund_order")),
                             body("tools/call", params))
    http = reply.http
    assert not http.streams
    status, message = answered(http.answer(Done(RUN, {"ok": True})))
    assert status == 200 and message["result"]["structuredContent"] == {"result": {"ok": True}}


def test_a_call_with_progress_is_an_event_stream_progress_then_result(endpoint):
    params = {"name": "refund_order", "arguments": {"order": "o1"},
              "_meta": {"progressToken": "p1"}}
    reply = endpoint.message(head(**modern_headers("tools/call", "refund_order")),
                             body("tools/call", params))
    http = reply.http
    opening = http.open_stream()
    assert opening.status == 200
    assert ("content-type", "text/event-stream") in opening.headers
    assert ("x-accel-buffering", "no") in opening.headers
    progress = http.progress(f"run {RUN} started")
    assert progress.startswith(b"event: message\ndata: ") and RUN.encode() in progress
    assert http.keepalive() == KEEPALIVE
    last = http.answer(Done(RUN, 1))
    assert last.startswith(b"event: message\ndata: ") and last.endswith(b"\n\n")
    assert orjson.loads(last.split(b"data: ", 1)[1])["result"]["structuredContent"] == {"result": 1}


def test_a_closed_call_gets_nothing_more_written(endpoint):
    params = {"name": "refund_order", "arguments": {"order": "o1"},
              "_meta": {"progressToken": "p1"}}
    http = endpoint.message(head(**modern_headers("tools/call", "refund_order")),
                            body("tools/call", params)).http
    http.open_stream()
    http.close()
    assert http.progress("x") is None and http.keepalive() is None
    assert http.answer(Done(RUN, 1)) is None


def test_a_busy_call_is_a_tool_result_with_is_error(endpoint):
    params = {"name": "refund_order", "arguments": {"order": "o1"}}
    http = endpoint.message(head(**modern_headers("tools/call", "refund_order")),
                            body("tools/call", params)).http
    status, message = answered(http.answer(Refused("busy", "the server is busy")))
    assert status == 200 and message["result"]["isError"] is True


# -- 2025-11-25 over HTTP -------------------------------------------------------------------


def test_initialize_is_answered_with_no_session(endpoint):
    raw = orjson.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                        "params": INITIALIZE_PARAMS})
    status, message = answered(endpoint.message(head(), raw))
    assert status == 200 and message["result"]["protocolVersion"] == LEGACY
    assert all(name != "mcp-session-id" for name, _ in endpoint.message(head(), raw).headers)


def test_after_the_handshake_the_version_header_selects_2025_11_25(endpoint):
    h = head(mcp_protocol_version=LEGACY)
    status, message = answered(endpoint.message(h, body("tools/list", envelope=False)))
    assert status == 200 and "resultType" not in message["result"]
    assert answered(endpoint.message(h, body("ping", envelope=False)))[1]["result"] == {}


def test_a_legacy_request_without_the_version_header_is_400(endpoint):
    assert code_of(endpoint.message(head(), body("tools/list", envelope=False)))[0] == 400


def test_a_legacy_request_naming_a_version_not_served_is_400_32022(endpoint):
    h = head(mcp_protocol_version="2024-11-05")
    assert code_of(endpoint.message(h, body("tools/list", envelope=False))) == (400, -32022)


def test_a_legacy_jsonrpc_error_is_the_answer_with_200(endpoint):
    h = head(mcp_protocol_version=LEGACY)
    assert code_of(endpoint.message(h, body("no/such", envelope=False))) == (200, -32601)


def test_notifications_cancelled_is_a_cancel_answered_202(endpoint):
    raw = orjson.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": 7}})
    reply = endpoint.message(head(mcp_protocol_version=LEGACY), raw)
    assert isinstance(reply, Cancel) and reply.request_id == 7
    assert reply.response.status == 202


def test_a_client_response_is_202(endpoint):
    raw = orjson.dumps({"jsonrpc": "2.0", "id": 3, "result": {}})
    assert endpoint.message(head(), raw).status == 202


# -- garbage --------------------------------------------------------------------------------

from hypothesis import example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

HEADER_NAMES = st.sampled_from(["mcp-protocol-version", "mcp-method", "mcp-name", "accept",
                                "content-type", "origin", "host", "content-length"])
HEADER_VALUES = st.one_of(st.sampled_from([MODERN, LEGACY, "tools/call", "tools/list", "*/*",
                                           "application/json", "=?base64?eA==?="]),
                          st.text(max_size=30))


@settings(max_examples=400, deadline=None)
@given(raw=st.binary(max_size=300), extra=st.lists(st.tuples(HEADER_NAMES, HEADER_VALUES),
                                                    max_size=4))
@example(raw=b"", extra=[("content-length", "\u00b2")])  # a Unicode digit int() refuses (found in CI)
def test_garbage_only_ever_yields_an_http_answer_never_an_exception(tmp_path_factory, raw, extra):
    endpoint = Endpoint(Dispatcher(SERVER, []), SETTINGS)
    h = Head.of("POST", "/mcp", [*GOOD.items(), *extra])
    refused = endpoint.head(h)
    reply = refused if refused is not None else endpoint.message(h, raw)
    assert isinstance(reply, (HttpResponse, Cancel, Call))
    if isinstance(reply, HttpResponse):
        assert reply.status in (200, 202, 400, 403, 404, 406, 413, 415, 421)
        if reply.body:
            orjson.loads(reply.body)


@settings(max_examples=300, deadline=None)
@given(method=st.sampled_from(["tools/list", "tools/call", "server/discover", "ping", "x"]),
       params=st.dictionaries(st.sampled_from(["name", "arguments", "_meta", "uri"]),
                              st.one_of(st.text(max_size=10), st.integers(-2**53, 2**53), st.none(),
                                        st.dictionaries(st.text(max_size=5), st.text(max_size=5),
                                                        max_size=3)), max_size=4),
       headers=st.lists(st.tuples(HEADER_NAMES, HEADER_VALUES), max_size=4))
def test_any_request_shape_is_answered_with_a_status_and_json_rpc_or_a_call(method, params, headers):
    endpoint = Endpoint(Dispatcher(SERVER, []), SETTINGS)
    h = Head.of("POST", "/mcp", [*GOOD.items(), *headers])
    raw = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    reply = endpoint.message(h, raw)
    assert isinstance(reply, (HttpResponse, Call))
    if isinstance(reply, HttpResponse):
        message = orjson.loads(reply.body)
        assert message["jsonrpc"] == "2.0" and message["id"] == 1
        assert ("error" in message) != ("result" in message)
        assert reply.status == 200 or "error" in message
