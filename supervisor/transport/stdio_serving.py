"""Serving over stdio (seed 000 section 3): read the protocol stream until
it ends or SIGTERM or SIGINT, answer every call in flight, then let the server close.

The event loop reads the protocol descriptor (a thread does, when it cannot
be polled: stdio.read_chunks); the connection (protocol/mcp/connection.py)
turns lines into events; every outgoing line is written whole under one
lock (`LineWriter`), and a write that fails for good (the client is gone)
stops the reading while running runs end.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from staal.protocol.mcp.connection import Cancel, Connection, Event, Send
from staal.protocol.mcp.dispatch import CallTool
from staal.protocol.mcp.jsonrpc import INTERNAL_ERROR, RequestId, RpcError
from staal.protocol.mcp.resources import ReadAnswer, ReadResource
from staal.protocol.mcp.results import CallOutcome
from staal.protocol.mcp.revisions import LEGACY
from staal.protocol.mcp.tasks import TaskRequest
from staal.protocol.subscriptions.listen import Listen
from staal.runtime.killpoints import kill_point
from staal.supervisor.auth.callers import LOCAL
from staal.supervisor.calls.pipeline import CallState
from staal.supervisor.transport.application import Application, Transport, prompt_catalogue
from staal.supervisor.transport.listening import ListenStream
from staal.supervisor.transport.stdio import LineWriter, Stdio, read_chunks


class StdioServing:
    def __init__(self, server: Application, stdio: Stdio) -> None:
        self.server = server
        self.stdio = stdio
        self.writer = LineWriter(stdio.writer, self._client_gone)
        self.connection = Connection(server.server_info, server.descriptors,
                                     resources=server.resource_catalogue,
                                     prompts=prompt_catalogue(server))
        self.tasks: dict[RequestId, asyncio.Task[None]] = {}
        self.states: dict[RequestId, CallState] = {}
        self.task_requests: dict[tuple[str, RequestId], asyncio.Task[None]] = {}
        # 2025-11-25 tasks whose status is still told, until each ends or serving does.
        self.status_followers: set[asyncio.Future[None]] = set()
        # subscriptions/listen streams open, until cancelled or serving ends.
        self.listens: dict[RequestId, tuple[ListenStream, asyncio.Task[None]]] = {}
        self.loop: asyncio.AbstractEventLoop | None = None

    async def serve(self) -> None:
        loop = self.loop = asyncio.get_running_loop()
        stopping = self.server.stopping
        ended = asyncio.Event()  # the end of input, or a failure handling it
        failed: list[BaseException] = []

        def received(data: bytes | None) -> None:
            # Each chunk is handled in the callback that brings it: a queue
            # and a task per chunk to wait on it and on `stopping` were
            # several loop iterations per call.
            if ended.is_set() or stopping.is_set():
                return  # serving is over: what comes after is not read
            if data is None:
                ended.set()
                return
            try:
                for event in self.connection.receive_data(data):
                    self.dispatch(event)
            except BaseException as exc:  # noqa: BLE001 - raised from serve(), as before
                failed.append(exc)
                ended.set()

        stop_reading = read_chunks(self.stdio.reader, received, loop)
        waiters = {asyncio.ensure_future(ended.wait()), asyncio.ensure_future(stopping.wait())}
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ended.set()
            stop_reading()
            for waiter in waiters:
                waiter.cancel()
        if failed:
            raise failed[0]
        if self.tasks:
            await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        for waiting in list(self.task_requests.values()):
            waiting.cancel()  # a tasks/result still waiting: its client is gone
        for following in list(self.status_followers):
            following.cancel()
        self.end_listens()

    def dispatch(self, event: Event) -> None:
        if isinstance(event, Send):
            self.send(event.message)
        elif isinstance(event, CallTool):
            self.start_call(event)
        elif isinstance(event, ReadResource):
            self.start_read(event)
        elif isinstance(event, TaskRequest):
            self.start_task_request(event)
        elif isinstance(event, Listen):
            self.start_listen(event)
        elif isinstance(event, Cancel):
            state = self.states.get(event.request_id)
            if state is not None:
                state.cancelled = True
            listening = self.listens.pop(event.request_id, None)
            if listening is not None:  # the client ends its listen stream: nothing more on it
                listening[0].cancel()
                listening[1].cancel()

    def start_call(self, call: CallTool) -> None:
        busy = self.server.busy(len(self.tasks), call.name)
        if busy is not None:
            self.answer(call, busy)
            return
        state = CallState(progress=lambda value, text: self._progress(call, value, text))
        if call.task is not None:
            # Answered once reserved; then the task's status tells the rest.
            state.progress = None
            state.reserved = lambda run, ms: self._created(call, run, ms)
        self.states[call.request_id] = state
        self.tasks[call.request_id] = asyncio.ensure_future(self.run_call(call, state))

    def start_read(self, read: ReadResource) -> None:
        """A read counts against the bound on calls in progress: it may be a run."""
        busy = self.server.busy(len(self.tasks))
        if busy is not None:
            self._answer_read(read, RpcError(INTERNAL_ERROR, busy.message))
            return
        state = CallState()
        self.states[read.request_id] = state
        self.tasks[read.request_id] = asyncio.ensure_future(self.run_read(read, state))

    async def run_read(self, read: ReadResource, state: CallState) -> None:
        try:
            # stdio has no principal: the local client sees the server's own runs.
            self._answer_read(read, await self.server.read_resource(read, LOCAL, state))
        finally:
            self.tasks.pop(read.request_id, None)
            self.states.pop(read.request_id, None)

    def _answer_read(self, read: ReadResource, answer: ReadAnswer) -> None:
        message = self.connection.answer_read(read, answer)
        if message is not None:
            self.send(message)

    def start_task_request(self, request: TaskRequest) -> None:
        """tasks/*: answered apart from the calls (tasks/result may wait for
        a run's end), and never bounded as a call is: it runs nothing."""
        key = ("task", request.request_id)
        self.task_requests[key] = asyncio.ensure_future(self.run_task_request(request, key))

    async def run_task_request(self, request: TaskRequest, key: tuple[str, RequestId]) -> None:
        try:
            self.send(self.connection.answer_task(request, await self.server.answer_task(request)))
        finally:
            self.task_requests.pop(key, None)

    def start_listen(self, listen: Listen) -> None:
        """A listen stream: its messages are lines among the others, each
        tagged with its id. stdio has no principal: the local client's."""
        stream = ListenStream(self.server, listen, LOCAL, self.send)
        self.listens[listen.request_id] = (stream, asyncio.ensure_future(stream.serve()))

    def end_listens(self) -> None:
        """Serving ends: each listen stream still open is answered with its
        result (the server ends it), and nothing more is sent on it."""
        for stream, serving in self.listens.values():
            serving.cancel()
            self.connection.listen_ended(stream.listen)
            message = stream.end()
            if message is not None:
                self.send(message)
        self.listens.clear()

    def _created(self, call: CallTool, run: str, reserved_ms: int) -> None:
        """A call asked as a task is answered once its run is reserved."""
        message = self.connection.answer_created(call, self.server.created_task(run, reserved_ms))
        if message is not None:
            self.send(message)

    async def _status_changed(self, run: str) -> None:
        """notifications/tasks/status (2025-11-25) from a task's call's
        outcome on: the task then, and each change after it until it ends
        (a run that stopped for an operator, resolved and resumed)."""
        view = await self.server.task_view(run)
        if view is None:
            return
        async for now in self.server.follow_task(view, LOCAL):
            self.send(self.connection.task_status(now))

    async def run_call(self, call: CallTool, state: CallState) -> None:
        try:
            outcome = await self.server.outcome_of(call, state)
            if outcome is not None and call.task is not None and state.run is not None:
                # Answered at its reserve already; 2026-07-28 sends task
                # notifications only on the listen streams that follow it.
                if call.revision == LEGACY:  # followed apart: serving's end does not wait for it
                    following = asyncio.ensure_future(self._status_changed(state.run))
                    self.status_followers.add(following)
                    following.add_done_callback(self.status_followers.discard)
            elif outcome is not None:
                self.answer(call, outcome)
                kill_point("supervisor", "answer")
        except Exception as exc:  # noqa: BLE001 - a bug or a failing disk: nothing may escape the task
            failure = self.server.internal_failure(call, state, exc)
            if call in self.connection.in_flight():  # else answered already: the log has it
                try:
                    self.answer(call, failure)
                except Exception as again:  # noqa: BLE001 - the log is all that is left
                    self.server.answer_failed(call, state, again)
        finally:
            self.tasks.pop(call.request_id, None)
            self.states.pop(call.request_id, None)

    def answer(self, call: CallTool, outcome: CallOutcome) -> None:
        message = self.connection.answer_call(call, outcome)
        if message is not None:
            self.send(message)

    def _progress(self, call: CallTool, value: int, text: str) -> None:
        message = self.connection.progress(call, text, value)
        if message is not None:
            self.send(message)

    def send(self, message: dict[str, Any]) -> None:
        self.writer.send(orjson.dumps(message) + b"\n")

    def _client_gone(self, error: OSError) -> None:
        self.server.log("client_gone", level="warning", error=str(error))
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.server.stopping.set)


def over_stdio(stdio: Stdio) -> Transport:
    """The stdio transport for `serve`."""

    async def serve(server: Application) -> None:
        await StdioServing(server, stdio).serve()

    return serve
