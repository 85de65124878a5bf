"""subscriptions/listen, sans I/O (MCP 2026-07-28, basic/patterns/
subscriptions; the tasks extension's "Task Status Notifications").

A client opens a long-lived stream with a filter naming what it wants; the
server acknowledges the part it honours (`notifications/subscriptions/
acknowledged`, the stream's first message), then sends only that, each
message tagged with the stream's id (the listen request's JSON-RPC id) in
`_meta`. Staal's tools, prompts and resource lists never change while it
runs, so of the filter it honours only the tasks extension's `taskIds`:
`notifications/tasks`, each a DetailedTask exactly as tasks/get would answer
it then. Which of the ids it honours is the application's to decide (the
caller's own tasks; another's is left out, as if it did not exist); this
module reads the request and writes the stream's messages.

A stream ends when the client cancels it (notifications/cancelled over
stdio, closing the event stream over HTTP: nothing more is sent), or when
the server stops (the listen request's empty result, then nothing more).
`Subscription` is that life as a state machine.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from staal.protocol.mcp.jsonrpc import (
    INVALID_PARAMS,
    RequestId,
    RpcError,
    notification_message,
    result_message,
)
from staal.protocol.mcp.revisions import SERVER_INFO_KEY, ServerInfo
from staal.protocol.mcp.tasks import TaskView, has_tasks_extension, missing_extension, modern_detailed
from staal.records.record import Json
from staal.runtime.transitions import advance

LISTEN = "subscriptions/listen"
ACKNOWLEDGED = "notifications/subscriptions/acknowledged"
TASK_NOTIFICATION = "notifications/tasks"
SUBSCRIPTION_ID_KEY = "io.modelcontextprotocol/subscriptionId"
# The most task ids one stream may follow (each is read from the store as it changes).
MAX_TASK_IDS = 100


@dataclass(frozen=True, slots=True)
class Listen:
    """A subscriptions/listen request for the application to serve: the
    task ids it asks to follow (in the order asked, each once)."""

    request_id: RequestId
    task_ids: tuple[str, ...] = ()


def read_listen(request_id: RequestId, params: dict[str, Json]) -> Listen | RpcError:
    """The request, or why it is refused: -32602 for a filter that is not
    one, -32021 for task ids asked without the tasks extension declared on
    this request (the extension says MUST)."""
    wanted = params.get("notifications")
    if not isinstance(wanted, dict):
        return RpcError(INVALID_PARAMS, f"{LISTEN} needs params.notifications (an object: the "
                        "notifications to listen for)")
    if "taskIds" not in wanted:
        return Listen(request_id)
    ids = wanted["taskIds"]
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        return RpcError(INVALID_PARAMS, f"{LISTEN} params.notifications.taskIds must be a list "
                        "of task ids (strings)")
    if len(ids) > MAX_TASK_IDS:
        return RpcError(INVALID_PARAMS, f"{LISTEN} params.notifications.taskIds lists "
                        f"{len(ids)} tasks; one stream follows at most {MAX_TASK_IDS}")
    if not has_tasks_extension(params):
        return missing_extension(f"{LISTEN} with taskIds")
    return Listen(request_id, tuple(dict.fromkeys(i for i in ids if isinstance(i, str))))


class ListenState(Enum):
    OPENED = "opened"  # asked; nothing sent yet
    LISTENING = "listening"  # acknowledged
    CANCELLED = "cancelled"  # by the client: nothing more is sent
    ENDED = "ended"  # by the server: its result sent, nothing more


TRANSITIONS: Mapping[tuple[ListenState, str], ListenState] = {
    (ListenState.OPENED, "acknowledge"): ListenState.LISTENING,
    (ListenState.OPENED, "cancel"): ListenState.CANCELLED,
    (ListenState.OPENED, "end"): ListenState.ENDED,
    (ListenState.LISTENING, "notify"): ListenState.LISTENING,
    (ListenState.LISTENING, "cancel"): ListenState.CANCELLED,
    (ListenState.LISTENING, "end"): ListenState.ENDED,
    (ListenState.CANCELLED, "acknowledge"): ListenState.CANCELLED,
    (ListenState.CANCELLED, "notify"): ListenState.CANCELLED,
    (ListenState.CANCELLED, "cancel"): ListenState.CANCELLED,
    (ListenState.CANCELLED, "end"): ListenState.CANCELLED,
    (ListenState.ENDED, "acknowledge"): ListenState.ENDED,
    (ListenState.ENDED, "notify"): ListenState.ENDED,
    (ListenState.ENDED, "cancel"): ListenState.ENDED,
    (ListenState.ENDED, "end"): ListenState.ENDED,
}


class Subscription:
    """One listen stream's messages, in the order the spec allows: the
    acknowledgement first, then the tasks it agreed to follow, until the
    client cancels it or the server ends it. Each method gives the message
    to send, or None when nothing may be sent."""

    def __init__(self, listen: Listen, server_info: ServerInfo) -> None:
        self.listen = listen
        self.server_info = server_info
        self.state = ListenState.OPENED
        self.followed: frozenset[str] = frozenset()

    @property
    def over(self) -> bool:
        return self.state in (ListenState.CANCELLED, ListenState.ENDED)

    def _tag(self) -> dict[str, Json]:
        return {SUBSCRIPTION_ID_KEY: self.listen.request_id}

    def acknowledge(self, task_ids: Iterable[str]) -> dict[str, Json] | None:
        """The acknowledgement, naming the tasks it follows (those of
        `task_ids` it was asked for, in the order asked)."""
        honoured = set(task_ids)
        followed = [i for i in self.listen.task_ids if i in honoured]
        was = self.state
        self.state = advance(TRANSITIONS, was, "acknowledge")
        if was is not ListenState.OPENED:
            return None
        self.followed = frozenset(followed)
        agreed: dict[str, Json] = {"taskIds": list(followed)} if self.listen.task_ids else {}
        return notification_message(ACKNOWLEDGED, {"_meta": self._tag(), "notifications": agreed})

    def task(self, view: TaskView) -> dict[str, Json] | None:
        """notifications/tasks: the task as tasks/get would answer it now."""
        self.state = advance(TRANSITIONS, self.state, "notify")
        if self.over or view.task_id not in self.followed:
            return None
        return notification_message(TASK_NOTIFICATION, {**modern_detailed(view), "_meta": self._tag()})

    def cancel(self) -> None:
        """The client cancelled the stream."""
        self.state = advance(TRANSITIONS, self.state, "cancel")

    def end(self) -> dict[str, Json] | None:
        """The server ends the stream (it is stopping): the listen request's
        result, or None if the client had cancelled it."""
        was = self.state
        self.state = advance(TRANSITIONS, was, "end")
        if was in (ListenState.CANCELLED, ListenState.ENDED):
            return None
        meta: dict[str, Json] = {SERVER_INFO_KEY: self.server_info.to_wire(), **self._tag()}
        return result_message(self.listen.request_id, {"resultType": "complete", "_meta": meta})
