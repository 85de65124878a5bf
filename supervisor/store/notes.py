"""Where a run's waiting record, its log and its task's cancel are kept
(issues 15 and 28), behind one small interface the calls, recovery, status,
the console, the metrics and the resources use:

- `FileNotes` (the file store): `<journals>/waiting/<run>.json`, written
  once and fsync'd, `<run>.log.jsonl` beside the journal, appended and
  not fsync'd (for people, not authoritative), and `<run>.cancel.json`
  beside it, written once and fsync'd;
- `StoreNotes` (the PostgreSQL store): rows every instance reads
  (supervisor/store/postgres/note_rows.py), the record fenced as a journal append and
  naming a resolve command that works from any machine. The notify command
  is given a copy of the record on the disk of the instance that wrote it.

A cancel (DESIGN.md section 8, "Tasks") is durable before tasks/cancel is
acknowledged, and stays with the run: a run resumed (at start, by a
takeover) is resumed cancelled, and a run released before it started
answers as a cancelled task. It says only when; it is kept until the run's
files go (retention), on the shared store with its run's rows.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

import orjson

from staal.errors import RecordError
from staal.records.fsio import FS, write_durably
from staal.records.waiting import WaitingRecord, resolve_in_the_store, resolve_on_this_machine
from staal.runtime.clock import SYSTEM_CLOCK
from staal.supervisor.store.files import RunFiles, append_log, remove_inputs
from staal.supervisor.store.postgres.note_rows import NoteRows

# Every waiting record, by run; None for a file that holds none (damaged),
# whose run waits all the same.
AllWaiting = Mapping[str, WaitingRecord | None]


class RunNotes(Protocol):
    def waiting_record(self, tool: str, files: RunFiles, op: int, message: str) -> WaitingRecord:
        """The record of a run that stopped at `op`, waiting for an operator."""

    def resolve_hint(self, files: RunFiles, op: int | None) -> str:
        """The command an operator answers the op in doubt with (None: not known)."""

    def wait(self, files: RunFiles, record: WaitingRecord) -> Path | None:
        """Keep the run's waiting record; the file the notify command is
        given, or None if the run has one already (kept as first written).
        `Fenced` on a shared store if the run is not this instance's."""

    def waiting(self, files: RunFiles) -> WaitingRecord | None:
        """The run's waiting record (None: it waits for no one)."""

    def all_waiting(self) -> AllWaiting:
        """Every waiting record, by run."""

    def unwait(self, files: RunFiles) -> None:
        """The run waits no more: its record removed."""

    def log(self, files: RunFiles, lines: bytes) -> None:
        """Append lines (JSON, one a line) to the run's log."""

    def logged(self, files: RunFiles) -> list[dict[str, Any]]:
        """The run's log lines, in order (none if it has none)."""

    def end(self, files: RunFiles, lines: bytes) -> None:
        """The run is settled: its last log lines written, its kept arguments
        and waiting record removed."""

    def cancel(self, files: RunFiles) -> None:
        """Record, durably, that the run's task was cancelled (idempotent)."""

    def cancelled(self, files: RunFiles) -> bool:
        """Whether the run's task was cancelled."""

    def cancelled_among(self, runs: Collection[str]) -> frozenset[str]:
        """Those of `runs` (ids) whose tasks were cancelled."""

    def adopt(self, runs: Iterable[RunFiles]) -> None:
        """At start, before recovery: waiting records of these runs that an
        earlier version kept only as this instance's files, made the store's."""


def _time() -> int:
    return SYSTEM_CLOCK.now_ms()


class FileNotes:
    def __init__(self, journals: Path) -> None:
        self.journals = journals

    def waiting_record(self, tool: str, files: RunFiles, op: int, message: str) -> WaitingRecord:
        return WaitingRecord.in_files(files.run, tool, op, message, _time(), files.journal)

    def resolve_hint(self, files: RunFiles, op: int | None) -> str:
        return resolve_on_this_machine(files.journal, op)

    def wait(self, files: RunFiles, record: WaitingRecord) -> Path | None:
        return files.waiting if write_durably(files.waiting, record.to_file()) else None

    def waiting(self, files: RunFiles) -> WaitingRecord | None:
        """`RecordError` for a damaged record."""
        try:
            return WaitingRecord.from_file(files.waiting.read_bytes())
        except FileNotFoundError:
            return None

    def all_waiting(self) -> AllWaiting:
        found: dict[str, WaitingRecord | None] = {}
        for path in sorted((self.journals / "waiting").glob("*.json")):
            try:
                found[path.stem] = WaitingRecord.from_file(path.read_bytes())
            except FileNotFoundError:
                continue  # removed meanwhile
            except RecordError:
                found[path.stem] = None  # damaged, but the run still waits
        return found

    def unwait(self, files: RunFiles) -> None:
        _unlink(files.waiting)

    def log(self, files: RunFiles, lines: bytes) -> None:
        append_log(files, lines)

    def logged(self, files: RunFiles) -> list[dict[str, Any]]:
        try:
            return [orjson.loads(line) for line in files.log.read_bytes().splitlines()]
        except FileNotFoundError:
            return []

    def end(self, files: RunFiles, lines: bytes) -> None:
        if lines:
            self.log(files, lines)
        remove_inputs(files)
        self.unwait(files)

    def cancel(self, files: RunFiles) -> None:
        write_durably(files.cancel, _cancel_record(files.run))

    def cancelled(self, files: RunFiles) -> bool:
        return files.cancel.exists()

    def cancelled_among(self, runs: Collection[str]) -> frozenset[str]:
        return frozenset(run for run in runs
                         if any(self.journals.glob(f"*/{run[:2]}/{run}.cancel.json")))

    def adopt(self, runs: Iterable[RunFiles]) -> None:
        pass  # the files are the records


class StoreNotes:
    def __init__(self, rows: NoteRows) -> None:
        self.rows = rows

    def waiting_record(self, tool: str, files: RunFiles, op: int, message: str) -> WaitingRecord:
        return WaitingRecord.in_store(files.run, tool, op, message, _time(), self.rows.instance)

    def resolve_hint(self, files: RunFiles, op: int | None) -> str:
        return resolve_in_the_store(files.run, op)

    def wait(self, files: RunFiles, record: WaitingRecord) -> Path | None:
        if not self.rows.wait(files.run, record):
            return None
        _replace_copy(files, record)
        return files.waiting

    def waiting(self, files: RunFiles) -> WaitingRecord | None:
        return self.rows.waiting(files.run)

    def all_waiting(self) -> AllWaiting:
        return self.rows.all_waiting()

    def unwait(self, files: RunFiles) -> None:
        self.rows.unwait(files.run)
        _unlink(files.waiting)

    def log(self, files: RunFiles, lines: bytes) -> None:
        self.rows.log(files.run, _entries(lines))

    def logged(self, files: RunFiles) -> list[dict[str, Any]]:
        return self.rows.logged(files.run)

    def end(self, files: RunFiles, lines: bytes) -> None:
        remove_inputs(files)  # the worker's copy; the row goes in the same statement as the log
        self.rows.end(files.run, _entries(lines))
        _unlink(files.waiting)

    def cancel(self, files: RunFiles) -> None:
        self.rows.cancel(files.run, _time())

    def cancelled(self, files: RunFiles) -> bool:
        return bool(self.rows.cancelled([files.run]))

    def cancelled_among(self, runs: Collection[str]) -> frozenset[str]:
        return self.rows.cancelled(list(runs))

    def adopt(self, runs: Iterable[RunFiles]) -> None:
        """A record from before schema version 3 (a file naming its journal,
        not the instance that wrote it) becomes the run's row as it was
        first written, its resolve command the store's; the run resumed at
        start then stops again and notifies no one twice. A copy this
        class wrote names its instance and is left alone: its row may have
        been removed by an operator's answer since."""
        for files in runs:
            try:
                found = FileNotes(files.journals).waiting(files)
            except RecordError:
                continue  # damaged: the run stops again when resumed, and that is its record
            if found is None or found.instance is not None:
                continue
            record = found.moved_to_store(self.rows.instance)
            if self.rows.wait(files.run, record):
                _replace_copy(files, record)


def _replace_copy(files: RunFiles, record: WaitingRecord) -> None:
    """The notify command's copy of a row: one left by an earlier wait,
    answered since, is replaced."""
    _unlink(files.waiting)
    write_durably(files.waiting, record.to_file())


def _cancel_record(run: str) -> bytes:
    """A cancel's file: the run and when, for people; that it exists is the record."""
    return orjson.dumps({"run": run, "cancelled_ms": _time()})


def _entries(lines: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in lines.splitlines() if line]


def _unlink(path: Path) -> None:
    try:
        FS.unlink(path)
    except FileNotFoundError:
        pass
