"""Tasks over authenticated Streamable HTTP (issue 28 item 4): a task is seen
only by the caller that created it, by the rule of staal_run_status and the
runs resources. Another caller's tasks/get, tasks/cancel, tasks/result and
tasks/list are answered exactly as for a task that does not exist, in both
revisions, and change nothing. A tool that is always a task is -32021 to a
request without the extension, and nothing is reserved."""

from __future__ import annotations

import json
from typing import Any

from staal.protocol.mcp.revisions import CLIENT_CAPABILITIES_KEY
from staal.protocol.mcp.tasks import TASKS_EXTENSION
from tests.helpers.http_servers import HttpServer
from tests.processes.test_callers_http import As, callers_site, ops, runs, support

WITH_TASKS = {CLIENT_CAPABILITIES_KEY: {"extensions": {TASKS_EXTENSION: {}}}}
NOBODYS = "0123456789abcdef" * 2


def tasks_site(tmp_path, service, issuer, echo_task: str = "optional"):
    site = callers_site(tmp_path, service, issuer)
    manifest = json.loads(site.manifest.read_text())
    for tool in manifest["tools"]:
        if tool["name"] == "echo":
            tool["task"] = echo_task
    manifest["callers"][0]["tools"]["echo"] = {}  # support may call echo too
    site.manifest.write_text(json.dumps(manifest))
    return site


def modern(caller: As, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return caller.http.modern(method, params, headers=caller.headers, **WITH_TASKS).json()


def legacy(caller: As, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return caller.http.legacy(method, params, headers=caller.headers).json()


def unknown_alike(answer: dict[str, Any], nobodys: dict[str, Any], task_id: str) -> bool:
    """The same error as for a task that never existed, but for the id it names."""
    return answer["error"] == {**nobodys["error"],
                               "message": nobodys["error"]["message"].replace(NOBODYS, task_id)}


def test_another_callers_task_is_answered_as_one_that_does_not_exist_and_nothing_changes(
        tmp_path, service, authorization):
    with HttpServer(tasks_site(tmp_path, service, authorization.issuer)) as http:
        owner, other = ops(http, authorization), support(http, authorization)
        created = modern(owner, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        assert created["result"]["resultType"] == "task", created
        task_id = created["result"]["taskId"]
        ended = legacy(owner, "tasks/result", {"taskId": task_id})["result"]  # waits for the end
        assert ended["structuredContent"] == {"result": {"echo": "hi"}}
        before = modern(owner, "tasks/get", {"taskId": task_id})["result"]
        assert before["status"] == "completed" and before["result"]["isError"] is False

        for method in ("tasks/get", "tasks/cancel", "tasks/update"):
            params = {"taskId": task_id} | ({"inputResponses": {}} if method == "tasks/update" else {})
            nobodys = modern(other, method, {**params, "taskId": NOBODYS})
            assert unknown_alike(modern(other, method, params), nobodys, task_id), method
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            nobodys = legacy(other, method, {"taskId": NOBODYS})
            assert unknown_alike(legacy(other, method, {"taskId": task_id}), nobodys, task_id)
        assert legacy(other, "tasks/list")["result"] == {"tasks": []}

        after = modern(owner, "tasks/get", {"taskId": task_id})["result"]
        assert after == before  # nothing the other caller said changed it
        assert [t["taskId"] for t in legacy(owner, "tasks/list")["result"]["tasks"]] == [task_id]
        assert [entry.run for entry in runs(http)] == [task_id]


def test_a_tool_always_a_task_is_refused_without_the_extension_and_nothing_is_reserved(
        tmp_path, service, authorization):
    with HttpServer(tasks_site(tmp_path, service, authorization.issuer, "required")) as http:
        caller = ops(http, authorization)
        answer = caller.http.modern("tools/call", {"name": "echo", "arguments": {"text": "hi"}},
                                    headers=caller.headers)
        assert answer.status_code == 400
        error = answer.json()["error"]
        assert error["code"] == -32021
        assert error["data"] == {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}
        gated = caller.http.modern("tasks/get", {"taskId": NOBODYS}, headers=caller.headers)
        assert gated.json()["error"]["code"] == -32021
        assert runs(http) == ()


def test_a_2025_11_25_task_over_http_is_answered_once_reserved_and_its_result_waited_for(
        tmp_path, service, authorization):
    with HttpServer(tasks_site(tmp_path, service, authorization.issuer)) as http:
        caller = ops(http, authorization)
        created = legacy(caller, "tools/call", {"name": "echo", "arguments": {"text": "yo"},
                                                "task": {}})
        task = created["result"]["task"]
        assert task["status"] == "working" and [e.run for e in runs(http)] == [task["taskId"]]
        result = legacy(caller, "tasks/result", {"taskId": task["taskId"]})["result"]
        assert result["structuredContent"] == {"result": {"echo": "yo"}}
        assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task["taskId"]}
