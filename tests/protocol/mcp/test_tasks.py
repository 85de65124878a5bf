"""MCP 2025-11-25 tasks, sans I/O (protocol/mcp/tasks.py): what a tool says
of tasks in tools/list, the capability, a task-augmented tools/call, the
tasks/* requests, and the Task as the wire writes it, each checked by the
official SDK's own types where it has them."""

from __future__ import annotations

from dataclasses import replace

import mcp_types._v2025_11_25 as wire

from staal.protocol.mcp.connection import Send
from staal.protocol.mcp.dispatch import CallTool
from staal.protocol.mcp.results import ToolResult
from staal.protocol.mcp.revisions import LEGACY
from staal.protocol.mcp.tasks import (
    TASKS_EXTENSION,
    TaskPage,
    TaskRequest,
    TaskView,
    no_such_task,
    not_cancellable,
)
from tests.protocol.test_support import (
    SCHEMA,
    connection,
    descriptor,
    feed,
    initialize,
    legacy,
    modern,
    sent,
)


def tools(tmp_path, support):
    return [replace(descriptor(tmp_path), task_support=support)]


def ready(tmp_path, support="optional"):
    conn = connection(tools(tmp_path, support))
    sent(conn, initialize())
    return conn


VIEW = TaskView("a" * 32, "working", "Run aaaa is running.", 1_764_000_000_000,
                1_764_000_000_500, 7_776_000_000, 1_000)


def test_a_tool_that_allows_tasks_says_so_as_execution_task_support(tmp_path):
    listed = sent(ready(tmp_path, "required"), legacy(1, "tools/list"))["result"]["tools"]
    tool = wire.Tool.model_validate(listed[0])
    assert tool.execution is not None and tool.execution.task_support == "required"


def test_a_tool_that_forbids_tasks_has_no_execution_field(tmp_path):
    listed = sent(ready(tmp_path, "forbidden"), legacy(1, "tools/list"))["result"]["tools"]
    assert "execution" not in listed[0]


def test_the_tasks_capability_is_announced_only_when_a_tool_may_be_a_task(tmp_path):
    with_tasks = sent(connection(tools(tmp_path, "optional")), initialize())["result"]
    capabilities = wire.ServerCapabilities.model_validate(with_tasks["capabilities"])
    assert capabilities.tasks is not None and capabilities.tasks.requests is not None
    assert capabilities.tasks.list is not None and capabilities.tasks.cancel is not None
    without = sent(connection(tools(tmp_path, "forbidden")), initialize())["result"]
    assert "tasks" not in without["capabilities"]


def test_a_call_asked_as_a_task_carries_the_ask_to_the_application(tmp_path):
    conn = ready(tmp_path)
    events = feed(conn, legacy(2, "tools/call", {"name": "refund_order", "arguments": {"order": "o"},
                                                 "task": {"ttl": 60_000}}))
    assert len(events) == 1 and isinstance(events[0], CallTool)
    assert events[0].task is not None and events[0].task.ttl_ms == 60_000


def test_a_call_of_a_tool_that_forbids_tasks_asked_as_one_is_method_not_found(tmp_path):
    answer = sent(ready(tmp_path, "forbidden"),
                  legacy(2, "tools/call", {"name": "refund_order", "arguments": {}, "task": {}}))
    assert answer["error"]["code"] == -32601 and "taskSupport is forbidden" in answer["error"]["message"]


def test_a_call_of_a_tool_that_requires_a_task_asked_without_one_is_method_not_found(tmp_path):
    answer = sent(ready(tmp_path, "required"), legacy(2, "tools/call", {"name": "refund_order"}))
    assert answer["error"]["code"] == -32601 and "params.task" in answer["error"]["message"]


def test_a_task_ask_that_is_not_an_object_or_has_a_bad_ttl_is_invalid_params(tmp_path):
    conn = ready(tmp_path)
    for task in ("soon", {"ttl": -1}, {"ttl": True}):
        answer = sent(conn, legacy(3, "tools/call", {"name": "refund_order", "task": task}))
        assert answer["error"]["code"] == -32602


def test_the_created_answer_is_a_create_task_result_and_ends_the_call(tmp_path):
    conn = ready(tmp_path)
    [call] = feed(conn, legacy(2, "tools/call", {"name": "refund_order", "task": {}}))
    message = conn.answer_created(call, VIEW)
    created = wire.CreateTaskResult.model_validate(message["result"])
    assert created.task.task_id == VIEW.task_id and created.task.status == "working"
    assert created.task.created_at == "2025-11-24T16:00:00.000Z"
    assert created.task.ttl == 7_776_000_000 and created.task.poll_interval == 1_000
    assert conn.in_flight() == []


def test_tasks_requests_go_to_the_application_with_their_task_id(tmp_path):
    conn = ready(tmp_path)
    for method in ("tasks/get", "tasks/result", "tasks/cancel"):
        [event] = feed(conn, legacy(4, method, {"taskId": VIEW.task_id}))
        assert isinstance(event, TaskRequest) and event.task_id == VIEW.task_id
        assert event.method == method and event.revision == LEGACY
    [listing] = feed(conn, legacy(5, "tasks/list", {"cursor": "abc"}))
    assert isinstance(listing, TaskRequest) and listing.cursor == "abc"


def test_a_tasks_request_without_a_task_id_is_invalid_params(tmp_path):
    [event] = feed(ready(tmp_path), legacy(4, "tasks/get", {}))
    assert isinstance(event, Send) and event.message["error"]["code"] == -32602


def test_tasks_get_is_answered_with_the_task(tmp_path):
    conn = ready(tmp_path)
    [request] = feed(conn, legacy(4, "tasks/get", {"taskId": VIEW.task_id}))
    got = wire.GetTaskResult.model_validate(conn.answer_task(request, VIEW)["result"])
    assert got.status == "working" and got.status_message == VIEW.message


def test_tasks_result_is_the_tools_result_with_the_related_task(tmp_path):
    conn = ready(tmp_path)
    [request] = feed(conn, legacy(4, "tasks/result", {"taskId": VIEW.task_id}))
    done = replace(VIEW, status="completed", result=ToolResult("{}", False, {"result": {}}))
    result = conn.answer_task(request, done)["result"]
    parsed = wire.CallToolResult.model_validate(result)
    assert parsed.is_error is False and parsed.structured_content == {"result": {}}
    assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": VIEW.task_id}


def test_tasks_list_is_a_page_with_its_next_cursor(tmp_path):
    conn = ready(tmp_path)
    [request] = feed(conn, legacy(5, "tasks/list"))
    page = conn.answer_task(request, TaskPage((VIEW,), "next"))["result"]
    parsed = wire.ListTasksResult.model_validate(page)
    assert [t.task_id for t in parsed.tasks] == [VIEW.task_id] and parsed.next_cursor == "next"


def test_an_unknown_an_ended_or_a_waiting_task_cannot_be_cancelled_with_invalid_params(tmp_path):
    assert no_such_task("b" * 32).code == -32602 and "b" * 32 in no_such_task("b" * 32).message
    assert "that id" in no_such_task("../etc").message  # not a run id: not echoed
    waiting = not_cancellable(replace(VIEW, waiting=True))
    assert waiting.code == -32602 and "waits for an operator" in waiting.message
    ended = not_cancellable(replace(VIEW, status="completed"))
    assert "already completed" in ended.message


def test_a_status_notification_carries_the_task(tmp_path):
    message = ready(tmp_path).task_status(VIEW)
    parsed = wire.TaskStatusNotification.model_validate(message)
    assert parsed.params.task_id == VIEW.task_id


def test_schema_is_unchanged_by_tasks(tmp_path):
    assert tools(tmp_path, "optional")[0].input_schema == SCHEMA


# -- 2026-07-28: the extension io.modelcontextprotocol/tasks ---------------------------

EXTENDED = {"io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}


def test_server_discover_lists_the_extension_and_no_legacy_tasks_slot(tmp_path):
    discovered = sent(connection(tools(tmp_path, "optional")), modern(1, "server/discover"))
    capabilities = discovered["result"]["capabilities"]
    assert capabilities["extensions"] == {TASKS_EXTENSION: {}} and "tasks" not in capabilities


def test_a_modern_call_is_a_task_only_when_its_request_declares_the_extension(tmp_path):
    conn = connection(tools(tmp_path, "optional"))
    [plain] = feed(conn, modern(1, "tools/call", {"name": "refund_order"}))
    assert isinstance(plain, CallTool) and plain.task is None
    [asked] = feed(conn, modern(2, "tools/call", {"name": "refund_order"}, **EXTENDED))
    assert isinstance(asked, CallTool) and asked.task is not None
    forbidden = connection(tools(tmp_path, "forbidden"))
    [never] = feed(forbidden, modern(3, "tools/call", {"name": "refund_order"}, **EXTENDED))
    assert isinstance(never, CallTool) and never.task is None


def test_a_tool_always_a_task_without_the_extension_is_missing_capability(tmp_path):
    answer = sent(connection(tools(tmp_path, "required")),
                  modern(1, "tools/call", {"name": "refund_order"}))
    assert answer["error"]["code"] == -32021
    assert answer["error"]["data"] == {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}


def test_the_task_methods_without_the_extension_are_missing_capability(tmp_path):
    conn = connection(tools(tmp_path, "optional"))
    for method in ("tasks/get", "tasks/update", "tasks/cancel"):
        assert sent(conn, modern(1, method, {"taskId": VIEW.task_id}))["error"]["code"] == -32021
    assert sent(conn, modern(1, "tasks/list", **EXTENDED))["error"]["code"] == -32601


def test_the_modern_create_task_result_is_flat_with_ttl_ms_and_poll_interval_ms(tmp_path):
    conn = connection(tools(tmp_path, "optional"))
    [call] = feed(conn, modern(1, "tools/call", {"name": "refund_order"}, **EXTENDED))
    created = conn.answer_created(call, VIEW)["result"]
    assert created["resultType"] == "task" and created["taskId"] == VIEW.task_id
    assert (created["ttlMs"], created["pollIntervalMs"]) == (VIEW.ttl_ms, VIEW.poll_ms)
    assert "task" not in created and "ttl" not in created and "result" not in created


def modern_answer_to(tmp_path, method: str, view: TaskView) -> dict:
    conn = connection(tools(tmp_path, "optional"))
    params = {"taskId": view.task_id} | ({"inputResponses": {}} if method == "tasks/update" else {})
    [request] = feed(conn, modern(1, method, params, **EXTENDED))
    assert isinstance(request, TaskRequest)
    return conn.answer_task(request, view)["result"]


def test_modern_tasks_get_inlines_a_tool_error_as_a_completed_result(tmp_path):
    failed = replace(VIEW, status="failed", result=ToolResult("action: declined", True))
    got = modern_answer_to(tmp_path, "tasks/get", failed)
    assert got["status"] == "completed" and got["result"]["isError"] is True
    assert got["resultType"] == "complete" and "error" not in got
    assert "_meta" not in got["result"]  # no related-task key: the id is at the root


def test_modern_tasks_get_of_a_cancelled_task_is_cancelled_with_no_result_or_error(tmp_path):
    cancelled = replace(VIEW, status="cancelled", result=ToolResult("cancelled: before op 2", True))
    got = modern_answer_to(tmp_path, "tasks/get", cancelled)
    assert got["status"] == "cancelled" and "result" not in got and "error" not in got


def test_modern_tasks_get_reports_a_failure_inside_the_server_as_failed_with_its_error(tmp_path):
    internal = replace(VIEW, status="failed", result=ToolResult("internal", True), internal=True)
    got = modern_answer_to(tmp_path, "tasks/get", internal)
    assert got["status"] == "failed" and got["error"]["code"] == -32603 and "result" not in got


def test_modern_tasks_update_and_cancel_are_acknowledged_empty(tmp_path):
    for method in ("tasks/update", "tasks/cancel"):
        ack = modern_answer_to(tmp_path, method, VIEW)
        assert ack["resultType"] == "complete"
        assert not {"taskId", "status", "result", "error"} & set(ack)
