"""One stdio connection as a state machine, sans I/O (like h11): lines in,
events out; outcomes in, messages out.

`receive` turns one incoming line into events: `Send` (a message to write
now: an error, or the answer to initialize, ping, server/discover or
tools/list), `CallTool` (a tool call for the application to run) or `Cancel`
(the client cancelled a call in flight). The application answers a call
with `answer_call`, which gives the message to write, or None when the call
was cancelled: the server then sends nothing more for that request (seed 000
section 3, "Cancellation"). `progress` gives the one notifications/progress
a call that asked for progress gets when its run starts.

The connection's only state is whether `initialize` was seen and which calls
are in flight; both move through the transition tables below, and a
transition the tables do not hold raises `IllegalTransition`. It does no I/O
and takes no lock: an application with several threads calls it under one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from staal.errors import StaalError
from staal.manifest import RUN_STATUS_TOOL
from staal.protocol.framing import Line, LineReader, Oversized
from staal.protocol.jsonrpc import (
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
from staal.protocol.legacy import LegacyHandler
from staal.protocol.modern import DEFAULT_CACHE_SCOPE, DEFAULT_TTL_MS, CacheScope, ModernHandler
from staal.protocol.results import CallOutcome, RunStatus, shape_outcome
from staal.protocol.revisions import LEGACY, MODERN, ServerInfo, select_revision
from staal.protocol.tools import CallRequest, ToolCatalogue, ToolDescriptor


class IllegalTransition(StaalError):
    """The application did something the connection's state does not allow
    (answering a call twice, or one that was never started)."""

    kind = "illegal_transition"


# -- events -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    """A message to write to the client now."""

    message: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CallTool:
    """A tool call for the application to run; answer it with answer_call."""

    request_id: RequestId
    name: str
    arguments: dict[str, Any]
    revision: str
    progress_token: str | int | None = None


@dataclass(frozen=True, slots=True)
class Cancel:
    """The client cancelled the call in flight under `request_id`."""

    request_id: RequestId


Event = Send | CallTool | Cancel


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


def advance(table: Mapping[tuple[Any, str], Any], state: Any, event: str) -> Any:
    try:
        return table[(state, event)]
    except KeyError:
        raise IllegalTransition(f"{event} is not allowed in state {state.value}") from None


class _InFlight:
    __slots__ = ("call", "state")

    def __init__(self, call: CallTool) -> None:
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
    ) -> None:
        catalogue = ToolCatalogue(tools)
        self._legacy = LegacyHandler(catalogue, server_info, instructions)
        self._handlers = {
            LEGACY: self._legacy,
            MODERN: ModernHandler(catalogue, server_info, instructions, ttl_ms, cache_scope),
        }
        self._phase = Phase.AWAITING_INITIALIZE
        self._calls: dict[RequestId, _InFlight] = {}
        self._reader = LineReader()

    @property
    def initialized(self) -> bool:
        return self._phase is Phase.INITIALIZED

    def in_flight(self) -> list[CallTool]:
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
        if not is_request_id(request_id) or request_id not in self._calls:
            return []  # already answered, or never ours
        entry = self._calls[request_id]
        entry.state = advance(CALL_TRANSITIONS, entry.state, "cancel")
        return [Cancel(request_id)]

    def _on_request(self, request: Request) -> list[Event]:
        if request.id in self._calls:
            error = RpcError(INVALID_REQUEST, "a request with this id is still in progress")
            return [Send(error.to_message(request.id))]
        if request.method == "initialize":
            return [self._initialize(request)]
        revision = select_revision(request.params, self.initialized)
        if isinstance(revision, RpcError):
            return [Send(revision.to_message(request.id))]
        reply = self._handlers[revision].handle(request.method, request.params)
        if isinstance(reply, RpcError):
            return [Send(reply.to_message(request.id))]
        if isinstance(reply, CallRequest):
            return [self._start_call(request.id, reply, revision)]
        return [Send(result_message(request.id, reply))]

    def _initialize(self, request: Request) -> Send:
        """initialize is answered at any time, with or without a `_meta`
        envelope, always as the 2025-11-25 handshake it belongs to."""
        result = self._legacy.initialize(request.params)
        if isinstance(result, RpcError):
            return Send(result.to_message(request.id))
        self._phase = advance(PHASE_TRANSITIONS, self._phase, "initialize")
        return Send(result_message(request.id, result))

    def _start_call(self, request_id: RequestId, call: CallRequest, revision: str) -> CallTool:
        event = CallTool(request_id, call.name, call.arguments, revision, call.progress_token)
        self._calls[request_id] = _InFlight(event)
        return event

    # -- outgoing -------------------------------------------------------

    def answer_call(self, call: CallTool, outcome: CallOutcome) -> dict[str, Any] | None:
        """The answer to `call`, or None if the client cancelled it."""
        _check_outcome_fits(call, outcome)
        entry = self._entry(call)
        was = entry.state
        entry.state = advance(CALL_TRANSITIONS, was, "answer")
        del self._calls[call.request_id]
        if was is CallState.CANCELLED:
            return None
        result = self._handlers[call.revision].call_result(shape_outcome(outcome))
        return result_message(call.request_id, result)

    def progress(self, call: CallTool, message: str) -> dict[str, Any] | None:
        """The notifications/progress for `call`, or None if it asked for no
        progress or was cancelled."""
        entry = self._entry(call)
        entry.state = advance(CALL_TRANSITIONS, entry.state, "progress")
        if entry.state is CallState.CANCELLED or call.progress_token is None:
            return None
        params = self._handlers[call.revision].progress(call.progress_token, message)
        return notification_message("notifications/progress", params)

    def _entry(self, call: CallTool) -> _InFlight:
        entry = self._calls.get(call.request_id)
        if entry is None or entry.call is not call:
            return _answered(call)
        return entry


def _answered(call: CallTool) -> _InFlight:
    """A call no longer in flight is in the answered state, where nothing more
    can happen to it."""
    entry = _InFlight(call)
    entry.state = CallState.ANSWERED
    return entry


def _check_outcome_fits(call: CallTool, outcome: CallOutcome) -> None:
    """staal_run_status is answered with a RunStatus, and only it is."""
    if (call.name == RUN_STATUS_TOOL) != isinstance(outcome, RunStatus):
        raise TypeError(f"{type(outcome).__name__} is not an answer to a {call.name} call")
