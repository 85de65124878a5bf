"""A journal's copy: a journal written whole, or appended to, by someone
other than the run's own writer (`JournalWriter`), in the same lines.

On the shared store the rows are the journal and each instance keeps a
copy on its disk for its workers and local readers
(supervisor/store/journals.py); `staal-supervisor resolve` checks an
answer with `staal resolve` on a private copy of the rows
(supervisor/recovery/resolve.py). A copy is not fsync'd: what it copies
is durable already, and a copy cut by a crash is written again from it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from staal.records.appendlog import line_of, read_log
from staal.records.fsio import FS, make_private_dir


def write_copy(path: Path, records: Iterable[Mapping[str, Any]], append: bool) -> None:
    """Write records, each a line as the journal's writer writes it:
    appended to the copy at `path`, or the whole copy replaced (written
    beside it, then renamed over it, so a reader never sees half)."""
    data = b"".join(line_of(record) for record in records)
    make_private_dir(path.parent)
    target = path if append else path.with_name(path.name + ".restoring")
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_APPEND if append else os.O_TRUNC)
    fd = FS.open(target, flags, 0o600)
    try:
        FS.write(fd, data)
    finally:
        os.close(fd)
    if not append:
        FS.replace(target, path)


def read_copy(path: Path) -> list[dict[str, Any]]:
    """The records of the journal (or copy) at `path` as stored, to compare
    with or commit as rows (none if there is no file); a torn last line is
    left out."""
    try:
        return list(read_log(path).records)
    except FileNotFoundError:
        return []
