"""Blocking work off the event loop: what `asyncio.to_thread` promises, in
threads of the call path's own."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from staal.supervisor.calls.off_loop import OffLoop

WAIT_S = 30.0
seen: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="unset")


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, WAIT_S))


def test_the_function_s_result_is_returned_and_its_error_raised_in_the_caller():
    def fails():
        raise KeyError("no such run")

    async def main():
        off = OffLoop()
        assert await off(lambda a, b: a + b, 2, 3) == 5
        with pytest.raises(KeyError, match="no such run"):
            await off(fails)

    run(main())


def test_the_function_runs_in_a_copy_of_the_caller_s_context():
    def reads_and_sets():
        was = seen.get()
        seen.set("in the thread")
        return was, threading.current_thread() is not threading.main_thread()

    async def main():
        seen.set("the caller's")
        assert await OffLoop()(reads_and_sets) == ("the caller's", True)
        assert seen.get() == "the caller's"  # what the function set stays in its copy

    run(main())


def test_calls_one_after_another_use_one_thread():
    async def main():
        off = OffLoop()
        names = {await off(lambda: threading.current_thread().name) for _ in range(20)}
        assert (len(names), off.threads) == (1, 1)

    run(main())


def test_jobs_run_at_once_up_to_the_limit_and_the_rest_wait_for_a_thread():
    release = threading.Event()
    started = threading.Semaphore(0)

    def blocks(i: int) -> int:
        started.release()
        assert release.wait(WAIT_S)
        return i

    async def main():
        off = OffLoop(limit=2)
        jobs = [asyncio.ensure_future(off(blocks, i)) for i in range(3)]
        loop = asyncio.get_running_loop()
        for _ in range(2):  # two run at once...
            assert await loop.run_in_executor(None, started.acquire, True, WAIT_S)
        assert off.threads == 2 and not any(job.done() for job in jobs)
        release.set()  # ...and the third runs once one is free
        assert await asyncio.gather(*jobs) == [0, 1, 2]
        assert off.threads == 2

    run(main())


def test_a_cancelled_caller_leaves_its_function_to_finish_and_the_next_job_runs():
    release = threading.Event()
    finished = threading.Event()

    def blocks():
        assert release.wait(WAIT_S)
        finished.set()

    async def main():
        off = OffLoop(limit=1)
        job = asyncio.ensure_future(off(blocks))
        await asyncio.sleep(0)
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job
        release.set()
        assert await off(lambda: "next") == "next"  # after the cancelled one, in the one thread
        assert finished.is_set()

    run(main())
