"""The official Python SDK's own client (`mcp` 2.x) against a staal
Connection in this process, through encoded lines: in each of its modes it
connects, lists the tools and calls one, and what it sends is what
CLIENTS.md says. The real server process is tested end to end elsewhere;
this proves the protocol layer alone is enough for the SDK."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import orjson
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.shared.memory import create_client_server_memory_streams
from mcp.shared.message import SessionMessage
from mcp_types.jsonrpc import jsonrpc_message_adapter

from staal.manifest.model import RUN_STATUS_TOOL
from staal.protocol.mcp.connection import CallTool, Cancel, Connection, Send
from staal.protocol.mcp.framing import encode_line
from staal.protocol.mcp.results import Done, Failed, RunStatus
from staal.protocol.mcp.revisions import LEGACY, MODERN, PROTOCOL_VERSION_KEY
from tests.protocol.test_support import RUN, SERVER, descriptor


def outcome_for(call: CallTool) -> Any:
    if call.name == RUN_STATUS_TOOL:
        return RunStatus(call.arguments["run"], "done", result={"refund": "re_1"})
    if call.arguments.get("fail"):
        return Failed(RUN, "validation", "refund exceeds what was paid")
    return Done(RUN, {"echo": call.arguments})


class Served:
    """A connection serving one SDK client, and every line the client sent."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.received: list[dict[str, Any]] = []

    async def serve(self, read, write) -> None:
        async for item in read:
            if isinstance(item, Exception):
                raise item
            data = item.message.model_dump_json(by_alias=True, exclude_unset=True).encode()
            self.received.append(orjson.loads(data))
            for message in self.answers(self.conn.receive_data(data + b"\n")):
                line = encode_line(message)
                await write.send(SessionMessage(jsonrpc_message_adapter.validate_json(line)))

    def answers(self, events) -> list[dict[str, Any]]:
        messages = []
        for event in events:
            if isinstance(event, Send):
                messages.append(event.message)
            elif isinstance(event, CallTool):
                progress = self.conn.progress(event, f"run {RUN} started")
                answer = self.conn.answer_call(event, outcome_for(event))
                messages += [m for m in (progress, answer) if m is not None]
        return messages

    @asynccontextmanager
    async def transport(self) -> AsyncIterator[Any]:
        async with (
            create_client_server_memory_streams() as (client_streams, server_streams),
            anyio.create_task_group() as tasks,
        ):
            tasks.start_soon(self.serve, *server_streams)
            yield client_streams
            tasks.cancel_scope.cancel()


async def session(served: Served, mode: str) -> dict[str, Any]:
    progress: list[Any] = []

    async def on_progress(value, total, message) -> None:
        progress.append(message)

    async with Client(served.transport(), mode=mode, read_timeout_seconds=5) as client:
        listed = await client.list_tools()
        done = await client.call_tool("refund_order", {"order": "o1"}, progress_callback=on_progress)
        failed = await client.call_tool("refund_order", {"fail": True})
        status = await client.call_tool(RUN_STATUS_TOOL, {"run": RUN})
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("no_such_tool", {})
        return {"version": client.protocol_version, "tools": listed.tools, "done": done,
                "failed": failed, "status": status, "progress": progress,
                "unknown": unknown.value.error.code}


def run(tmp_path, mode: str) -> tuple[Served, dict[str, Any]]:
    served = Served(Connection(SERVER, [descriptor(tmp_path, {"get": {
        "cap": "net.http.get", "only": ["https://shop.example/*"]}})]))
    return served, anyio.run(session, served, mode)


@pytest.mark.parametrize(("mode", "version"), [("auto", MODERN), ("legacy", LEGACY),
                                               (MODERN, MODERN)])
def test_the_sdk_client_lists_and_calls_tools_in_each_mode(tmp_path, mode, version):
    _, seen = run(tmp_path, mode)
    assert seen["version"] == version
    assert [tool.name for tool in seen["tools"]] == ["refund_order", RUN_STATUS_TOOL]
    refund = seen["tools"][0]
    assert refund.title == "Refund an order"
    assert refund.annotations.read_only_hint and refund.annotations.open_world_hint
    assert seen["done"].is_error is False
    assert seen["done"].structured_content == {"result": {"echo": {"order": "o1"}}}
    assert seen["failed"].is_error is True
    assert seen["status"].structured_content == {"run": RUN, "status": "done",
                                                 "result": {"refund": "re_1"}}
    assert seen["progress"] == [f"run {RUN} started"]
    assert seen["unknown"] == -32602


def test_in_auto_mode_the_sdk_probes_with_discover_and_then_envelopes_every_request(tmp_path):
    served, _ = run(tmp_path, "auto")
    first = served.received[0]
    assert first["method"] == "server/discover"
    assert first["params"]["_meta"][PROTOCOL_VERSION_KEY] == MODERN
    requests = [m for m in served.received if "id" in m]
    assert all(m["params"]["_meta"][PROTOCOL_VERSION_KEY] == MODERN for m in requests)
    assert not any(m.get("method") == "initialize" for m in served.received)


def test_in_legacy_mode_the_sdk_initializes_and_sends_plain_requests(tmp_path):
    served, _ = run(tmp_path, "legacy")
    methods = [m["method"] for m in served.received]
    assert methods[:2] == ["initialize", "notifications/initialized"]
    later = [m for m in served.received[2:] if "id" in m]
    assert all(PROTOCOL_VERSION_KEY not in m.get("params", {}).get("_meta", {}) for m in later)


def test_pinned_to_2026_07_28_the_sdks_first_line_is_an_enveloped_request(tmp_path):
    served, _ = run(tmp_path, MODERN)
    first = served.received[0]
    assert first["method"] == "tools/list"
    assert first["params"]["_meta"][PROTOCOL_VERSION_KEY] == MODERN


class Holding(Served):
    """Starts calls and answers none of them, as a slow run would."""

    def __init__(self, conn: Connection) -> None:
        super().__init__(conn)
        self.calls: list[CallTool] = []
        self.cancelled: list[Any] = []
        self.cancel_seen: anyio.Event | None = None  # made inside the test's event loop

    def answers(self, events) -> list[dict[str, Any]]:
        self.calls += [event for event in events if isinstance(event, CallTool)]
        self.cancelled += [event.request_id for event in events if isinstance(event, Cancel)]
        if self.cancelled and self.cancel_seen is not None:
            self.cancel_seen.set()
        return super().answers([event for event in events if isinstance(event, Send)])


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_call_the_sdk_gives_up_on_is_cancelled_and_gets_no_answer(tmp_path, mode):
    served = Holding(Connection(SERVER, [descriptor(tmp_path)]))

    async def give_up() -> None:
        served.cancel_seen = anyio.Event()
        async with Client(served.transport(), mode=mode) as client:
            with pytest.raises(MCPError):
                await client.call_tool("refund_order", {"order": "o1"}, read_timeout_seconds=0.2)
            with anyio.fail_after(5):
                await served.cancel_seen.wait()

    anyio.run(give_up)
    (call,) = served.calls
    assert served.cancelled == [call.request_id]
    assert served.conn.answer_call(call, Done(RUN, 1)) is None
