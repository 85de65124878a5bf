"""What the protocol tests share: building requests of either revision, a
connection to feed them to, and checks of every answer against the official
Python SDK's own types (`mcp_types`), so a shape the SDK would reject fails
our tests. The tests here prove those checks have teeth."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pydantic
import pytest
from mcp_types import UnsupportedProtocolVersionErrorData
from mcp_types.jsonrpc import JSONRPCError, JSONRPCResponse, jsonrpc_message_adapter
from mcp_types.methods import parse_server_notification, parse_server_result

from staal.manifest.check import check
from staal.manifest.model import Tool
from staal.protocol.mcp.connection import CallTool, Connection, Event, Send
from staal.protocol.mcp.revisions import LEGACY, MODERN, ServerInfo
from staal.protocol.mcp.tools import ToolDescriptor, describe_tool
from tests.helpers.manifests import seed_example, write_programs

SERVER = ServerInfo("shop-actions", "0.1.0")
CLIENT_INFO = {"name": "test-client", "version": "1.0"}
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
}
INITIALIZE_PARAMS = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": CLIENT_INFO}
MODERN_ONLY_KEYS = {"resultType", "ttlMs", "cacheScope", "_meta"}
SCHEMA = {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]}
RUN = "0123456789abcdef0123456789abcdef"


def request(request_id: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def modern(request_id: Any, method: str, params: dict[str, Any] | None = None,
           **meta: Any) -> dict[str, Any]:
    """A 2026-07-28 request: its params carry the `_meta` envelope."""
    params = dict(params or {})
    params["_meta"] = {**ENVELOPE, **params.get("_meta", {}), **meta}
    return request(request_id, method, params)


def legacy(request_id: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return request(request_id, method, params or {})


def initialize(request_id: Any = 0) -> dict[str, Any]:
    return request(request_id, "initialize", dict(INITIALIZE_PARAMS))


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


def line(message: Any) -> bytes:
    return orjson.dumps(message)


def connection(tools: list[ToolDescriptor] | None = None, **options: Any) -> Connection:
    return Connection(SERVER, tools or [], **options)


def initialized(tools: list[ToolDescriptor] | None = None) -> Connection:
    conn = connection(tools)
    sent(conn, initialize())
    return conn


def feed(conn: Connection, message: Any) -> list[Event]:
    return conn.receive(line(message) if not isinstance(message, bytes) else message)


def sent(conn: Connection, message: Any) -> dict[str, Any]:
    """The one message the connection answers `message` with."""
    events = feed(conn, message)
    assert len(events) == 1 and isinstance(events[0], Send), events
    return events[0].message


def started(conn: Connection, message: Any) -> CallTool:
    """The call `message` starts."""
    events = feed(conn, message)
    assert len(events) == 1 and isinstance(events[0], CallTool), events
    return events[0]


def error_code(message: dict[str, Any]) -> int:
    JSONRPCError.model_validate(message)
    return message["error"]["code"]


def result_of(message: dict[str, Any], method: str, revision: str) -> dict[str, Any]:
    """The result in `message`, once the SDK has accepted it for `method`
    under `revision` exactly as its client session would."""
    JSONRPCResponse.model_validate(message)
    result = message["result"]
    parse_server_result(method, revision, result)
    return result


def notification_of(message: dict[str, Any], revision: str) -> dict[str, Any]:
    jsonrpc_message_adapter.validate_python(message)
    parse_server_notification(message["method"], revision, message["params"])
    return message["params"]


def unsupported_version_data(message: dict[str, Any]) -> UnsupportedProtocolVersionErrorData:
    assert error_code(message) == -32022
    return UnsupportedProtocolVersionErrorData.model_validate(message["error"]["data"])


def manifest_tool(directory: Path, grants: dict[str, Any], *, once: bool = False,
                  title: str | None = "Refund an order") -> Tool:
    """A tool as the manifest check builds it, with these grants."""
    write_programs(directory)
    data = seed_example()
    tool = data["tools"][0]
    tool["grants"] = grants
    if not once:
        del tool["once"]
    if title is None:
        del tool["title"]
    return check(data, directory / "manifest.json").tools[0]


def descriptor(directory: Path, grants: dict[str, Any] | None = None, **options: Any) -> ToolDescriptor:
    return describe_tool(manifest_tool(directory, grants or {}, **options), SCHEMA)


# -- the checks have teeth ----------------------------------------------


def test_the_sdk_check_refuses_a_tool_without_an_input_schema():
    result = {"tools": [{"name": "x", "description": "no schema"}]}
    with pytest.raises(pydantic.ValidationError):
        result_of({"jsonrpc": "2.0", "id": 1, "result": result}, "tools/list", LEGACY)


def test_the_sdk_check_refuses_a_modern_result_without_result_type():
    result = {"content": [{"type": "text", "text": "hi"}], "isError": False}
    with pytest.raises(pydantic.ValidationError):
        result_of({"jsonrpc": "2.0", "id": 1, "result": result}, "tools/call", MODERN)


def test_the_sdk_check_refuses_a_modern_tool_list_without_cache_fields():
    result = {"tools": [], "resultType": "complete"}
    with pytest.raises(pydantic.ValidationError):
        result_of({"jsonrpc": "2.0", "id": 1, "result": result}, "tools/list", MODERN)


def test_the_sdk_check_refuses_a_method_the_revision_does_not_have():
    with pytest.raises(KeyError) as caught:
        result_of({"jsonrpc": "2.0", "id": 1, "result": {}}, "ping", MODERN)
    assert caught.value.args == (("ping", MODERN),)
