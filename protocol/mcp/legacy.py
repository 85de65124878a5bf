"""The 2025-11-25 handler: the initialize handshake, ping, tools/list and
tools/call, with results exactly as that revision writes them (no
resultType, ttlMs, cacheScope or serverInfo `_meta`)."""

from __future__ import annotations

from staal.protocol.mcp.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, RpcError
from staal.protocol.mcp.results import ToolResult
from staal.protocol.mcp.revisions import LEGACY, ServerInfo, negotiated_version
from staal.protocol.mcp.tasks import LEGACY_TASKS_CAPABILITY
from staal.protocol.mcp.tools import CallRequest, ToolCatalogue
from staal.records.record import Json

Reply = dict[str, Json] | CallRequest | RpcError


class LegacyHandler:
    revision = LEGACY

    def __init__(
        self, catalogue: ToolCatalogue, server_info: ServerInfo, instructions: str | None = None
    ) -> None:
        self._catalogue = catalogue
        self._server_info = server_info
        self._instructions = instructions
        # The dispatcher adds "resources" when it serves them.
        self.capabilities: dict[str, Json] = {"tools": {"listChanged": False}}
        if catalogue.any_task:
            self.capabilities["tasks"] = LEGACY_TASKS_CAPABILITY

    def initialize(self, params: dict[str, Json]) -> dict[str, Json] | RpcError:
        """The handshake's answer; the connection is initialized once it is given."""
        problem = _initialize_problem(params)
        if problem is not None:
            return RpcError(INVALID_PARAMS, problem)
        result: dict[str, Json] = {
            "protocolVersion": negotiated_version(params["protocolVersion"]),
            "capabilities": self.capabilities,
            "serverInfo": self._server_info.to_wire(),
        }
        if self._instructions is not None:
            result["instructions"] = self._instructions
        return result

    def handle(self, method: str, params: dict[str, Json]) -> Reply:
        if method == "ping":
            return {}
        if method == "tools/list":
            tools = self._catalogue.listing(params)
            return tools if isinstance(tools, RpcError) else {"tools": tools}
        if method == "tools/call":
            call = self._catalogue.read_task_call(params)
            return self.call_result(call) if isinstance(call, ToolResult) else call
        return RpcError(METHOD_NOT_FOUND, f"method not found in {LEGACY}: {method[:200]!r}")

    def call_result(self, result: ToolResult) -> dict[str, Json]:
        return result.to_wire()

    def cached(self, body: dict[str, Json], ttl_ms: int, cache_scope: str) -> dict[str, Json]:
        """A listing or read result: this revision has no caching fields."""
        return body

    def progress(self, token: str | int, message: str, value: int = 0) -> dict[str, Json]:
        return {"progressToken": token, "progress": value, "message": message}


def _initialize_problem(params: dict[str, Json]) -> str | None:
    if not isinstance(params.get("protocolVersion"), str):
        return "initialize needs protocolVersion (a string)"
    if not isinstance(params.get("capabilities"), dict):
        return "initialize needs capabilities (an object)"
    if not isinstance(params.get("clientInfo"), dict):
        return "initialize needs clientInfo (an object)"
    return None
