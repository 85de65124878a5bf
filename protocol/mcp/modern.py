"""The 2026-07-28 handler: server/discover, tools/list and tools/call, with
results exactly as that revision writes them. Every result carries
resultType "complete" and the serverInfo `_meta`; server/discover and
tools/list also carry ttlMs and cacheScope. ping does not exist here."""

from __future__ import annotations

from typing import Literal

from staal.protocol.errors import BadValue
from staal.protocol.mcp.jsonrpc import METHOD_NOT_FOUND, RpcError
from staal.protocol.mcp.results import ToolResult
from staal.protocol.mcp.revisions import MODERN, SERVER_INFO_KEY, SUPPORTED_VERSIONS, ServerInfo
from staal.protocol.mcp.tasks import TASKS_EXTENSION
from staal.protocol.mcp.tools import CallRequest, ToolCatalogue
from staal.records.record import Json

Reply = dict[str, Json] | CallRequest | RpcError
CacheScope = Literal["public", "private"]

# The tool list is fixed while the server runs, but a restarted server may
# list others, and a client cannot always tell: claim no freshness at all.
DEFAULT_TTL_MS = 0
DEFAULT_CACHE_SCOPE: CacheScope = "private"


class ModernHandler:
    revision = MODERN

    def __init__(
        self,
        catalogue: ToolCatalogue,
        server_info: ServerInfo,
        instructions: str | None = None,
        ttl_ms: int = DEFAULT_TTL_MS,
        cache_scope: CacheScope = DEFAULT_CACHE_SCOPE,
    ) -> None:
        if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms < 0:
            raise BadValue("ttl_ms is a whole number of milliseconds, at least 0")
        if cache_scope not in ("public", "private"):
            raise BadValue('cache_scope is "public" or "private"')
        self._catalogue = catalogue
        self._server_info = server_info
        self._instructions = instructions
        self._cache = {"ttlMs": ttl_ms, "cacheScope": cache_scope}
        # The dispatcher adds "resources" when it serves them.
        self.capabilities: dict[str, Json] = {"tools": {"listChanged": False}}
        if catalogue.any_task:
            self.capabilities["extensions"] = {TASKS_EXTENSION: {}}

    def handle(self, method: str, params: dict[str, Json]) -> Reply:
        if method == "server/discover":
            return self._complete(self._discovery())
        if method == "tools/list":
            tools = self._catalogue.listing(params)
            if isinstance(tools, RpcError):
                return tools
            return self._complete({"tools": tools, **self._cache})
        if method == "tools/call":
            call = self._catalogue.read_modern_call(params)
            return self.call_result(call) if isinstance(call, ToolResult) else call
        return RpcError(METHOD_NOT_FOUND, f"method not found in {MODERN}: {method[:200]!r}")

    def call_result(self, result: ToolResult) -> dict[str, Json]:
        return self._complete(result.to_wire())

    def cached(self, body: dict[str, Json], ttl_ms: int, cache_scope: str) -> dict[str, Json]:
        """A listing or read result with how long, and for whom, it may be kept."""
        return self._complete({**body, "ttlMs": ttl_ms, "cacheScope": cache_scope})

    def progress(self, token: str | int, message: str, value: int = 0) -> dict[str, Json]:
        return {"progressToken": token, "progress": value, "message": message}

    def _discovery(self) -> dict[str, Json]:
        body: dict[str, Json] = {
            "supportedVersions": list(SUPPORTED_VERSIONS),
            "capabilities": self.capabilities,
            "serverInfo": self._server_info.to_wire(),
        }
        if self._instructions is not None:
            body["instructions"] = self._instructions
        return {**body, **self._cache}

    def created(self, task: dict[str, Json]) -> dict[str, Json]:
        """A CreateTaskResult: the Task itself, as a result of type "task"."""
        return self._complete(task, "task")

    def task_answer(self, body: dict[str, Json]) -> dict[str, Json]:
        return self._complete(body)

    def _complete(self, body: dict[str, Json], result_type: str = "complete") -> dict[str, Json]:
        return {
            **body,
            "resultType": result_type,
            "_meta": {SERVER_INFO_KEY: self._server_info.to_wire()},
        }
