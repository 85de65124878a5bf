"""The pool's own background work: tasks and timers it starts, each ended
when the pool closes, and a bug that ends one logged, not lost."""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Callable, Coroutine

from staal.supervisor.telemetry.log import Log


class Chores:
    def __init__(self, log: Log) -> None:
        self.log = log
        self.timers: set[asyncio.TimerHandle] = set()
        self.tasks: set[asyncio.Task[None]] = set()

    def task(self, work: Coroutine[object, object, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            error = task.exception()
            self.log("pool_failed", level="error", error=f"{type(error).__name__}: {error}",
                     traceback="".join(traceback.format_exception(error)))

    def later(self, delay: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        def fire() -> None:
            self.timers.discard(handle)
            callback()

        handle = asyncio.get_running_loop().call_later(delay, fire)
        self.timers.add(handle)
        return handle

    def cancel(self) -> None:
        for handle in self.timers:
            handle.cancel()
        for task in list(self.tasks):
            task.cancel()
