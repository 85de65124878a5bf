"""One request's exchange under uvicorn's ASGI: reading a body within its
bounds (413, 408), writing an answer, and a tool call's answer as JSON or as
an event stream with keep-alive comments (`CallExchange`); http_serving.py
routes each request here."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from staal.protocol.http.call import HttpCall
from staal.protocol.http.messages import HttpResponse
from staal.protocol.mcp.results import CallOutcome
from staal.protocol.mcp.revisions import LEGACY
from staal.protocol.mcp.tasks import TaskView
from staal.runtime.killpoints import kill_point
from staal.supervisor.auth.callers import Admitted
from staal.supervisor.calls.pipeline import CallState
from staal.supervisor.transport.application import Application

# The end of a cancelled 2025-11-25 call's POST: accepted, with no answer in it.
NOTHING_MORE = HttpResponse(202, (("content-length", "0"),))
BODY_TIMEOUT_S = 10.0
KEEPALIVE_S = 15.0

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class CallExchange:
    """One tool call's HTTP exchange: its answer as JSON, or as an event
    stream (head, progress, keep-alives, result); the client closing it is
    watched throughout."""

    def __init__(self, server: Application, http: HttpCall, state: CallState, admitted: Admitted,
                 receive: Receive, send: Send,
                 detached: set[asyncio.Future[CallOutcome | None]] | None = None) -> None:
        self.server = server
        # The runs of calls answered as tasks, until they end (serving waits for them).
        self.detached = set() if detached is None else detached
        self.http = http
        self.state = state
        self.admitted = admitted
        self.receive = receive
        self.send = send
        self.outgoing: asyncio.Queue[bytes] = asyncio.Queue()

    async def run(self) -> None:
        if self.http.call.task is not None:
            await self.run_as_task()
            return
        call = self.http.call
        watcher = asyncio.ensure_future(self._watch())
        streaming = self.http.streams
        if streaming:
            await start(self.send, self.http.open_stream())
            self.state.progress = lambda value, text: self._queue(self.http.progress(text, value))
        pumping = asyncio.ensure_future(self._pump()) if streaming else None
        try:
            outcome = await self.server.outcome_of(call, self.state, self.admitted)
        except Exception as exc:  # noqa: BLE001 - a bug or a failing disk: nothing may escape
            outcome = self.server.internal_failure(call, self.state, exc)
        try:
            await self._answer(outcome, pumping)
            kill_point("supervisor", "answer")
        finally:
            watcher.cancel()

    async def run_as_task(self) -> None:
        """A call answered as a task: its CreateTaskResult once its run is
        reserved (durable, so tasks/get answers for it), while the run goes
        on to its end, kept in `detached` until then; a call refused before
        any reserve is answered with its refusal."""
        created: asyncio.Future[TaskView] = asyncio.get_running_loop().create_future()

        def reserved(run: str, reserved_ms: int) -> None:
            if not created.done():
                created.set_result(self.server.created_task(run, reserved_ms))

        self.state.reserved = reserved
        watcher = asyncio.ensure_future(self._watch())
        running = asyncio.ensure_future(self._outcome())
        self.detached.add(running)
        running.add_done_callback(self.detached.discard)
        try:
            either: set[asyncio.Future[Any]] = {created, running}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if created.done():
                answer = self.http.created(created.result())
                if answer is not None:
                    await respond(self.send, answer)
            else:
                await self._answer(running.result(), None)
        finally:
            watcher.cancel()

    async def _outcome(self) -> CallOutcome | None:
        try:
            return await self.server.outcome_of(self.http.call, self.state, self.admitted)
        except Exception as exc:  # noqa: BLE001 - a bug or a failing disk: nothing may escape
            return self.server.internal_failure(self.http.call, self.state, exc)

    async def _answer(self, outcome: CallOutcome | None, pumping: asyncio.Task[None] | None) -> None:
        cancelled = self.http.call.revision == LEGACY and self.state.cancelled
        if outcome is None or cancelled:
            # Cancelled: no JSON-RPC answer is sent for the request (if its run
            # started, it carried on to its end; its outcome is in its journal).
            if pumping is not None:
                pumping.cancel()
            if cancelled:  # a 2025-11-25 client still waits for its POST to end
                await respond(self.send, NOTHING_MORE)
            return
        try:
            answer = self.http.answer(outcome)
        except Exception as exc:  # noqa: BLE001 - the log is all that is left
            self.server.answer_failed(self.http.call, self.state, exc)
            answer = None
        if pumping is not None:
            pumping.cancel()
            while not self.outgoing.empty():
                await body_part(self.send, self.outgoing.get_nowait(), more=True)
            await body_part(self.send, answer if isinstance(answer, bytes) else b"", more=False)
        elif isinstance(answer, HttpResponse):
            await respond(self.send, answer)

    def _queue(self, chunk: bytes | None) -> None:
        if chunk is not None:
            self.outgoing.put_nowait(chunk)

    async def _pump(self) -> None:
        """Progress as it comes, and a keep-alive comment when none has for a while."""
        while True:
            chunk: bytes | None
            try:
                chunk = await asyncio.wait_for(self.outgoing.get(), KEEPALIVE_S)
            except TimeoutError:
                chunk = self.http.keepalive()
            if chunk is None:
                return
            await body_part(self.send, chunk, more=True)

    async def _watch(self) -> None:
        """The client closing the request: a 2026-07-28 call's cancellation
        (the run, if started, still carries on to its end)."""
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                break
        if self.http.call.revision != LEGACY:
            self.state.cancelled = True
        self.http.close()


async def read_body(receive: Receive, limit: int) -> bytes | HttpResponse | None:
    """The whole body; a 413 past `limit` (what is past it is never kept),
    a 408 if it is not whole in BODY_TIMEOUT_S, None if the client went away."""
    parts: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(BODY_TIMEOUT_S):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return None
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    return HttpResponse(413, (("content-type", "application/json"),),
                                        b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,'
                                        b'"message":"the message is larger than the limit; it '
                                        b'was not read"}}')
                parts.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(parts)
    except TimeoutError:
        return HttpResponse(408, (("connection", "close"),))


async def start(send: Send, response: HttpResponse) -> None:
    await send({"type": "http.response.start", "status": response.status,
                "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers]})


async def body_part(send: Send, data: bytes, more: bool) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": more})


async def respond(send: Send, response: HttpResponse) -> None:
    await start(send, response)
    await body_part(send, response.body, more=False)


# -- the HTTP server -------------------------------------------------------------------
