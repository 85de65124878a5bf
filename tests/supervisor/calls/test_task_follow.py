"""A listen stream follows a task (supervisor/calls/tasks.py `Tasks.follow`):
the task as it stood when the stream began, then each new way it stands as
its run reaches an answer in this process (`Tasks.changed`), until it ends;
never another caller's; and no longer once the server stops. The store is
the fake of test_tasks.py."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from staal.protocol.mcp.results import RunStatus
from tests.supervisor.calls.test_tasks import ENTRY, RUN, Caller, service, stand


def test_a_followed_task_is_told_working_then_completed_once_its_run_changes(monkeypatch):
    asyncio.run(_followed(monkeypatch))


async def _followed(monkeypatch):
    tasks = service([replace(ENTRY, caller="alice")], monkeypatch)
    waiting = asyncio.Event()

    class Watched(dict):
        def setdefault(self, key, default=None):  # it waits for the run's next answer
            waiting.set()
            return super().setdefault(key, default)

    tasks._changes = Watched()
    alice = Caller("alice")
    first = tasks.view(RUN, alice)
    assert first is not None
    told = []

    async def follow():
        async for view in tasks.follow(first, alice):
            told.append(view.status)
    following = asyncio.ensure_future(follow())
    await asyncio.wait_for(waiting.wait(), 30)
    assert told == ["working"]
    stand[RUN] = RunStatus(RUN, "done", result={"ok": True})
    tasks.changed(RUN)
    await asyncio.wait_for(following, 30)  # it ends with the task
    assert told == ["working", "completed"]


def test_a_task_no_longer_the_callers_or_a_stopping_server_ends_the_following(monkeypatch):
    asyncio.run(_ends(monkeypatch))


async def _ends(monkeypatch):
    tasks = service([replace(ENTRY, caller="alice")], monkeypatch)
    first = tasks.view(RUN, Caller("alice"))
    assert first is not None
    assert [v.status async for v in tasks.follow(first, Caller("bob"))] == ["working"]
    stopped = tasks.follow(first, Caller("alice"))
    assert (await anext(stopped)).status == "working"
    tasks.stopping.set()
    assert [v async for v in stopped] == []
