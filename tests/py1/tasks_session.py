"""One MCP 2025-11-25 tasks session with the official Python SDK 1.x's
experimental tasks client (`mcp` pinned in tests/py1/requirements.txt),
as tests/clients/test_tasks_python_sdk1.py runs it, with the Python of
tests/py1/.venv (never the project's venv, which has mcp 2.x):

    tests/py1/.venv/bin/python tests/py1/tasks_session.py < plan.json

The plan: {"server": {"command", "args", "cwd", "env"}} (stdio) or
{"url": ..., "headers": {...}} (Streamable HTTP), and "tool", "arguments",
"afterFirstWorking" (HTTP requests, [{"method", "url"}], sent once a poll
has answered `working`: the test's gate on the run), "timeoutS".

It initializes, lists the tools, calls the tool as a task
(`session.experimental.call_tool_as_task`), polls it with `poll_task` to
its end (at the server's pollInterval), fetches its result
(`get_task_result`) and lists the tasks. It prints one JSON object on
stdout: what each step gave (the SDK's own models, dumped by alias), or
{"fatal": "..."} with what it had so far.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult


def dumped(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


@asynccontextmanager
async def connected(plan: dict[str, Any]) -> AsyncIterator[ClientSession]:
    if "url" in plan:
        async with httpx.AsyncClient(headers=plan.get("headers", {}), trust_env=False,
                                     timeout=plan["timeoutS"]) as http, \
                streamable_http_client(plan["url"], http_client=http) as (read, write, _), \
                ClientSession(read, write) as session:
            yield session
    else:
        server = StdioServerParameters(**plan["server"])
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            yield session


async def gate(requests: list[dict[str, str]]) -> None:
    """The plan's requests, in order, each answered 2xx (bounded by the
    session's own deadline)."""
    async with httpx.AsyncClient(trust_env=False, timeout=None) as http:
        for request in requests:
            answer = await http.request(request["method"], request["url"])
            answer.raise_for_status()


async def session(plan: dict[str, Any], out: dict[str, Any]) -> None:
    out["steps"] = []
    with anyio.fail_after(plan["timeoutS"]):
        async with connected(plan) as client:
            initialized = await client.initialize()
            out["protocolVersion"] = initialized.protocolVersion
            out["capabilities"] = dumped(initialized.capabilities)
            out["tools"] = [dumped(tool) for tool in (await client.list_tools()).tools]
            out["steps"].append("listed")
            created = await client.experimental.call_tool_as_task(plan["tool"], plan["arguments"])
            out["created"] = dumped(created)
            task_id = created.task.taskId
            out["steps"].append("created")
            out["polled"] = []
            async for status in client.experimental.poll_task(task_id):
                out["polled"].append(dumped(status))
                if status.status == "working" and len(out["polled"]) == 1:
                    await gate(plan.get("afterFirstWorking", []))
            out["steps"].append("polled")
            out["result"] = dumped(await client.experimental.get_task_result(task_id, CallToolResult))
            out["listed"] = dumped(await client.experimental.list_tasks())
            out["steps"].append("fetched")
    out["steps"].append("closed")


def main() -> None:
    plan = json.loads(sys.stdin.read())
    out: dict[str, Any] = {}
    try:
        anyio.run(session, plan, out)
    except BaseException:  # noqa: BLE001 - whatever it was is the test's message
        out["fatal"] = traceback.format_exc()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
