"""What a transport serves calls through: the application's side of the
seam (supervisor/app/server.py's `Server` is it). A transport knows this and
nothing of how the application was built, so the composition root imports
the transports and never the reverse."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Protocol

from staal.manifest.model import Manifest
from staal.protocol.mcp.dispatch import CallTool
from staal.protocol.mcp.resources import ReadAnswer, ReadResource, ResourceCatalogue
from staal.protocol.mcp.results import CallOutcome, Failed, Refused
from staal.protocol.mcp.revisions import ServerInfo
from staal.protocol.mcp.tasks import TaskAnswer, TaskRequest, TaskView
from staal.protocol.mcp.tools import ToolDescriptor
from staal.protocol.prompts.catalogue import PromptCatalogue
from staal.supervisor.auth.callers import LOCAL, Admitted
from staal.supervisor.calls.pipeline import CallState
from staal.supervisor.telemetry.log import Log
from staal.supervisor.transport.readiness import ReadyState


class Busy(Protocol):
    def __call__(self, in_progress: int, tool: str | None = None) -> Refused | None:
        """The refusal of a call with `in_progress` calls in progress (for
        `tool`; None: a resource read), or None."""


class Application(Protocol):
    manifest: Manifest
    log: Log
    server_info: ServerInfo
    descriptors: list[ToolDescriptor]
    resource_catalogue: ResourceCatalogue
    # Set by SIGTERM or SIGINT, or by the transport's own end: stop taking calls.
    stopping: asyncio.Event
    # What a load balancer's check reads (GET /ready over HTTP).
    readiness: ReadyState
    busy: Busy

    async def read_resource(self, read: ReadResource, admitted: Admitted,
                            state: CallState) -> ReadAnswer: ...

    async def outcome_of(self, call: CallTool, state: CallState,
                         admitted: Admitted = LOCAL) -> CallOutcome | None: ...

    async def answer_task(self, request: TaskRequest, admitted: Admitted = LOCAL) -> TaskAnswer:
        """A tasks/* request's answer (supervisor/calls/tasks.py)."""

    def created_task(self, run: str, reserved_ms: int) -> TaskView:
        """The task of a run just reserved."""

    async def task_view(self, run: str, admitted: Admitted = LOCAL) -> TaskView | None:
        """How the caller's task stands now (None: no such task of theirs)."""

    async def task_views(self, task_ids: Sequence[str], admitted: Admitted) -> list[TaskView]:
        """The caller's tasks among `task_ids`, as they stand now (another
        caller's, and unknown ones, are left out)."""

    def follow_task(self, view: TaskView, admitted: Admitted) -> AsyncIterator[TaskView]:
        """The caller's task `view` as it changes, until it ends or the
        server stops (supervisor/calls/tasks.py `Tasks.follow`)."""

    def internal_failure(self, call: CallTool, state: CallState, error: Exception) -> Failed: ...

    def answer_failed(self, call: CallTool, state: CallState, error: Exception) -> None: ...


# A transport: serves `Application` until it stops.
Transport = Callable[[Application], Awaitable[None]]


def prompt_catalogue(server: Application, seen: frozenset[str] | None = None) -> PromptCatalogue:
    """The manifest's prompts a caller sees (`seen`: its profile's; None:
    every one), paged with the resources' cursor key."""
    return PromptCatalogue([p for p in server.manifest.prompts if seen is None or p.name in seen],
                           server.resource_catalogue.signer)
