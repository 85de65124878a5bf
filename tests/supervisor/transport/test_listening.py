"""Listen streams over HTTP (supervisor/transport/listening.py, through
http_serving.py's McpApp), driven as uvicorn drives the ASGI application,
over a fake application: a stream is an event stream, acknowledged first,
then the followed task; the streams open at once are bounded to a quarter
of the requests in progress (one more is refused, and opens once another
closed); and when the server stops, each stream still open ends with the
listen request's result as its last event."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from types import SimpleNamespace
from typing import Any

import orjson

from staal.protocol.http.endpoint import Endpoint, HttpSettings
from staal.protocol.mcp.dispatch import Dispatcher
from staal.protocol.mcp.revisions import ServerInfo
from staal.protocol.mcp.tasks import TASKS_EXTENSION, TaskView
from staal.protocol.subscriptions.listen import SUBSCRIPTION_ID_KEY
from staal.supervisor.transport.http_serving import McpApp, requests_bound
from tests.helpers.servers import modern_meta

WAIT = 30
TASK = TaskView("a" * 32, "working", "Run aaaa is running.", 1_764_000_000_000,
                1_764_000_000_000, 7_776_000_000, 1_000)


class Application:
    """What a listen stream asks of the application: the caller's tasks
    (here one, working until the server stops) and the server's stopping."""

    def __init__(self) -> None:
        self.manifest = SimpleNamespace(server=SimpleNamespace(max_concurrent_runs=1))
        self.server_info = ServerInfo("t", "0")
        self.stopping = asyncio.Event()

    def log(self, event: str, level: str = "info", **fields: Any) -> None:
        raise AssertionError(f"{event}: {fields}")

    async def task_views(self, task_ids: Sequence[str], admitted: Any) -> list[TaskView]:
        return [TASK for task_id in task_ids if task_id == TASK.task_id]

    async def follow_task(self, view: TaskView, admitted: Any) -> AsyncIterator[TaskView]:
        yield view
        await self.stopping.wait()


class Stream:
    """One listen request to `app`: what it was sent, as uvicorn gives it."""

    def __init__(self, app: McpApp, listen_id: int) -> None:
        params = {"notifications": {"taskIds": [TASK.task_id]},
                  "_meta": modern_meta(**{"io.modelcontextprotocol/clientCapabilities":
                                          {"extensions": {TASKS_EXTENSION: {}}}})}
        self.body = orjson.dumps({"jsonrpc": "2.0", "id": listen_id,
                                  "method": "subscriptions/listen", "params": params})
        self.closed = asyncio.Event()
        self.sent: list[dict[str, Any]] = []
        self.arrived = asyncio.Event()
        self.read = False
        headers = {"host": "staal.test", "content-type": "application/json",
                   "accept": "application/json, text/event-stream",
                   "mcp-protocol-version": "2026-07-28", "mcp-method": "subscriptions/listen"}
        scope = {"type": "http", "method": "POST", "path": "/mcp", "client": ("127.0.0.1", 1),
                 "headers": [(k.encode(), v.encode()) for k, v in headers.items()]}
        self.serving = asyncio.ensure_future(app(scope, self.receive, self.send))

    async def receive(self) -> dict[str, Any]:
        if not self.read:
            self.read = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        await self.closed.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)
        self.arrived.set()

    @property
    def status(self) -> int:
        return self.sent[0]["status"]

    def events(self) -> list[dict[str, Any]]:
        bodies = b"".join(m.get("body", b"") for m in self.sent[1:])
        return [orjson.loads(line[5:]) for line in bodies.split(b"\n") if line.startswith(b"data:")]

    async def until(self, events: int) -> None:
        async def enough() -> None:
            while len(self.events()) < events and not self.serving.done():
                self.arrived.clear()
                await self.arrived.wait()
        await asyncio.wait_for(enough(), WAIT)


def test_listen_streams_are_bounded_acknowledged_first_and_ended_with_their_result():
    asyncio.run(_streams())


async def _streams():
    server = Application()
    endpoint = Endpoint(Dispatcher(server.server_info, []),
                        HttpSettings(hosts=frozenset({"staal.test"})))
    app = McpApp(server, {None: endpoint})  # type: ignore[arg-type]
    most = requests_bound(1) // 4
    streams = [Stream(app, n) for n in range(most)]
    for n, stream in enumerate(streams):
        await stream.until(2)
        ack, told = stream.events()
        assert stream.status == 200 and ack["params"]["notifications"] == {"taskIds": [TASK.task_id]}
        assert told["method"] == "notifications/tasks" and told["params"]["status"] == "working"
        assert told["params"]["_meta"] == {SUBSCRIPTION_ID_KEY: n}
    refused = Stream(app, most)
    await asyncio.wait_for(refused.serving, WAIT)
    answer = orjson.loads(refused.sent[1]["body"])
    assert refused.status == 400 and answer["id"] == most and answer["error"]["code"] == -32603
    assert "listen streams are open" in answer["error"]["message"]
    streams[0].closed.set()  # the client closes one: another may open
    await asyncio.wait_for(streams[0].serving, WAIT)
    streams[0] = Stream(app, most + 1)
    await streams[0].until(2)
    assert streams[0].status == 200
    server.stopping.set()
    for stream in streams:
        await asyncio.wait_for(stream.serving, WAIT)
        ended = stream.events()[-1]
        assert ended["result"]["resultType"] == "complete" and stream.sent[-1]["more_body"] is False
        assert ended["result"]["_meta"][SUBSCRIPTION_ID_KEY] == ended["id"]
    assert app.listening == 0
