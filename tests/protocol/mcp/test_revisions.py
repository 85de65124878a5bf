"""Which revision serves each request, and that each revision's results are
its own (seed 000 section 3; DESIGN.md section 9, "The two versions")."""

from __future__ import annotations

import mcp_types
import pytest
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from staal.protocol.mcp.connection import CallTool
from staal.protocol.mcp.results import Done
from staal.protocol.mcp.revisions import LEGACY, MODERN, SERVER_INFO_KEY
from tests.protocol.test_support import (
    ENVELOPE,
    INITIALIZE_PARAMS,
    MODERN_ONLY_KEYS,
    RUN,
    SERVER,
    connection,
    descriptor,
    error_code,
    feed,
    initialize,
    initialized,
    legacy,
    modern,
    request,
    result_of,
    sent,
    started,
    unsupported_version_data,
)

SERVER_INFO = {"name": SERVER.name, "version": SERVER.version}
ENVELOPE_VERSION = "io.modelcontextprotocol/protocolVersion"


# -- choosing the revision ---------------------------------------------


def test_a_request_with_the_envelope_is_served_as_2026_07_28_without_initialize():
    result = result_of(sent(connection(), modern(1, "tools/list")), "tools/list", MODERN)
    assert result["resultType"] == "complete"


def test_a_request_without_the_envelope_before_initialize_is_invalid_params():
    conn = connection()
    for method in ("tools/list", "tools/call", "ping", "server/discover", "no/such"):
        assert error_code(sent(conn, legacy(1, method))) == -32602


def test_after_initialize_a_request_without_the_envelope_is_served_as_2025_11_25():
    result = result_of(sent(initialized(), legacy(1, "tools/list")), "tools/list", LEGACY)
    assert MODERN_ONLY_KEYS.isdisjoint(result)


def test_a_request_with_the_envelope_is_2026_07_28_even_after_initialize():
    result = result_of(sent(initialized(), modern(1, "tools/list")), "tools/list", MODERN)
    assert result["resultType"] == "complete"


@pytest.mark.parametrize("version", ["2025-11-25", "2025-06-18", "2027-01-01", "", "latest"])
def test_an_unsupported_envelope_version_is_32022_naming_the_supported_and_requested(version):
    for conn in (connection(), initialized()):
        message = sent(conn, modern(4, "tools/list", **{ENVELOPE_VERSION: version}))
        data = unsupported_version_data(message)
        assert data.supported == [MODERN]  # what an envelope may name; never the refused one
        assert data.requested == version
        assert message["id"] == 4



def test_the_sdks_probe_finds_its_modern_version_in_the_32022_data():
    data = unsupported_version_data(
        sent(connection(), modern(1, "server/discover", **{ENVELOPE_VERSION: "2099-01-01"})))
    assert [v for v in MODERN_PROTOCOL_VERSIONS if v in data.supported] == [MODERN]


@pytest.mark.parametrize("version", [20260728, None, ["2026-07-28"]], ids=str)
def test_an_envelope_version_that_is_not_a_string_is_invalid_params(version):
    assert error_code(sent(connection(), modern(1, "tools/list", **{ENVELOPE_VERSION: version}))) \
        == -32602


def test_a_2026_07_28_request_missing_its_client_capabilities_is_invalid_params():
    missing = "io.modelcontextprotocol/clientCapabilities"
    params = {"_meta": {k: v for k, v in ENVELOPE.items() if k != missing}}
    for conn in (connection(), initialized()):
        assert error_code(sent(conn, request(1, "tools/list", params))) == -32602


def test_a_2026_07_28_request_without_client_info_is_served_as_it_is_only_a_should():
    params = {"_meta": {k: v for k, v in ENVELOPE.items()
                        if k != "io.modelcontextprotocol/clientInfo"}}
    for conn in (connection(), initialized()):
        answer = sent(conn, request(1, "tools/list", params))
        assert answer["id"] == 1 and answer["result"]["resultType"] == "complete"


@pytest.mark.parametrize(("key", "value"), [
    ("io.modelcontextprotocol/clientCapabilities", []),
    ("io.modelcontextprotocol/clientInfo", {"name": "no version"}),
    ("io.modelcontextprotocol/clientInfo", "client"),
])
def test_a_2026_07_28_envelope_field_of_the_wrong_shape_is_invalid_params(key, value):
    assert error_code(sent(connection(), modern(1, "tools/list", **{key: value}))) == -32602


# -- initialize ---------------------------------------------------------


def test_initialize_answers_2025_11_25_with_server_info_and_the_tools_capability():
    conn = connection()
    result = result_of(sent(conn, initialize(1)), "initialize", LEGACY)
    assert result == {"protocolVersion": LEGACY, "capabilities": {"tools": {"listChanged": False}},
                      "serverInfo": SERVER_INFO}
    assert conn.initialized


@pytest.mark.parametrize("asked", ["2024-11-05", "2025-06-18", MODERN, "1999-01-01"])
def test_initialize_asking_for_another_version_is_answered_with_2025_11_25(asked):
    params = {**INITIALIZE_PARAMS, "protocolVersion": asked}
    result = result_of(sent(connection(), request(1, "initialize", params)), "initialize", LEGACY)
    assert result["protocolVersion"] == LEGACY


def test_initialize_gives_the_instructions_when_there_are_some():
    conn = connection(instructions="Use refund_order for refunds.")
    result = result_of(sent(conn, initialize()), "initialize", LEGACY)
    assert result["instructions"] == "Use refund_order for refunds."


def test_initialize_is_answered_at_any_time_even_with_an_envelope_and_twice():
    conn = connection()
    result_of(sent(conn, modern(1, "tools/list")), "tools/list", MODERN)
    enveloped = request(2, "initialize", {**INITIALIZE_PARAMS, "_meta": ENVELOPE})
    assert result_of(sent(conn, enveloped), "initialize", LEGACY)["protocolVersion"] == LEGACY
    assert result_of(sent(conn, initialize(3)), "initialize", LEGACY)["protocolVersion"] == LEGACY


def test_initialized_notification_gets_no_answer():
    conn = connection()
    sent(conn, initialize())
    assert feed(conn, {"jsonrpc": "2.0", "method": "notifications/initialized"}) == []


# -- ping and discover, each in its own revision ----------------------


def test_ping_is_answered_with_an_empty_result_under_2025_11_25():
    assert result_of(sent(initialized(), legacy(1, "ping")), "ping", LEGACY) == {}


def test_ping_is_method_not_found_under_2026_07_28():
    assert error_code(sent(initialized(), modern(1, "ping"))) == -32601


def test_server_discover_gives_versions_capabilities_server_info_and_cache_fields():
    result = result_of(sent(connection(), modern(1, "server/discover")), "server/discover", MODERN)
    assert result["supportedVersions"] == [LEGACY, MODERN]
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["serverInfo"] == SERVER_INFO
    assert result["_meta"] == {SERVER_INFO_KEY: SERVER_INFO}
    assert result["resultType"] == "complete"
    assert isinstance(result["ttlMs"], int) and result["ttlMs"] >= 0
    assert result["cacheScope"] in ("public", "private")
    discovered = mcp_types.DiscoverResult.model_validate(result)
    assert MODERN in discovered.supported_versions


def test_server_discover_is_method_not_found_under_2025_11_25():
    assert error_code(sent(initialized(), legacy(1, "server/discover"))) == -32601


def test_cache_hints_can_be_chosen_and_are_checked():
    conn = connection(ttl_ms=60_000, cache_scope="public")
    result = sent(conn, modern(1, "tools/list"))["result"]
    assert (result["ttlMs"], result["cacheScope"]) == (60_000, "public")
    for bad in ({"ttl_ms": -1}, {"ttl_ms": 1.5}, {"ttl_ms": True}, {"cache_scope": "shared"}):
        with pytest.raises(ValueError):
            connection(**bad)


# -- one connection, both revisions ------------------------------------


def test_both_revisions_interleave_on_one_connection_each_with_its_own_fields(tmp_path):
    conn = connection([descriptor(tmp_path)])
    steps = [
        (modern(1, "server/discover"), "server/discover", MODERN),
        (initialize(2), "initialize", LEGACY),
        (legacy(3, "tools/list"), "tools/list", LEGACY),
        (modern(4, "tools/list"), "tools/list", MODERN),
        (legacy(5, "ping"), "ping", LEGACY),
    ]
    for message, method, revision in steps:
        result = result_of(sent(conn, message), method, revision)
        assert MODERN_ONLY_KEYS.isdisjoint(result) == (revision == LEGACY)
    calls = [
        started(conn, modern(6, "tools/call", {"name": "refund_order", "arguments": {"order": "a"}})),
        started(conn, legacy(7, "tools/call", {"name": "refund_order", "arguments": {"order": "b"}})),
    ]
    assert [call.revision for call in calls] == [MODERN, LEGACY]
    for call in calls:
        result = result_of(conn.answer_call(call, Done(RUN, {"ok": True})), "tools/call", call.revision)
        assert MODERN_ONLY_KEYS.isdisjoint(result) == (call.revision == LEGACY)


def test_every_2026_07_28_result_is_complete_and_carries_the_server_info(tmp_path):
    conn = connection([descriptor(tmp_path)])
    for method in ("server/discover", "tools/list"):
        result = result_of(sent(conn, modern(1, method)), method, MODERN)
        assert result["resultType"] == "complete"
        assert result["_meta"] == {SERVER_INFO_KEY: SERVER_INFO}
    call = started(conn, modern(2, "tools/call", {"name": "refund_order", "arguments": {}}))
    result = result_of(conn.answer_call(call, Done(RUN, None)), "tools/call", MODERN)
    assert result["resultType"] == "complete"
    assert result["_meta"] == {SERVER_INFO_KEY: SERVER_INFO}
    assert "ttlMs" not in result and "cacheScope" not in result


def test_no_2025_11_25_answer_carries_a_2026_07_28_field(tmp_path):
    conn = connection([descriptor(tmp_path)])
    answers = [sent(conn, initialize(1)), sent(conn, legacy(2, "ping")),
               sent(conn, legacy(3, "tools/list"))]
    call = started(conn, legacy(4, "tools/call", {"name": "refund_order", "arguments": {}}))
    answers.append(conn.answer_call(call, Done(RUN, {"a": 1})))
    for answer in answers:
        assert MODERN_ONLY_KEYS.isdisjoint(answer["result"])


def test_both_revisions_list_the_same_tools_and_shape_a_call_the_same_way(tmp_path):
    conn = initialized([descriptor(tmp_path)])
    old = sent(conn, legacy(1, "tools/list"))["result"]
    new = sent(conn, modern(2, "tools/list"))["result"]
    assert new["tools"] == old["tools"]
    answers = []
    for make, request_id in ((legacy, 3), (modern, 4)):
        call = started(conn, make(request_id, "tools/call", {"name": "refund_order", "arguments": {}}))
        answers.append(conn.answer_call(call, Done(RUN, {"refund": "re_1"}))["result"])
    assert {k: v for k, v in answers[1].items() if k not in MODERN_ONLY_KEYS} == answers[0]


def test_a_2026_07_28_request_is_served_the_same_on_a_fresh_and_a_used_connection(tmp_path):
    tools = [descriptor(tmp_path)]
    fresh = sent(connection(tools), modern(1, "tools/list"))
    used = connection(tools)
    sent(used, initialize(5))
    sent(used, legacy(6, "tools/list"))
    sent(used, modern(7, "server/discover"))
    assert sent(used, modern(1, "tools/list")) == fresh


def test_a_call_records_the_revision_it_was_made_under(tmp_path):
    conn = initialized([descriptor(tmp_path)])
    assert started(conn, modern(1, "tools/call", {"name": "refund_order"})).revision == MODERN
    call = started(conn, legacy(2, "tools/call", {"name": "refund_order"}))
    assert isinstance(call, CallTool) and call.revision == LEGACY
