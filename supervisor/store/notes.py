"""Where a run's waiting record and its log are kept (issue 15), behind one
small interface the calls, recovery, status, the console, the metrics and
the resources use:

- `FileNotes` (the file store): `<journals>/waiting/<run>.json`, written
  once and fsync'd, and `<run>.log.jsonl` beside the journal, appended and
  not fsync'd (for people, not authoritative);
- `StoreNotes` (the PostgreSQL store): rows every instance reads
  (supervisor/store/postgres/note_rows.py), the record fenced as a journal append and
  naming a resolve command that works from any machine. The notify command
  is given a copy of the record on the disk of the instance that wrote it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

import orjson

from staal.records.fsio import FS
from staal.runtime.clock import SYSTEM_CLOCK
from staal.supervisor.store.files import RunFiles, append_log, remove_inputs, write_durably
from staal.supervisor.store.postgres.note_rows import NoteRows


class RunNotes(Protocol):
    def waiting_record(self, tool: str, files: RunFiles, op: int, message: str) -> dict[str, Any]:
        """The record of a run that stopped at `op`, waiting for an operator."""

    def resolve_hint(self, files: RunFiles, op: int | None) -> str:
        """The command an operator answers the op in doubt with (None: not known)."""

    def wait(self, files: RunFiles, record: dict[str, Any]) -> Path | None:
        """Keep the run's waiting record; the file the notify command is
        given, or None if the run has one already (kept as first written).
        `Fenced` on a shared store if the run is not this instance's."""

    def waiting(self, files: RunFiles) -> dict[str, Any] | None:
        """The run's waiting record (None: it waits for no one)."""

    def all_waiting(self) -> dict[str, dict[str, Any]]:
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

    def adopt(self, runs: Iterable[RunFiles]) -> None:
        """At start, before recovery: waiting records of these runs that an
        earlier version kept only as this instance's files, made the store's."""


def _time() -> int:
    return SYSTEM_CLOCK.now_ms()


class FileNotes:
    def __init__(self, journals: Path) -> None:
        self.journals = journals

    def waiting_record(self, tool: str, files: RunFiles, op: int, message: str) -> dict[str, Any]:
        return {"run": files.run, "tool": tool, "op": op, "message": message,
                "journal": str(files.journal), "time": _time(),
                "resolve": self.resolve_hint(files, op)}

    def resolve_hint(self, files: RunFiles, op: int | None) -> str:
        said = "N" if op is None else str(op)
        return (f"staal resolve --journal {files.journal} --op {said} --happened yes "
                "--result JSON   (or --happened no)")

    def wait(self, files: RunFiles, record: dict[str, Any]) -> Path | None:
        return files.waiting if write_durably(files.waiting, _encoded(record)) else None

    def waiting(self, files: RunFiles) -> dict[str, Any] | None:
        try:
            record: dict[str, Any] = orjson.loads(files.waiting.read_bytes())
        except FileNotFoundError:
            return None
        return record

    def all_waiting(self) -> dict[str, dict[str, Any]]:
        found = {}
        for path in sorted((self.journals / "waiting").glob("*.json")):
            try:
                found[path.stem] = orjson.loads(path.read_bytes())
            except FileNotFoundError:
                continue  # removed meanwhile
            except orjson.JSONDecodeError:
                found[path.stem] = {}  # damaged, but the run still waits
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

    def adopt(self, runs: Iterable[RunFiles]) -> None:
        pass  # the files are the records


class StoreNotes:
    def __init__(self, rows: NoteRows) -> None:
        self.rows = rows

    def waiting_record(self, tool: str, files: RunFiles, op: int, message: str) -> dict[str, Any]:
        # No path of this host: the record is read, and answered, from any machine.
        return {"run": files.run, "tool": tool, "op": op, "message": message,
                "instance": self.rows.instance, "time": _time(),
                "resolve": self.resolve_hint(files, op)}

    def resolve_hint(self, files: RunFiles, op: int | None) -> str:
        return store_resolve_hint(files.run, op)

    def wait(self, files: RunFiles, record: dict[str, Any]) -> Path | None:
        if not self.rows.wait(files.run, record):
            return None
        _replace_copy(files, record)
        return files.waiting

    def waiting(self, files: RunFiles) -> dict[str, Any] | None:
        return self.rows.waiting(files.run)

    def all_waiting(self) -> dict[str, dict[str, Any]]:
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
            except orjson.JSONDecodeError:
                continue  # damaged: the run stops again when resumed, and that is its record
            if found is None or "instance" in found:
                continue
            record = {key: value for key, value in found.items() if key != "journal"}
            record.update(instance=self.rows.instance,
                          resolve=self.resolve_hint(files, record.get("op")))
            if self.rows.wait(files.run, record):
                _replace_copy(files, record)


def store_resolve_hint(run: str, op: int | None) -> str:
    """The answer on a shared store, from any machine with the DSN."""
    said = "N" if op is None else str(op)
    return (f"staal-supervisor resolve MANIFEST --run {run} --op {said} --happened yes "
            "--result JSON   (or --happened no)")


def _encoded(record: dict[str, Any]) -> bytes:
    return orjson.dumps(record, option=orjson.OPT_INDENT_2)


def _replace_copy(files: RunFiles, record: dict[str, Any]) -> None:
    """The notify command's copy of a row: one left by an earlier wait,
    answered since, is replaced."""
    _unlink(files.waiting)
    write_durably(files.waiting, _encoded(record))


def _entries(lines: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in lines.splitlines() if line]


def _unlink(path: Path) -> None:
    try:
        FS.unlink(path)
    except FileNotFoundError:
        pass
