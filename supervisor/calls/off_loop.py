"""The call path's blocking work (the reserve, the arguments file, the
settle: each waits for an fsync) run off the event loop, in threads of its
own, for less than `asyncio.to_thread` costs.

`to_thread` goes through `ThreadPoolExecutor`: a `concurrent.futures.Future`
with its own condition variable, a work item, a semaphore (in Python) to
find an idle thread, and a second future on the loop chained to the first.
Every call of a tool crosses to a thread twice, and on a 2-core machine that
machinery was a fifth of the supervisor's Python per call. Here a job is a
tuple on a `SimpleQueue`; its thread hands the result straight to the
loop's future. What `to_thread` promises stays: the function runs in a copy
of the caller's context (contextvars), its exception is raised in the
caller, and cancelling the caller leaves the function to finish in its
thread (blocking work cannot be interrupted), its result dropped.

Threads are started as jobs find none idle, up to `limit`; past it, jobs
wait in the queue for the first thread free. Jobs that wait on each other
through the ledger's group commit (a follower waits for its leader's
fsync) never deadlock: a leader never waits for a follower. The threads are
daemons, idle between jobs: the server answers every call before it exits,
so none is left running then.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T")
# The default executor's bound (asyncio's: min(32, cores + 4)).
LIMIT = min(32, (os.cpu_count() or 1) + 4)

_Job = tuple[contextvars.Context, Callable[..., Any], tuple[Any, ...],
             asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


class OffLoop:
    """Runs blocking functions in threads of its own: `await off_loop(f, *args)`."""

    def __init__(self, limit: int = LIMIT, name: str = "staal-blocking") -> None:
        self.limit = limit
        self.name = name
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0

    async def __call__(self, function: Callable[..., _T], *args: Any) -> _T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_T] = loop.create_future()
        with self._lock:
            # `_idle` counts threads waiting for a job, less the jobs already
            # promised to them; below zero, jobs wait for the first thread free.
            if self._idle <= 0 and self._threads < self.limit:
                self._threads += 1  # a new thread, which takes this job
                threading.Thread(target=self._serve, name=f"{self.name}_{self._threads}",
                                 daemon=True).start()
            else:
                self._idle -= 1
        self._jobs.put((contextvars.copy_context(), function, args, loop, future))
        return await future

    @property
    def threads(self) -> int:
        return self._threads

    def _serve(self) -> None:
        while True:
            context, function, args, loop, future = self._jobs.get()
            result, error = None, None
            try:
                result = context.run(function, *args)
            except BaseException as exc:  # noqa: BLE001 - raised in the caller, as to_thread does
                error = exc
            # Idle before the caller hears: its next job then finds this thread.
            with self._lock:
                self._idle += 1
            _hand_over(loop, future, result, error)
            del context, function, args, loop, future, result, error  # nothing kept while idle


def _hand_over(loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], result: Any,
               error: BaseException | None) -> None:
    try:
        loop.call_soon_threadsafe(_settle, future, result, error)
    except RuntimeError:
        pass  # the loop is closed: nobody waits for this any more


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return  # its caller was cancelled; the work is done all the same
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


# The process's own, as the loop's default executor is: threads are made as
# jobs need them, so a process that never calls makes none.
off_loop = OffLoop()
