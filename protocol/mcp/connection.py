"""One stdio connection as a state machine, sans I/O (like h11): lines in,
events out; outcomes in, messages out.

`receive` turns one incoming line into events: `Send` (a message to write
now: an error, or the answer to initialize, ping, server/discover or
tools/list), `CallTool` (a tool call for the application to run), `Listen`
(a subscriptions/listen stream for it to serve) or `Cancel` (the client
cancelled a call in flight, or a listen stream). The application answers a call
with `answer_call`, which gives the message to write, or None when the call
was cancelled: the server then sends nothing more for that request (seed 000
section 3, "Cancellation"). `progress` gives the one notifications/progress
a call that asked for progress gets when its run starts.

The connection's only state is whether `initialize` was seen, which calls
are in flight and which listen streams are open; the first two move through
the transition tables below (a listen stream's own life is
protocol/subscriptions/listen.py's), and a transition the tables do not
hold raises `IllegalTransition`. It does no I/O
and takes no lock: an application with several threads calls it under one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from staal.manifest.model import RUN_STATUS_TOOL
from staal.protocol.errors import NotAnOutcome
from staal.protocol.mcp.dispatch import CallTool, Dispatcher
from staal.protocol.mcp.framing import Line, LineReader, Oversized
from staal.protocol.mcp.jsonrpc import (
    INVALID_REQUEST,
    ClientAnswer,
    Notification,
    Refusal,
    Request,
    RequestId,
    RpcError,
    is_request_id,
    notification_message,
    read_message,
    result_message,
)
from staal.protocol.mcp.modern import DEFAULT_CACHE_SCOPE, DEFAULT_TTL_MS, CacheScope
from staal.protocol.mcp.resources import ReadAnswer, ReadResource, ResourceCatalogue
from staal.protocol.mcp.results import CallOutcome, RunStatus
from staal.protocol.mcp.revisions import ServerInfo
from staal.protocol.mcp.tasks import TaskAnswer, TaskRequest, TaskView
from staal.protocol.mcp.tools import ToolDescriptor
from staal.protocol.prompts.catalogue import PromptCatalogue
from staal.protocol.subscriptions.listen import Listen
from staal.records.record import Json
from staal.runtime.transitions import IllegalTransition as IllegalTransition
from staal.runtime.transitions import advance

# -- events -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    """A message to write to the client now."""

    message: dict[str, Json]


@dataclass(frozen=True, slots=True)
class Cancel:
    """The client cancelled the call in flight under `request_id`."""

    request_id: RequestId


Event = Send | CallTool | ReadResource | Cancel | TaskRequest | Listen


# -- states and their transitions ---------------------------------------


class Phase(Enum):
    AWAITING_INITIALIZE = "awaiting_initialize"
    INITIALIZED = "initialized"


class CallState(Enum):
    RUNNING = "running"
    CANCELLED = "cancelled"
    ANSWERED = "answered"


PHASE_TRANSITIONS: Mapping[tuple[Phase, str], Phase] = {
    (Phase.AWAITING_INITIALIZE, "initialize"): Phase.INITIALIZED,
    (Phase.INITIALIZED, "initialize"): Phase.INITIALIZED,
}

CALL_TRANSITIONS: Mapping[tuple[CallState, str], CallState] = {
    (CallState.RUNNING, "progress"): CallState.RUNNING,
    (CallState.RUNNING, "cancel"): CallState.CANCELLED,
    (CallState.RUNNING, "answer"): CallState.ANSWERED,
    (CallState.CANCELLED, "progress"): CallState.CANCELLED,
    (CallState.CANCELLED, "cancel"): CallState.CANCELLED,
    (CallState.CANCELLED, "answer"): CallState.ANSWERED,
}


class _InFlight:
    __slots__ = ("call", "state")

    def __init__(self, call: CallTool | ReadResource) -> None:
        self.call = call
        self.state = CallState.RUNNING


# -- the connection -----------------------------------------------------


class Connection:
    def __init__(
        self,
        server_info: ServerInfo,
        tools: Iterable[ToolDescriptor],
        *,
        instructions: str | None = None,
        ttl_ms: int = DEFAULT_TTL_MS,
        cache_scope: CacheScope = DEFAULT_CACHE_SCOPE,
        resources: ResourceCatalogue | None = None,
        prompts: PromptCatalogue | None = None,
    ) -> None:
        self.dispatcher = Dispatcher(server_info, tools, instructions=instructions, ttl_ms=ttl_ms,
                                     cache_scope=cache_scope, resources=resources, prompts=prompts)
        self._phase = Phase.AWAITING_INITIALIZE
        self._calls: dict[RequestId, _InFlight] = {}
        # subscriptions/listen streams open: each until the client cancels it
        # (a Cancel event) or the application ends it (`listen_ended`).
        self._listens: set[RequestId] = set()
        self._reader = LineReader()

    @property
    def initialized(self) -> bool:
        return self._phase is Phase.INITIALIZED

    def in_flight(self) -> list[CallTool | ReadResource]:
        return [entry.call for entry in self._calls.values()]

    # -- incoming -------------------------------------------------------

    def receive_data(self, data: bytes) -> list[Event]:
        """Events for every line `data` completes."""
        return [event for line in self._reader.feed(data) for event in self.receive(line)]

    def receive(self, line: Line | Oversized | bytes) -> list[Event]:
        """Events for one incoming line."""
        if isinstance(line, (bytes, bytearray)):
            line = Line(bytes(line))
        if isinstance(line, Line) and not line.data.strip():
            return []  # a blank line holds no message
        message = read_message(line)
        if isinstance(message, Refusal):
            return [Send(message.to_message())]
        if isinstance(message, ClientAnswer):
            return []
        if isinstance(message, Notification):
            return self._on_notification(message)
        return self._on_request(message)

    def _on_notification(self, notification: Notification) -> list[Event]:
        if notification.method != "notifications/cancelled":
            return []  # notifications/initialized included: nothing to do
        request_id = notification.params.get("requestId")
        if is_request_id(request_id) and request_id in self._listens:
            self._listens.discard(request_id)
            return [Cancel(request_id)]  # the client ends its listen stream
        if not is_request_id(request_id) or request_id not in self._calls:
            return []  # already answered, or never ours
        entry = self._calls[request_id]
        entry.state = advance(CALL_TRANSITIONS, entry.state, "cancel")
        return [Cancel(request_id)]

    def _on_request(self, request: Request) -> list[Event]:
        if request.id in self._calls or request.id in self._listens:
            error = RpcError(INVALID_REQUEST, "a request with this id is still in progress")
            return [Send(error.to_message(request.id))]
        if request.method == "initialize":
            return [self._initialize(request)]
        answer = self.dispatcher.request(request.id, request.method, request.params,
                                         self.initialized)
        if isinstance(answer, RpcError):
            return [Send(answer.to_message(request.id))]
        if isinstance(answer, (CallTool, ReadResource)):
            # A read is in flight as a call is: it may be a run, and cancelled.
            self._calls[request.id] = _InFlight(answer)
            return [answer]
        if isinstance(answer, TaskRequest):
            return [answer]  # answered by the application (answer_task)
        if isinstance(answer, Listen):
            self._listens.add(request.id)
            return [answer]  # a stream the application serves (subscriptions/listen.py)
        return [Send(result_message(request.id, answer.result))]

    def _initialize(self, request: Request) -> Send:
        answer = self.dispatcher.initialize(request.params)
        if isinstance(answer, RpcError):
            return Send(answer.to_message(request.id))
        self._phase = advance(PHASE_TRANSITIONS, self._phase, "initialize")
        return Send(result_message(request.id, answer.result))

    # -- outgoing -------------------------------------------------------

    def answer_call(self, call: CallTool, outcome: CallOutcome) -> dict[str, Json] | None:
        """The answer to `call`, or None if the client cancelled it."""
        _check_outcome_fits(call, outcome)
        if self._answered_cancelled(call):
            return None
        return result_message(call.request_id, self.dispatcher.call_result(call, outcome))

    def answer_created(self, call: CallTool, view: TaskView) -> dict[str, Json] | None:
        """The CreateTaskResult of a call asked as a task, once its run is
        reserved: the call's only answer (None if the client cancelled it)."""
        if self._answered_cancelled(call):
            return None
        return result_message(call.request_id, self.dispatcher.created_result(call, view))

    def answer_task(self, request: TaskRequest, answer: TaskAnswer) -> dict[str, Json]:
        """The answer to a tasks/* request."""
        result = self.dispatcher.task_result(request, answer)
        if isinstance(result, RpcError):
            return result.to_message(request.request_id)
        return result_message(request.request_id, result.result)

    def task_status(self, view: TaskView) -> dict[str, Json]:
        """notifications/tasks/status for a task whose status changed."""
        return notification_message("notifications/tasks/status",
                                    self.dispatcher.task_status(view))

    def listen_ended(self, listen: Listen) -> None:
        """The application ended the listen stream (the server is stopping)."""
        self._listens.discard(listen.request_id)

    def answer_read(self, read: ReadResource, answer: ReadAnswer) -> dict[str, Json] | None:
        """The answer to a resources/read, or None if the client cancelled it."""
        if self._answered_cancelled(read):
            return None
        result = self.dispatcher.read_result(read, answer)
        if isinstance(result, RpcError):
            return result.to_message(read.request_id)
        return result_message(read.request_id, result.result)

    def _answered_cancelled(self, request: CallTool | ReadResource) -> bool:
        """Move a request in flight to answered; whether it was cancelled
        (then nothing more is sent for it)."""
        entry = self._entry(request)
        was = entry.state
        entry.state = advance(CALL_TRANSITIONS, was, "answer")
        del self._calls[request.request_id]
        return was is CallState.CANCELLED

    def progress(self, call: CallTool, message: str, value: int = 0) -> dict[str, Json] | None:
        """The notifications/progress for `call`, or None if it asked for no
        progress or was cancelled."""
        entry = self._entry(call)
        entry.state = advance(CALL_TRANSITIONS, entry.state, "progress")
        params = self.dispatcher.progress(call, message, value)
        if entry.state is CallState.CANCELLED or params is None:
            return None
        return notification_message("notifications/progress", params)

    def _entry(self, call: CallTool | ReadResource) -> _InFlight:
        entry = self._calls.get(call.request_id)
        if entry is None or entry.call is not call:
            return _answered(call)
        return entry


def _answered(call: CallTool | ReadResource) -> _InFlight:
    """A call no longer in flight is in the answered state, where nothing more
    can happen to it."""
    entry = _InFlight(call)
    entry.state = CallState.ANSWERED
    return entry


def _check_outcome_fits(call: CallTool, outcome: CallOutcome) -> None:
    """staal_run_status is answered with a RunStatus, and only it is."""
    if (call.name == RUN_STATUS_TOOL) != isinstance(outcome, RunStatus):
        raise NotAnOutcome(f"{type(outcome).__name__} is not an answer to a {call.name} call")
