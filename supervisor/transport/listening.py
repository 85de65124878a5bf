"""Serving a subscriptions/listen stream (MCP 2026-07-28; the tasks
extension's `notifications/tasks`): its acknowledgement, naming the tasks
of the caller's it follows, then each of them as it changes, until the
client cancels the stream or the server stops (protocol/subscriptions/
listen.py writes every message). Over stdio each message is a line on the
one stream (stdio_serving.py); over Streamable HTTP the listen request is
answered with an event stream of its own (`listen_over_http`).

A task is followed only for the caller that created it (`Application.
task_views`, by the rule of tasks/get): another caller's task id is left
out of the acknowledgement and nothing of it is ever sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from staal.protocol.http.messages import KEEPALIVE, STREAM_HEADERS, HttpResponse, event
from staal.protocol.mcp.tasks import TaskView
from staal.protocol.subscriptions.listen import Listen, Subscription
from staal.records.record import Json
from staal.supervisor.auth.callers import Admitted
from staal.supervisor.transport.application import Application
from staal.supervisor.transport.http_exchange import KEEPALIVE_S, Receive, Send, body_part, start

Write = Callable[[dict[str, Json]], None]


class ListenStream:
    """One listen stream: `serve` acknowledges it and writes each followed
    task as it changes through `write`; `cancel` (the client's) and `end`
    (the server's) stop what is written."""

    def __init__(self, server: Application, listen: Listen, admitted: Admitted,
                 write: Write) -> None:
        self.server = server
        self.listen = listen
        self.admitted = admitted
        self.write = write
        self.subscription = Subscription(listen, server.server_info)

    async def serve(self) -> None:
        """The acknowledgement, then every followed task until each has
        ended; the stream itself stays open until cancelled or ended."""
        try:
            views = await self.server.task_views(self.listen.task_ids, self.admitted)
        except Exception as exc:  # noqa: BLE001 - a failing store read: the stream is not acknowledged
            self.server.log("listen_failed", level="error", error=f"{type(exc).__name__}: {exc}")
            return
        ack = self.subscription.acknowledge(view.task_id for view in views)
        if ack is None:
            return  # cancelled while its tasks were read
        self.write(ack)
        await asyncio.gather(*(self._follow(view) for view in views))

    async def _follow(self, view: TaskView) -> None:
        try:
            async for now in self.server.follow_task(view, self.admitted):
                message = self.subscription.task(now)
                if message is None:
                    return
                self.write(message)
        except Exception as exc:  # noqa: BLE001 - a failing store read ends this task's notifications, not the server
            self.server.log("listen_failed", level="error", task=view.task_id,
                            error=f"{type(exc).__name__}: {exc}")

    def cancel(self) -> None:
        self.subscription.cancel()

    def end(self) -> dict[str, Json] | None:
        """The server ends the stream: the listen request's result, or None
        if the client had cancelled it."""
        return self.subscription.end()


async def listen_over_http(server: Application, listen: Listen, admitted: Admitted,
                           receive: Receive, send: Send) -> None:
    """A listen request's event stream: its messages as they come, a
    keep-alive comment when none has for a while; closing it is the
    client's cancellation; when the server stops, the listen request's
    result is the stream's last event."""
    outgoing: asyncio.Queue[dict[str, Json]] = asyncio.Queue()
    stream = ListenStream(server, listen, admitted, outgoing.put_nowait)
    await start(send, HttpResponse(200, STREAM_HEADERS))
    serving = asyncio.ensure_future(stream.serve())
    closed = asyncio.ensure_future(_disconnected(receive))
    stopping = asyncio.ensure_future(server.stopping.wait())
    getting: asyncio.Future[dict[str, Json]] | None = None
    try:
        while True:
            getting = asyncio.ensure_future(outgoing.get())
            done, _ = await asyncio.wait({getting, closed, stopping}, timeout=KEEPALIVE_S,
                                         return_when=asyncio.FIRST_COMPLETED)
            if closed in done:
                stream.cancel()
                return
            if getting in done:
                await body_part(send, event(getting.result()), more=True)
                continue
            getting.cancel()
            if stopping in done:
                while not outgoing.empty():
                    await body_part(send, event(outgoing.get_nowait()), more=True)
                ended = stream.end()
                await body_part(send, b"" if ended is None else event(ended), more=False)
                return
            await body_part(send, KEEPALIVE, more=True)
    finally:
        waits: list[asyncio.Future[Any] | None] = [serving, closed, stopping, getting]
        for waiting in waits:
            if waiting is not None:
                waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
