"""subscriptions/listen, sans I/O (protocol/subscriptions/listen.py): what a
listen request may ask, and the stream's messages in the order the spec
allows, each checked by the official SDK's own 2026-07-28 types where it
has them: the acknowledgement first, naming only the tasks followed; then
notifications/tasks, the DetailedTask tasks/get answers; nothing once the
client cancelled; the listen request's result when the server ends it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from mcp_types._v2026_07_28 import SubscriptionsAcknowledgedNotification, SubscriptionsListenResult

from staal.protocol.mcp.connection import Cancel
from staal.protocol.mcp.results import ToolResult
from staal.protocol.mcp.revisions import SERVER_INFO_KEY
from staal.protocol.mcp.tasks import TASKS_EXTENSION, TaskView, modern_detailed
from staal.protocol.subscriptions.listen import (
    MAX_TASK_IDS,
    SUBSCRIPTION_ID_KEY,
    Listen,
    Subscription,
)
from staal.runtime.transitions import IllegalTransition
from tests.protocol.test_support import SERVER, connection, feed, legacy, modern, sent

EXTENDED = {"io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}
MINE, OTHER = "a" * 32, "b" * 32
WORKING = TaskView(MINE, "working", "Run aaaa is running.", 1_764_000_000_000,
                   1_764_000_000_000, 7_776_000_000, 1_000)
COMPLETED = replace(WORKING, status="completed", message="Run aaaa is done.",
                    updated_ms=1_764_000_009_000, result=ToolResult('{"ok": true}', False))


def listen(task_ids: list[str], **meta) -> dict:
    return modern(9, "subscriptions/listen", {"notifications": {"taskIds": task_ids}}, **meta)


def test_a_listen_request_is_a_stream_for_the_application_with_each_task_once():
    [asked] = feed(connection(), listen([MINE, OTHER, MINE], **EXTENDED))
    assert asked == Listen(9, (MINE, OTHER))


def test_a_listen_request_that_cannot_be_served_is_refused_as_the_spec_says():
    conn = connection()
    missing = sent(conn, listen([MINE]))  # task ids without the tasks extension declared
    assert missing["error"]["code"] == -32021
    assert missing["error"]["data"] == {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}
    for notifications in (None, {"taskIds": "a"}, {"taskIds": [1]},
                          {"taskIds": [MINE] * (MAX_TASK_IDS + 1)}):
        params = {} if notifications is None else {"notifications": notifications}
        refused = sent(conn, modern(10, "subscriptions/listen", params, **EXTENDED))
        assert refused["error"]["code"] == -32602, notifications
    before = connection()
    sent(before, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}})
    assert sent(before, legacy(11, "subscriptions/listen", {"notifications": {}}))["error"]["code"] \
        == -32601  # 2025-11-25 has no such method


def test_the_stream_is_acknowledged_first_then_tells_each_followed_task_as_tasks_get_would():
    stream = Subscription(Listen(9, (MINE, OTHER)), SERVER)
    with pytest.raises(IllegalTransition):
        stream.task(WORKING)  # nothing before the acknowledgement
    ack = stream.acknowledge([MINE])  # the application found only MINE the caller's
    assert ack is not None
    parsed = SubscriptionsAcknowledgedNotification.model_validate(ack)
    assert ack["params"] == {"_meta": {SUBSCRIPTION_ID_KEY: 9}, "notifications": {"taskIds": [MINE]}}
    assert parsed.method == "notifications/subscriptions/acknowledged"
    for view in (WORKING, COMPLETED):
        told = stream.task(view)
        assert told is not None and told["method"] == "notifications/tasks"
        assert told["params"] == {**modern_detailed(view), "_meta": {SUBSCRIPTION_ID_KEY: 9}}
    assert stream.task(replace(WORKING, task_id=OTHER)) is None  # not followed: never told
    ended = stream.end()
    assert ended is not None and ended["id"] == 9
    result = SubscriptionsListenResult.model_validate(ended["result"])
    assert result.result_type == "complete" and SERVER_INFO_KEY in ended["result"]["_meta"]
    assert ended["result"]["_meta"][SUBSCRIPTION_ID_KEY] == 9
    assert stream.task(COMPLETED) is None and stream.end() is None


def test_nothing_is_sent_on_a_stream_the_client_cancelled():
    stream = Subscription(Listen(9, (MINE,)), SERVER)
    stream.cancel()  # before its tasks were read
    assert stream.acknowledge([MINE]) is None
    assert stream.task(WORKING) is None and stream.end() is None


def test_a_stdio_listen_stays_open_until_the_client_cancels_it():
    conn = connection()
    feed(conn, listen([MINE], **EXTENDED))
    reused = sent(conn, modern(9, "server/discover"))
    assert reused["error"]["code"] == -32600  # its id is still in use
    cancelled = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}}
    assert feed(conn, cancelled) == [Cancel(9)]
    assert feed(conn, cancelled) == []  # once
    assert "result" in sent(conn, modern(9, "server/discover"))
