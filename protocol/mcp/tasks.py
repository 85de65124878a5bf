"""MCP tasks, sans I/O: a task as the wire writes it, and what a task
request asks (MCP 2025-11-25's experimental tasks: `params.task` on
tools/call, tasks/get, tasks/result, tasks/list, tasks/cancel,
notifications/tasks/status).

In staal a task is its run (DESIGN.md section 8, "Tasks"): the task id is
the run id, and the application reads how it stands from the ledger and the
journal (supervisor/calls/tasks.py, the one place that decides a task's
status). This module only writes that answer and reads the requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from staal.manifest.model import TaskSupport
from staal.protocol.mcp.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    RequestId,
    RpcError,
)
from staal.protocol.mcp.results import ToolResult
from staal.protocol.mcp.revisions import CLIENT_CAPABILITIES_KEY
from staal.records.record import Json
from staal.runtime.ids import is_run_id
from staal.runtime.utc import for_machines

TaskStatus = Literal["working", "completed", "failed", "cancelled"]
TASK_STATUSES: tuple[str, ...] = get_args(TaskStatus)
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
TaskMethod = Literal["tasks/get", "tasks/result", "tasks/list", "tasks/cancel", "tasks/update"]
# 2025-11-25's methods, and the 2026-07-28 extension's.
LEGACY_TASK_METHODS: frozenset[str] = frozenset({"tasks/get", "tasks/result", "tasks/list",
                                                 "tasks/cancel"})
MODERN_TASK_METHODS: frozenset[str] = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
MISSING_CLIENT_CAPABILITY = -32021
RELATED_TASK_KEY = "io.modelcontextprotocol/related-task"
# What a 2025-11-25 server with tasks announces: tools/call may be a task,
# and tasks can be listed and cancelled.
LEGACY_TASKS_CAPABILITY: dict[str, Json] = {
    "list": {}, "cancel": {}, "requests": {"tools": {"call": {}}},
}


@dataclass(frozen=True, slots=True)
class TaskView:
    """How one task stands, as the application read it from its run.
    `result` is the tool's result once the task is completed or failed
    (failed: the result is an error, isError true)."""

    task_id: str
    status: TaskStatus
    message: str
    created_ms: int
    updated_ms: int
    ttl_ms: int | None
    poll_ms: int
    result: ToolResult | None = None
    # The run failed inside the server (an internal error, or it never
    # started): 2026-07-28 reports that as a failed task with an error; any
    # other failure is a tool result with isError true, a completed task.
    internal: bool = False
    # Its run stopped in doubt and waits for an operator (still working).
    waiting: bool = False

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def to_legacy(self) -> dict[str, Json]:
        """The 2025-11-25 Task object (also the result of tasks/get and
        tasks/cancel, and the params of notifications/tasks/status)."""
        return {
            "taskId": self.task_id,
            "status": self.status,
            "statusMessage": self.message,
            "createdAt": for_machines(self.created_ms),
            "lastUpdatedAt": for_machines(self.updated_ms),
            "ttl": self.ttl_ms,
            "pollInterval": self.poll_ms,
        }


def legacy_payload(view: TaskView) -> dict[str, Json]:
    """tasks/result's answer for an ended task: the tool's own result, with
    the task it belongs to in `_meta` (2025-11-25: the related-task key)."""
    assert view.result is not None  # only an ended task has a payload
    return {**view.result.to_wire(), "_meta": {RELATED_TASK_KEY: {"taskId": view.task_id}}}


@dataclass(frozen=True, slots=True)
class TaskAsk:
    """A tools/call's `params.task`: the client wants a task, and may ask
    for how long it is kept (the server answers with what it keeps)."""

    ttl_ms: int | None = None


def task_ask_of(params: dict[str, Json]) -> TaskAsk | RpcError | None:
    """The call's `params.task`, if it has one."""
    task = params.get("task")
    if task is None:
        return None
    if not isinstance(task, dict):
        return RpcError(INVALID_PARAMS, "tools/call params.task must be an object")
    ttl = task.get("ttl")
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 0):
        return RpcError(INVALID_PARAMS, "tools/call params.task.ttl must be a whole number of "
                        "milliseconds, at least 0")
    return TaskAsk(ttl)


def support_problem(name: str, support: TaskSupport, ask: TaskAsk | None) -> RpcError | None:
    """2025-11-25: a tool that forbids tasks called as one, or one that
    requires a task called without one, is -32601."""
    if ask is not None and support == "forbidden":
        return RpcError(METHOD_NOT_FOUND, f"tool {name[:200]!r} cannot be called as a task "
                        "(its execution.taskSupport is forbidden)")
    if ask is None and support == "required":
        return RpcError(METHOD_NOT_FOUND, f"tool {name[:200]!r} can only be called as a task "
                        "(its execution.taskSupport is required): add params.task")
    return None


@dataclass(frozen=True, slots=True)
class TaskRequest:
    """A tasks/* request for the application to answer: `task_id` for get,
    result and cancel, `cursor` (None: the first page) for list."""

    request_id: RequestId
    method: TaskMethod
    revision: str
    task_id: str | None = None
    cursor: str | None = None


def read_task_request(request_id: RequestId, method: str, params: dict[str, Json],
                      revision: str) -> TaskRequest | RpcError:
    assert method in LEGACY_TASK_METHODS | MODERN_TASK_METHODS  # the dispatcher's only
    if method == "tasks/list":
        cursor = params.get("cursor")
        if cursor is not None and not isinstance(cursor, str):
            return RpcError(INVALID_PARAMS, "tasks/list params.cursor must be a string")
        return TaskRequest(request_id, "tasks/list", revision, cursor=cursor)
    task_id = params.get("taskId")
    if not isinstance(task_id, str):
        return RpcError(INVALID_PARAMS, f"{method} needs params.taskId (a string)")
    return TaskRequest(request_id, method, revision, task_id=task_id)  # type: ignore[arg-type]


def no_such_task(task_id: str | None) -> RpcError:
    """The answer for a task this caller cannot see: one that never existed,
    one no longer kept, and another caller's are answered alike."""
    shown = task_id if isinstance(task_id, str) and is_run_id(task_id) else "that id"
    return RpcError(INVALID_PARAMS, f"no task {shown} of yours is known here")


def not_cancellable(view: TaskView, recorded: bool = False) -> RpcError:
    """A 2025-11-25 cancel that cannot answer the task cancelled; `recorded`:
    the cancel was recorded before the run stopped in doubt, and still
    stops it before its next action once an operator has settled it."""
    if view.terminal:
        return RpcError(INVALID_PARAMS, f"task {view.task_id} is already {view.status}: "
                        "it cannot be cancelled")
    # Waiting for an operator: a cancel does not settle a doubt.
    later = ("; the cancel is recorded: once it is settled, the run stops before its "
             "next action" if recorded else "")
    return RpcError(INVALID_PARAMS, f"task {view.task_id} cannot be cancelled now: its run "
                    f"stopped with an action in doubt and waits for an operator to settle it{later}")


@dataclass(frozen=True, slots=True)
class TaskPage:
    """One page of tasks/list: the caller's tasks, newest first, and the
    cursor of the next page (None: this is the last)."""

    views: tuple[TaskView, ...]
    next_cursor: str | None = None


TaskAnswer = TaskView | TaskPage | RpcError


def legacy_answer(request: TaskRequest, answer: TaskAnswer) -> dict[str, Json] | RpcError:
    """A tasks/* request's result as 2025-11-25 writes it: tasks/get and
    tasks/cancel the Task, tasks/result the tool's result, tasks/list a page."""
    if isinstance(answer, RpcError):
        return answer
    if isinstance(answer, TaskPage):
        page: dict[str, Json] = {"tasks": [view.to_legacy() for view in answer.views]}
        if answer.next_cursor is not None:
            page["nextCursor"] = answer.next_cursor
        return page
    if request.method == "tasks/result":
        return legacy_payload(answer)
    return answer.to_legacy()


def legacy_created(view: TaskView) -> dict[str, Json]:
    """The CreateTaskResult a task-augmented tools/call is answered with."""
    return {"task": view.to_legacy()}


# -- 2026-07-28: the extension io.modelcontextprotocol/tasks -----------------------


def has_tasks_extension(params: dict[str, Json]) -> bool:
    """Whether this request declares the tasks extension in its per-request
    client capabilities (`_meta`): negotiated per request, never remembered."""
    meta = params.get("_meta")
    capabilities = meta.get(CLIENT_CAPABILITIES_KEY) if isinstance(meta, dict) else None
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return isinstance(extensions, dict) and isinstance(extensions.get(TASKS_EXTENSION), dict)


def missing_extension(what: str) -> RpcError:
    """-32021: this request needs the tasks extension, and did not declare it."""
    return RpcError(MISSING_CLIENT_CAPABILITY, f"Missing required client capability: {what} needs "
                    f"the {TASKS_EXTENSION} extension in _meta {CLIENT_CAPABILITIES_KEY}",
                    {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}})


def modern_task(view: TaskView) -> dict[str, Json]:
    """The 2026-07-28 Task (`ttlMs`, `pollIntervalMs`)."""
    return {
        "taskId": view.task_id,
        "status": view.status,
        "statusMessage": view.message,
        "createdAt": for_machines(view.created_ms),
        "lastUpdatedAt": for_machines(view.updated_ms),
        "ttlMs": view.ttl_ms,
        "pollIntervalMs": view.poll_ms,
    }


def modern_detailed(view: TaskView) -> dict[str, Json]:
    """tasks/get's DetailedTask: the result inlined once ended. A tool's
    error is a completed task whose result has isError true; only a failure
    inside the server is a failed task, with its JSON-RPC error."""
    task = modern_task(view)
    if view.result is None or view.status in ("working", "cancelled"):
        return task
    if view.internal:
        return {**task, "status": "failed",
                "error": {"code": INTERNAL_ERROR, "message": view.result.text}}
    return {**task, "status": "completed", "result": view.result.to_wire()}


def modern_answer(request: TaskRequest, answer: TaskAnswer) -> dict[str, Json] | RpcError:
    """tasks/get the DetailedTask; tasks/update and tasks/cancel an empty
    acknowledgement (staal never asks a client for input, so there is never
    a response to take; a cancel is cooperative and only acknowledged)."""
    if isinstance(answer, RpcError):
        return answer
    assert isinstance(answer, TaskView)  # tasks/list is not in this revision
    return modern_detailed(answer) if request.method == "tasks/get" else {}
