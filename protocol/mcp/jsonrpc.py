"""JSON-RPC 2.0 as MCP uses it: reading one line into a message, and the
error codes kept apart as seed 000 section 3 says.

-32700: the line is not JSON (or is over the size limit);
-32600: JSON that is not a valid request (a batch, nesting over the limit,
        a wrong `jsonrpc`, an id that is not a string or an integer, a method
        that is not a string, params that are not an object);
-32601: a method the revision serving the request does not have;
-32602: invalid parameters for a known method;
-32022: a `_meta` protocol version the server does not speak (2026-07-28).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeGuard

import orjson

from staal.protocol.mcp.framing import Line, Oversized, too_deep
from staal.records.record import Json

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
UNSUPPORTED_PROTOCOL_VERSION = -32022

JSONRPC = "2.0"

RequestId = str | int


@dataclass(frozen=True, slots=True)
class RpcError:
    """An error answer, before it is addressed to a request id."""

    code: int
    message: str
    data: Json = None

    def to_message(self, request_id: RequestId | None) -> dict[str, Json]:
        error: dict[str, Json] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return {"jsonrpc": JSONRPC, "id": request_id, "error": error}


@dataclass(frozen=True, slots=True)
class Refusal:
    """A message refused before it could be handled; `request_id` is the
    id it carried, when one could be read."""

    error: RpcError
    request_id: RequestId | None = None

    def to_message(self) -> dict[str, Json]:
        return self.error.to_message(self.request_id)


@dataclass(frozen=True, slots=True)
class Request:
    id: RequestId
    method: str
    params: dict[str, Json] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Notification:
    method: str
    params: dict[str, Json] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClientAnswer:
    """A result or error the client sent; this server sends no requests, so
    there is nothing to match it to and it is ignored."""


Message = Request | Notification | ClientAnswer | Refusal


def result_message(request_id: RequestId, result: dict[str, Json]) -> dict[str, Json]:
    return {"jsonrpc": JSONRPC, "id": request_id, "result": result}


def notification_message(method: str, params: dict[str, Json]) -> dict[str, Json]:
    return {"jsonrpc": JSONRPC, "method": method, "params": params}


def is_request_id(value: object) -> TypeGuard[RequestId]:
    """MCP request ids are strings or integers; never null, a bool or a float."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def read_message(item: Line | Oversized) -> Message:
    """What one incoming line is, checked in the order the limits require:
    size, then depth, then JSON, then the JSON-RPC envelope."""
    if isinstance(item, Oversized):
        return Refusal(RpcError(PARSE_ERROR, "the line is longer than 4 MiB; it was not read"))
    if too_deep(item.data):
        return Refusal(RpcError(INVALID_REQUEST, "the message is nested deeper than 64 levels"))
    try:
        value = orjson.loads(item.data)
    except orjson.JSONDecodeError:
        return Refusal(RpcError(PARSE_ERROR, "the line is not JSON"))
    if isinstance(value, list):
        return Refusal(RpcError(INVALID_REQUEST, "batches are not supported; nothing in it was run"))
    if not isinstance(value, dict):
        return Refusal(RpcError(INVALID_REQUEST, "a JSON-RPC message is a JSON object"))
    return _read_object(value)


def _read_object(value: dict[str, Json]) -> Message:
    has_id = "id" in value
    request_id = value.get("id") if is_request_id(value.get("id")) else None
    if "method" not in value and ("result" in value or "error" in value) and has_id:
        return ClientAnswer()
    problem = _envelope_problem(value)
    if problem is not None:
        return Refusal(RpcError(INVALID_REQUEST, problem), request_id)
    params = value.get("params", {})
    if has_id:
        return Request(value["id"], value["method"], params)
    return Notification(value["method"], params)


def _envelope_problem(value: dict[str, Json]) -> str | None:
    if value.get("jsonrpc") != JSONRPC:
        return 'jsonrpc must be "2.0"'
    if "id" in value and not is_request_id(value["id"]):
        return "a request id is a string or an integer"
    if not isinstance(value.get("method"), str):
        return "method must be a string"
    if "params" in value and not isinstance(value["params"], dict):
        return "params must be an object"
    return None
