"""supervisor/calls/run_crashes.py: a worker's journal record the store
refuses cuts its run off, and the refusal goes back to the worker as data
with its kind (`fenced`, `store`), never as a bare string."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from staal.records.messages import JournalAppend
from staal.supervisor.calls.run_crashes import RunCrashes
from staal.supervisor.store.files import RunFiles
from staal.supervisor.store.postgres.ledger import Fenced
from staal.supervisor.workers.pool_states import RecordRefused

RUN = "cd" * 16


class RefusingJournals:
    def append(self, files: RunFiles, record: Any) -> None:
        raise Fenced(f"run {files.run} is owned by another instance")


class RecordingJournals:
    def __init__(self) -> None:
        self.appended: list[Any] = []

    def append(self, files: RunFiles, record: Any) -> None:
        self.appended.append(record)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, event: str, level: str = "info", **fields: Any) -> None:
        self.events.append((event, fields))


def crashes(journals: Any, log: Recorder) -> RunCrashes:
    async def execute(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("nothing is executed here")

    return RunCrashes(manifest=None, log=log, run_journals=journals, execute=execute)  # type: ignore[arg-type]


def test_a_refused_record_comes_back_with_its_kind_and_cuts_the_run_off(tmp_path: Path):
    log = Recorder()
    journals = RefusingJournals()
    part = crashes(journals, log)
    files = RunFiles(tmp_path, "refund_order", RUN)
    refused = asyncio.run(part.commit_record(files, JournalAppend(run=RUN, record={"type": "x"})))
    assert refused == RecordRefused("fenced", f"run {RUN} is owned by another instance")
    assert part.cut_off == {RUN: f"run {RUN} is owned by another instance"}
    assert [(e, f["kind"]) for e, f in log.events] == [("journal_refused", "fenced")]


def test_a_record_naming_another_run_is_refused_as_the_wrong_run_and_nothing_is_written(
        tmp_path: Path):
    journals = RecordingJournals()
    part = crashes(journals, Recorder())
    files = RunFiles(tmp_path, "refund_order", RUN)
    other = "ef" * 16
    refused = asyncio.run(part.commit_record(files, JournalAppend(run=other, record={})))
    assert refused is not None and refused.kind == "wrong_run" and other in refused.message
    assert part.cut_off == {}
    assert journals.appended == []  # the store was never asked to write it
