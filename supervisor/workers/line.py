"""Where the pool's ready workers meet the calls that want one
(supervisor/workers/pool.py keeps it supplied).

A worker is fresh (bound to no grant set: it may serve any) or bound, by
its first run, to one grant set (`Worker.key`), whose runs alone it serves
after. A call asks for its grant set's key: it takes the bound worker of
that set that rested last (so the workers in use stay warm and the rest age
out and retire), else the fresh worker idle longest, else waits a bounded
time and gets `NoWorker` when none came. A fresh worker that comes ready
goes to the call waiting longest, whatever its key; a bound one to the call
of its own key waiting longest, else it rests. A start-up check asks for no
key and takes only a fresh worker. Once the pool can give no more workers
(its first zygote died, or it closed), every call waiting and every one
that comes after is told so with `ZygoteGone`.
"""

from __future__ import annotations

import asyncio
import collections
import time

from staal.supervisor.workers.pool_states import NoWorker, Worker, WorkerState, ZygoteGone


class WorkerLine:
    def __init__(self) -> None:
        self.idle: collections.deque[Worker] = collections.deque()  # fresh, longest idle first
        self.resting: dict[str, list[Worker]] = {}  # bound, by key; the last to rest last
        self.waiters: collections.deque[tuple[str | None, asyncio.Future[Worker]]] = \
            collections.deque()
        self.gone: ZygoteGone | None = None  # why no worker will come, once none will

    def offer(self, worker: Worker) -> None:
        """An idle worker to the call waiting longest that it may serve, or
        to the idle workers."""
        for entry in self.waiters:
            key, waiter = entry
            if waiter.done():
                continue
            if worker.fresh or key == worker.key:
                self.waiters.remove(entry)
                waiter.set_result(worker)
                return
        if worker.fresh:
            self.idle.append(worker)
        else:
            self.resting.setdefault(worker.key or "", []).append(worker)
        self._prune()

    def _prune(self) -> None:
        while self.waiters and self.waiters[0][1].done():
            self.waiters.popleft()

    def withdraw(self, worker: Worker) -> None:
        """A worker that died, or retires, leaves the idle line, if it stood in it."""
        if worker in self.idle:
            self.idle.remove(worker)
        resting = self.resting.get(worker.key or "")
        if resting is not None and worker in resting:
            resting.remove(worker)
            if not resting:
                del self.resting[worker.key or ""]

    def bound_idle(self) -> list[Worker]:
        """Every bound worker at rest, the longest at rest first."""
        return sorted((w for ws in self.resting.values() for w in ws),
                      key=lambda w: w.idle_since)

    def close(self, gone: ZygoteGone) -> None:
        """No worker will come: every call waiting, and every later one, gets `gone`."""
        self.gone = gone
        for _, waiter in self.waiters:
            if not waiter.done():
                waiter.set_exception(gone)
        self.waiters.clear()

    async def take(self, key: str | None, wait_s: float) -> Worker:
        """The next idle worker that may serve a run of `key` (None: a fresh
        one only), waiting at most `wait_s`: `NoWorker`, or `ZygoteGone` at
        once if none can come."""
        deadline = time.monotonic() + wait_s
        while True:
            worker = self._idle_for(key) or await self._wait(key, deadline, wait_s)
            if worker.state is WorkerState.IDLE:
                return worker  # else it died on its way here: take the next

    def _idle_for(self, key: str | None) -> Worker | None:
        resting = self.resting.get(key) if key is not None else None
        if resting:
            worker = resting.pop()
            if not resting:
                del self.resting[key or ""]
            return worker
        return self.idle.popleft() if self.idle else None

    async def _wait(self, key: str | None, deadline: float, wait_s: float) -> Worker:
        if self.gone is not None:
            raise self.gone
        waiter: asyncio.Future[Worker] = asyncio.get_running_loop().create_future()
        self.waiters.append((key, waiter))
        try:
            await asyncio.wait({waiter}, timeout=max(0.0, deadline - time.monotonic()))
        except asyncio.CancelledError:
            if (waiter.done() and waiter.exception() is None
                    and waiter.result().state is WorkerState.IDLE):
                self.offer(waiter.result())  # handed over just as the call went away
            waiter.cancel()
            raise
        if not waiter.done():
            waiter.cancel()
            raise NoWorker(f"no worker was ready within {wait_s:g} s")
        return waiter.result()
