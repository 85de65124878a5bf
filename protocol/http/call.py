"""One tool call's answer over Streamable HTTP, sans I/O: one JSON object,
or an event stream (its head, the progress, the result) when the request
asked for progress; nothing more once the client closed the request."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from staal.protocol.http.messages import (
    KEEPALIVE,
    STREAM_HEADERS,
    HttpResponse,
    event,
    json_response,
)
from staal.protocol.mcp.dispatch import CallTool, Dispatcher
from staal.protocol.mcp.jsonrpc import notification_message, result_message
from staal.protocol.mcp.results import CallOutcome
from staal.protocol.mcp.tasks import TaskView
from staal.runtime.transitions import IllegalTransition, advance


class CallState(Enum):
    RUNNING = "running"
    STREAMING = "streaming"  # the event stream is open: the head went out
    CLOSED = "closed"  # the client closed the request: its cancellation
    ANSWERED = "answered"


TRANSITIONS: Mapping[tuple[CallState, str], CallState] = {
    (CallState.RUNNING, "stream"): CallState.STREAMING,
    (CallState.RUNNING, "answer"): CallState.ANSWERED,
    (CallState.RUNNING, "close"): CallState.CLOSED,
    (CallState.STREAMING, "progress"): CallState.STREAMING,
    (CallState.STREAMING, "keepalive"): CallState.STREAMING,
    (CallState.STREAMING, "answer"): CallState.ANSWERED,
    (CallState.STREAMING, "close"): CallState.CLOSED,
    (CallState.CLOSED, "close"): CallState.CLOSED,
    (CallState.ANSWERED, "close"): CallState.ANSWERED,
}


@dataclass
class HttpCall:
    """One tool call over HTTP. A call that asked for progress is answered
    with an event stream (its head at once, the progress, the result); any
    other with one JSON object. Once the client closed the request, nothing
    more is written for it."""

    dispatcher: Dispatcher
    call: CallTool
    state: CallState = field(default=CallState.RUNNING)

    @property
    def streams(self) -> bool:
        """A task is answered at once, as JSON: its progress is its status."""
        return self.call.progress_token is not None and self.call.task is None

    @property
    def closed(self) -> bool:
        return self.state is CallState.CLOSED

    def _to(self, event: str) -> None:
        self.state = advance(TRANSITIONS, self.state, event)

    def open_stream(self) -> HttpResponse:
        """The event stream's head (a call that asked for progress)."""
        if not self.streams:
            raise IllegalTransition("a call without progress is answered as JSON")
        self._to("stream")
        return HttpResponse(200, STREAM_HEADERS)

    def progress(self, message: str, value: int = 0) -> bytes | None:
        """The progress event, or None if the client closed the stream."""
        if self.closed:
            return None
        self._to("progress")
        params = self.dispatcher.progress(self.call, message, value)
        if params is None:  # only a call with a progress token is streamed
            raise IllegalTransition("a call without progress is answered as JSON")
        return event(notification_message("notifications/progress", params))

    def keepalive(self) -> bytes | None:
        if self.closed:
            return None
        self._to("keepalive")
        return KEEPALIVE

    def answer(self, outcome: CallOutcome) -> HttpResponse | bytes | None:
        """The answer: a JSON response, the stream's last event, or None
        if the client closed the request (its run still carries on)."""
        if self.closed:
            return None
        streaming = self.state is CallState.STREAMING
        self._to("answer")
        message = result_message(self.call.request_id, self.dispatcher.call_result(self.call, outcome))
        return event(message) if streaming else json_response(200, message)

    def created(self, view: TaskView) -> HttpResponse | None:
        """The CreateTaskResult of a call answered as a task, as JSON (its
        run goes on), or None if the client closed the request."""
        if self.closed:
            return None
        self._to("answer")
        return json_response(200, result_message(self.call.request_id,
                                                 self.dispatcher.created_result(self.call, view)))

    def close(self) -> None:
        """The client closed the request before its answer."""
        self._to("close")
