"""Where a run's files live under the journal directory, and writing the
ones the supervisor owns (seed 000 section 7).

    <journals>/server.ledger, server.lock
    <journals>/<tool>/<first two of run id>/<run id>.journal      (the worker writes it)
    <journals>/<tool>/<first two of run id>/<run id>.inputs.json  (kept while resumable)
    <journals>/<tool>/<first two of run id>/<run id>.log.jsonl
    <journals>/<tool>/<first two of run id>/<run id>.cancel.json   (its task was cancelled)
    <journals>/waiting/<run id>.json                               (a run waiting for an operator)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from staal.records import kept_arguments
from staal.records.fsio import FS, OS_SYNC, Syncer, make_private_dir
from staal.runtime.ids import is_run_id


@dataclass(frozen=True)
class RunFiles:
    """A run's paths, each made once: a call asks for them many times
    (the pipeline, the run message, the store), and joining paths is not free."""

    journals: Path
    tool: str
    run: str

    @cached_property
    def folder(self) -> Path:
        return self.journals / f"{self.tool}/{self.run[:2]}"  # one join: pathlib's are slow

    @cached_property
    def journal(self) -> Path:
        return self.folder / f"{self.run}.journal"

    @cached_property
    def inputs(self) -> Path:
        return self.folder / kept_arguments.file_name(self.run)

    @cached_property
    def log(self) -> Path:
        return self.folder / f"{self.run}.log.jsonl"

    @cached_property
    def cancel(self) -> Path:
        return self.folder / f"{self.run}.cancel.json"

    @cached_property
    def waiting(self) -> Path:
        return self.journals / f"waiting/{self.run}.json"


def find_journals(journals: Path) -> dict[str, tuple[str, Path]]:
    """Every journal under `journals`: run id -> (tool, path)."""
    found: dict[str, tuple[str, Path]] = {}
    if not journals.is_dir():
        return found
    for tool_dir in sorted(p for p in journals.iterdir() if p.is_dir() and p.name != "waiting"):
        for path in sorted(tool_dir.glob("??/*.journal")):
            run = path.stem
            if is_run_id(run) and path.parent.name == run[:2]:
                found[run] = (tool_dir.name, path)
    return found


def write_inputs(files: RunFiles, arguments: Mapping[str, Any]) -> None:
    kept_arguments.keep(files.inputs, arguments)


def remove_inputs(files: RunFiles) -> None:
    try:
        FS.unlink(files.inputs)
    except FileNotFoundError:
        pass


def append_log(files: RunFiles, line: bytes) -> None:
    """A run's own log: for people, not authoritative, so not fsync'd."""
    make_private_dir(files.folder)
    fd = FS.open(files.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        FS.write(fd, line)
    finally:
        os.close(fd)


def make_run_folders(journals: Path, tools: list[str], syncer: Syncer = OS_SYNC) -> None:
    """Every `<tool>/<xx>` folder a run id can name, made once at start, so
    no call pays for a new directory (and its parent's fsync)."""
    for tool in tools:
        base = make_private_dir(journals / tool, syncer)
        made = False
        for first in range(256):
            folder = base / f"{first:02x}"
            if not folder.is_dir():
                FS.mkdir(folder, 0o700)
                os.chmod(folder, 0o700)
                made = True
        if made:
            syncer.sync_dir(base)
