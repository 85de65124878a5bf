"""Where the pool's ready workers meet the calls that want one
(supervisor/workers/pool.py keeps it supplied): a worker that comes ready goes to
the call waiting longest, else joins the idle line; a call takes the worker
idle longest, else waits a bounded time and gets `NoWorker` when none came.
Once the pool can give no more workers (its first zygote died, or it
closed), every call waiting and every one that comes after is told so with
`ZygoteGone`.
"""

from __future__ import annotations

import asyncio
import collections
import time

from staal.supervisor.workers.pool_states import NoWorker, Worker, WorkerState, ZygoteGone


class WorkerLine:
    def __init__(self) -> None:
        self.idle: collections.deque[Worker] = collections.deque()
        self.waiters: collections.deque[asyncio.Future[Worker]] = collections.deque()
        self.gone: ZygoteGone | None = None  # why no worker will come, once none will

    def offer(self, worker: Worker) -> None:
        """An idle worker to the call waiting longest, or to the idle line."""
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(worker)
                return
        self.idle.append(worker)

    def withdraw(self, worker: Worker) -> None:
        """A worker that died leaves the idle line, if it stood in it."""
        if worker in self.idle:
            self.idle.remove(worker)

    def close(self, gone: ZygoteGone) -> None:
        """No worker will come: every call waiting, and every later one, gets `gone`."""
        self.gone = gone
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_exception(gone)
        self.waiters.clear()

    async def take(self, wait_s: float) -> Worker:
        """The next idle worker, waiting at most `wait_s`: `NoWorker`, or
        `ZygoteGone` at once if none can come."""
        deadline = time.monotonic() + wait_s
        while True:
            worker = self.idle.popleft() if self.idle else await self._wait(deadline, wait_s)
            if worker.state is WorkerState.IDLE:
                return worker  # else it died on its way here: take the next

    async def _wait(self, deadline: float, wait_s: float) -> Worker:
        if self.gone is not None:
            raise self.gone
        waiter: asyncio.Future[Worker] = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        try:
            await asyncio.wait({waiter}, timeout=max(0.0, deadline - time.monotonic()))
        except asyncio.CancelledError:
            if waiter.done() and waiter.exception() is None:
                self.offer(waiter.result())  # handed over just as the call went away
            waiter.cancel()
            raise
        if not waiter.done():
            waiter.cancel()
            raise NoWorker(f"no worker was ready within {wait_s:g} s")
        return waiter.result()
