"""The TypeScript SDK 1.x's experimental tasks client (MCP 2025-11-25,
`@modelcontextprotocol/sdk` pinned in tests/js) against the real
`staal-supervisor serve` over stdio: it sees the tasks capability and the
tool's execution.taskSupport, creates a task with callToolStream, polls it
to its end and fetches its result, lists it, and is refused a cancel of the
ended task (-32602, as the revision says). The TypeScript SDK's own schemas
check every answer."""

from __future__ import annotations

import json
import subprocess

from tests.clients.test_client_typescript import (
    JS,
    TIMEOUT,
    Setup,
    node,
    require_node_modules,
)


def tasks_session(setup: Setup, tool: str, arguments: dict) -> dict:
    require_node_modules()
    plan = {"server": setup.command(), "tool": tool, "arguments": arguments, "timeoutMs": 30000}
    done = subprocess.run([node(), str(JS / "tasks_session.mjs")], input=json.dumps(plan), cwd=JS,
                          check=False, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert "fatal" not in out, f"{out['fatal']}\nserver stderr:\n{out.get('serverStderr')}"
    return out


def task_setup(tmp_path) -> Setup:
    setup = Setup(tmp_path)
    manifest = json.loads(setup.manifest.read_text())
    manifest["tools"][0]["task"] = "optional"
    setup.manifest.write_text(json.dumps(manifest))
    return setup


def test_the_sdk1_tasks_client_creates_polls_and_fetches_a_task(tmp_path):
    out = tasks_session(task_setup(tmp_path), "echo", {"text": "hello"})
    assert out["steps"] == ["listed", "streamed", "fetched", "closed"]
    assert out["capabilities"]["tasks"]["requests"] == {"tools": {"call": {}}}
    assert out["tools"][0]["execution"] == {"taskSupport": "optional"}
    kinds = [m["type"] for m in out["stream"]]
    assert kinds[0] == "taskCreated" and kinds[-1] == "result", out["stream"]
    task_id = out["stream"][0]["task"]["taskId"]
    assert out["stream"][-1]["result"]["structuredContent"]["result"]["echo"] == "hello"
    assert out["got"]["taskId"] == task_id and out["got"]["status"] == "completed"
    assert [t["taskId"] for t in out["listed"]["tasks"]] == [task_id]
    assert out["result"]["isError"] is False
    assert out["cancel"]["code"] == -32602 and "already completed" in out["cancel"]["message"]


def test_a_failing_run_is_a_failed_task_whose_result_is_the_error(tmp_path):
    setup = task_setup(tmp_path)
    manifest = json.loads(setup.manifest.read_text())
    manifest["tools"][1]["task"] = "required"
    setup.manifest.write_text(json.dumps(manifest))
    out = tasks_session(setup, "refuse", {"order": "pi_1"})
    assert out["got"]["status"] == "failed"
    assert out["result"]["isError"] is True and "refund exceeds" in out["result"]["content"][0]["text"]
