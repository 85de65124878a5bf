"""Listing tools and reading a tools/call, shared by both revisions (seed 000
sections 4 and 5; DESIGN.md section 9, "Annotations").

A tool's annotations come from its grants, every grant it acts through
included (`Grant.walk`): clients treat them as hints, and they never claim
more than the broker enforces.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import orjson

from staal.manifest.model import RUN_STATUS_TOOL, TaskSupport, Tool
from staal.protocol.errors import BadValue
from staal.protocol.mcp.jsonrpc import INVALID_PARAMS, RpcError
from staal.protocol.mcp.results import ToolResult
from staal.protocol.mcp.revisions import progress_token_of, trace_of
from staal.protocol.mcp.tasks import (
    TaskAsk,
    has_tasks_extension,
    missing_extension,
    support_problem,
    task_ask_of,
)
from staal.records.record import Json
from staal.runtime.ids import is_run_id
from staal.runtime.tracecontext import TraceParent


@dataclass(frozen=True, slots=True)
class Annotations:
    title: str | None
    read_only: bool
    destructive: bool
    idempotent: bool
    open_world: bool

    def to_wire(self) -> dict[str, Json]:
        wire: dict[str, Json] = {} if self.title is None else {"title": self.title}
        wire.update(
            readOnlyHint=self.read_only,
            destructiveHint=self.destructive,
            idempotentHint=self.idempotent,
            openWorldHint=self.open_world,
        )
        return wire


@dataclass(frozen=True, slots=True)
class ToolDescriptor:
    name: str
    title: str | None
    description: str
    input_schema: dict[str, Json]
    annotations: Annotations
    # MCP's execution.taskSupport: written only when tasks are allowed
    # (absent means forbidden).
    task_support: TaskSupport = "forbidden"

    def to_wire(self) -> dict[str, Json]:
        """The Tool object of tools/list; the same under both revisions."""
        wire: dict[str, Json] = {"name": self.name}
        if self.title is not None:
            wire["title"] = self.title
        wire.update(
            description=self.description,
            inputSchema=self.input_schema,
            annotations=self.annotations.to_wire(),
        )
        if self.task_support != "forbidden":
            wire["execution"] = {"taskSupport": self.task_support}
        return wire


def annotations_for(tool: Tool) -> Annotations:
    """DESIGN.md section 9: no grants -> read-only, idempotent, closed world;
    only reads -> read-only, idempotent, open world if any reaches the
    network; any write -> destructive, idempotent only with once."""
    grants = list(tool.all_grants())
    writes = any(grant.spec.writes for grant in grants)
    return Annotations(
        title=tool.title,
        read_only=not writes,
        destructive=writes,
        idempotent=not writes or tool.once is not None,
        open_world=any(grant.spec.open_world for grant in grants),
    )


def describe_tool(tool: Tool, input_schema: dict[str, Json]) -> ToolDescriptor:
    """A manifest tool as tools/list shows it; `input_schema` is the JSON
    Schema of the program's inputs (`staal schema`)."""
    return ToolDescriptor(
        name=tool.name,
        title=tool.title,
        description=tool.description,
        input_schema=_checked_schema(tool.name, input_schema),
        annotations=annotations_for(tool),
        task_support=tool.task,
    )


def _checked_schema(name: str, schema: dict[str, Json]) -> dict[str, Json]:
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise BadValue(f"the input schema of tool '{name}' must be a JSON object schema")
    # A private copy, and proof that it can be sent.
    copy: dict[str, Json] = orjson.loads(orjson.dumps(schema))
    return copy


RUN_STATUS_TITLE = "Status of a run"
RUN_STATUS_DESCRIPTION = (
    "Tells how a run of one of this server's tools stands: running, done (with its "
    "result), failed, waiting_for_operator, expired or unknown. Every tool call is a "
    "run; its run id is in the call's answer, or in the progress message at its start."
)
RUN_STATUS_INPUT_SCHEMA: dict[str, Json] = {
    "type": "object",
    "properties": {
        "run": {
            "type": "string",
            "pattern": "^[0-9a-f]{32}$",
            "description": "The run id: 32 hexadecimal characters.",
        }
    },
    "required": ["run"],
    "additionalProperties": False,
}


def run_status_descriptor() -> ToolDescriptor:
    """The server's own read-only tool, listed after the manifest's."""
    return ToolDescriptor(
        name=RUN_STATUS_TOOL,
        title=RUN_STATUS_TITLE,
        description=RUN_STATUS_DESCRIPTION,
        input_schema=RUN_STATUS_INPUT_SCHEMA,
        annotations=Annotations(
            title=RUN_STATUS_TITLE, read_only=True, destructive=False,
            idempotent=True, open_world=False,
        ),
    )


def run_status_problem(arguments: dict[str, Json]) -> str | None:
    """Why these are not arguments staal_run_status can answer, if they are not."""
    if set(arguments) != {"run"} or not is_run_id(arguments["run"]):
        return 'staal_run_status takes {"run": "<run id>"}, a run id being 32 hexadecimal characters'
    return None


@dataclass(frozen=True, slots=True)
class CallRequest:
    """A tools/call whose tool was found and whose arguments are an object."""

    name: str
    arguments: dict[str, Json]
    progress_token: str | int | None = None
    # The client's trace context (`_meta.traceparent`), if a valid one came.
    trace: TraceParent | None = None
    tracestate: str | None = None
    # `params.task`: the client asked for a task (2025-11-25).
    task: TaskAsk | None = None


class ToolCatalogue:
    """The tools a connection lists and calls: the manifest's, in order, then
    staal_run_status."""

    def __init__(self, tools: Iterable[ToolDescriptor]) -> None:
        listed = [*tools, run_status_descriptor()]
        names = [tool.name for tool in listed]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise BadValue(f"tool names must be unique: {', '.join(duplicates)}")
        self._tools: Sequence[ToolDescriptor] = tuple(listed)
        self._names = frozenset(names)
        self._support = {tool.name: tool.task_support for tool in listed}
        self._wire = orjson.dumps([tool.to_wire() for tool in listed])

    @property
    def tools(self) -> Sequence[ToolDescriptor]:
        return self._tools

    @property
    def any_task(self) -> bool:
        """Whether some tool may be called as a task."""
        return any(support != "forbidden" for support in self._support.values())

    def listing(self, params: dict[str, Json]) -> list[dict[str, Json]] | RpcError:
        """Every tool on one page; a cursor can only be one this server never gave."""
        if params.get("cursor") is not None:
            return RpcError(INVALID_PARAMS, "every tool is listed on one page: there is no cursor")
        listing: list[dict[str, Json]] = orjson.loads(self._wire)
        return listing

    def read_call(self, params: dict[str, Json]) -> CallRequest | RpcError | ToolResult:
        """The tool, arguments and progress token of a tools/call. An unknown
        tool, or arguments that are not an object, are invalid params
        (-32602); arguments staal_run_status cannot take are answered at
        once with a tool result, isError true."""
        name = params.get("name")
        if not isinstance(name, str):
            return RpcError(INVALID_PARAMS, "tools/call needs the tool's name (a string)")
        if name not in self._names:
            return RpcError(INVALID_PARAMS, f"unknown tool: {name[:200]!r}")
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return RpcError(INVALID_PARAMS, "tools/call arguments must be an object")
        token = progress_token_of(params)
        if isinstance(token, RpcError):
            return token
        if name == RUN_STATUS_TOOL and (problem := run_status_problem(arguments)):
            return ToolResult(problem, is_error=True)
        return CallRequest(name, arguments, token, *trace_of(params))

    def read_task_call(self, params: dict[str, Json]) -> CallRequest | RpcError | ToolResult:
        """read_call, with the call's `params.task` (2025-11-25): refused
        -32601 where the tool's taskSupport says it cannot be one."""
        call = self.read_call(params)
        if not isinstance(call, CallRequest):
            return call
        ask = task_ask_of(params)
        if isinstance(ask, RpcError):
            return ask
        problem = support_problem(call.name, self._support[call.name], ask)
        if problem is not None:
            return problem
        return call if ask is None else replace(call, task=ask)

    def read_modern_call(self, params: dict[str, Json]) -> CallRequest | RpcError | ToolResult:
        """read_call, 2026-07-28: the server decides. A tool that may be a
        task is one for a request declaring the tasks extension; one that
        must be is -32021 for a request that does not."""
        call = self.read_call(params)
        if not isinstance(call, CallRequest):
            return call
        support = self._support[call.name]
        if support == "forbidden":
            return call
        if has_tasks_extension(params):
            return replace(call, task=TaskAsk())
        if support == "required":
            return missing_extension(f"tool {call.name!r}, which is always answered as a task,")
        return call
