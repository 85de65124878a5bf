"""Two folds of the seed's seven durable steps, as experiments of
`benchmarks/server.py --experiment` (nothing in staal is edited; the
tracer's import hook applies them, in the benchmark's servers only).

They model what each fold costs and gains on the call's path; they are not
the folds themselves (no record kind, kill point or recovery rule changes),
so they measure and prove nothing about recovery: benchmarks/HISTORY.md's section
"Issue 12 item 3" says what each would do to the guarantees.

- `fold-arguments`: the kept arguments ride in the reserve's ledger event,
  so the arguments file's two fsyncs (file, directory) leave the path. The
  supervisor still writes the file, unsynced, because the worker reads its
  arguments from it; the event's extra bytes (one write already fsync'd)
  are not modelled.
- `journal-ahead`: an idle worker makes a file and its directory entry
  durable before any run is sent to it (a spare, in the experiment's own
  directory on the same disk), and the run's journal is then created
  without its directory's fsync: the header's fsync alone on the path.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

FOLDS = ("fold-arguments", "journal-ahead")
_SPARE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC


def install(experiments: tuple[str, ...], role: str, scratch: str | None) -> set[str]:
    """The modules to patch for the folds in `experiments`, in a process of
    `role` ("sup" or "zyg"); the zygote's workers make their spares in
    `scratch` after their fork."""
    wanted = set()
    if "fold-arguments" in experiments and role == "sup":
        wanted.add("staal.supervisor.calls.pipeline")
    if "journal-ahead" in experiments and role == "zyg":
        wanted.add("staal.records.appendlog")
        if scratch is not None:
            os.register_at_fork(after_in_child=lambda: _make_spare(Path(scratch)))
    return wanted


def patch(module: Any, experiments: tuple[str, ...]) -> None:
    if "fold-arguments" in experiments and module.__name__ == "staal.supervisor.calls.pipeline":
        module.write_inputs = _inputs_unsynced
    if "journal-ahead" in experiments and module.__name__ == "staal.records.appendlog":
        _create_without_dir_sync(module)


def _inputs_unsynced(files: Any, arguments: dict[str, Any]) -> None:
    import orjson

    fd = os.open(files.inputs, _SPARE_FLAGS, 0o600)
    try:
        os.write(fd, orjson.dumps(arguments))
    finally:
        os.close(fd)


def _make_spare(scratch: Path) -> None:
    # In the fresh worker, while it is idle (the pool forks ahead of demand):
    # the file and its directory entry the fold would prepare.
    fd = os.open(scratch / f"spare-{os.getpid()}", _SPARE_FLAGS, 0o600)
    os.close(fd)
    directory = os.open(scratch, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


class _SkipDir:
    """A syncer that leaves out one directory's fsync (the journal's folder)."""

    def __init__(self, inner: Any, skipped: Path) -> None:
        self.inner = inner
        self.skipped = skipped

    def sync_file(self, fd: int) -> None:
        self.inner.sync_file(fd)

    def sync_dir(self, path: Any) -> None:
        if Path(path) != self.skipped:
            self.inner.sync_dir(path)


def _create_without_dir_sync(module: Any) -> None:
    original = module.AppendLog.create.__func__

    def create(cls: Any, path: Any, syncer: Any = module.OS_SYNC, first: Any = None,
               created: Any = None) -> Any:
        if not str(path).endswith(".journal"):
            return original(cls, path, syncer, first, created)
        return original(cls, path, _SkipDir(syncer, Path(path).parent), first, created)

    module.AppendLog.create = classmethod(create)
