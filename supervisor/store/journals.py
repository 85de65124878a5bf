"""Where the supervisor's runs' journals are durable (issue 15), behind one
small interface the calls, the outcomes and recovery use:

- `FileJournals` (the file store): each worker writes its run's journal file
  itself, fsync'd; the supervisor reads the files.
- `StoreJournals` (the PostgreSQL store): each record a worker sends is
  committed as a row, fenced (supervisor/store/postgres/journal_rows.py), before the
  worker is answered; the supervisor then appends it to the run's journal
  file on this instance's disk, a copy of the rows the worker reads to
  resume and the local readers (`staal journal show`, the console) read.
  The rows are the truth: a copy a crash left behind is rewritten from them
  before recovery, and a repeated call is answered from them on any
  instance.

A run's kept arguments are removed at its end with its log and waiting
record (supervisor/store/notes.py `end`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

from staal.journal.copies import read_copy, write_copy
from staal.journal.reader import JournalState, read_journal
from staal.journal.records import JOURNAL
from staal.journal.writer import JournalWriter
from staal.supervisor.errors import SupervisorError
from staal.supervisor.store.files import RunFiles, write_inputs
from staal.supervisor.store.postgres.journal_rows import JournalRows

Sink = Literal["file", "supervisor"]


class CopyFailed(SupervisorError):
    """A committed record's local copy could not be written."""

    kind = "journal_copy"


class RunJournals(Protocol):
    # What the worker's Run message says its sink is.
    sink: Sink

    def append(self, files: RunFiles, record: dict[str, Any]) -> None:
        """Make one record of a run this instance serves durable (`Fenced`
        if the run is not its own any more)."""

    def read(self, files: RunFiles) -> JournalState | None:
        """The run's journal (None: it has none)."""

    def reopen(self, files: RunFiles) -> Callable[[], JournalWriter] | None:
        """The writer the supervisor appends its own last word with (None:
        the journal file)."""

    def keep_inputs(self, files: RunFiles, arguments: dict[str, Any]) -> None:
        """Keep a new run's arguments durably (step 6a), with a local copy
        for its worker."""

    def restore(self, runs: Iterable[RunFiles]) -> None:
        """Make the local copies of these runs' journals and kept arguments
        whole, before recovery reads them."""

    def take_over(self, now_ms: int, held: Collection[str] = ()) -> list[tuple[RunFiles, str]]:
        """The unfinished runs of instances whose leases expired before
        `now_ms`, but for `held` (runs something in this process still
        runs: taken from it while it was paused, and taken back only once
        let go), made this instance's and their local copies restored;
        each with the instance it was taken from."""

    def close(self) -> None: ...


class FileJournals:
    sink: Sink = "file"

    def append(self, files: RunFiles, record: dict[str, Any]) -> None:
        raise AssertionError("on the file store the worker writes its journal itself")

    def read(self, files: RunFiles) -> JournalState | None:
        try:
            return read_journal(files.journal)
        except FileNotFoundError:
            return None

    def reopen(self, files: RunFiles) -> Callable[[], JournalWriter] | None:
        return None

    def keep_inputs(self, files: RunFiles, arguments: dict[str, Any]) -> None:
        write_inputs(files, arguments)

    def restore(self, runs: Iterable[RunFiles]) -> None:
        pass

    def take_over(self, now_ms: int, held: Collection[str] = ()) -> list[tuple[RunFiles, str]]:
        return []  # one server owns every run of the file store

    def close(self) -> None:
        pass


FILE_JOURNALS = FileJournals()


class StoreJournals:
    sink: Sink = "supervisor"

    def __init__(self, rows: JournalRows, journals: Path) -> None:
        self.rows = rows
        self.journals = journals  # this instance's journal directory

    def append(self, files: RunFiles, record: dict[str, Any]) -> None:
        self.rows.append(files.run, record)
        try:
            write_copy(files.journal, (record,), append=True)
        except OSError as exc:
            # Durable, but the worker resumes from the copy: the run stops
            # here and is resumed from its rows at the next start.
            raise CopyFailed(f"run {files.run}: the record is committed, but its copy "
                             f"{files.journal} could not be written: {exc}") from None

    def read(self, files: RunFiles) -> JournalState | None:
        return self.rows.read(files.run)

    def reopen(self, files: RunFiles) -> Callable[[], JournalWriter] | None:
        return lambda: JournalWriter(_SupervisorSink(self, files))

    def keep_inputs(self, files: RunFiles, arguments: dict[str, Any]) -> None:
        self.rows.keep_inputs(files.run, arguments)
        write_inputs(files, arguments)  # the worker's copy; durable already as a row

    def restore(self, runs: Iterable[RunFiles]) -> None:
        """Each copy made whole from the rows. A copy holding every row and
        more is one an operator answered with `staal resolve` on this
        machine while the run waited (the supervisor copies a record only
        after its commit): those records are committed first, so the
        answer is the store's too."""
        for files in runs:
            rows = self.rows.records(files.run)
            local = read_copy(files.journal)
            if [JOURNAL.decode(r) for r in local[:len(rows)]] == [JOURNAL.decode(r) for r in rows]:
                for record in local[len(rows):]:
                    self.rows.append(files.run, record)
                rows = rows + local[len(rows):]
            if rows and local != rows:
                write_copy(files.journal, rows, append=False)
            arguments = self.rows.inputs(files.run)
            if arguments is not None and not files.inputs.exists():
                write_inputs(files, arguments)

    def take_over(self, now_ms: int, held: Collection[str] = ()) -> list[tuple[RunFiles, str]]:
        taken = [(RunFiles(self.journals, tool, run), dead)
                 for run, tool, dead in self.rows.take_over(now_ms, held)]
        self.restore(files for files, _ in taken)
        return taken

    def close(self) -> None:
        self.rows.close()


class _SupervisorSink:
    """The supervisor's own appends (a run given up after its workers died)."""

    def __init__(self, journals: StoreJournals, files: RunFiles) -> None:
        self._journals = journals
        self._files = files
        self.path = files.journal

    def append(self, record: Mapping[str, Any], sync: bool = True) -> None:
        self._journals.append(self._files, dict(record))

    def close(self) -> None:
        pass

