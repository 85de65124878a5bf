"""Two fsyncs that need not be in series, issued together (issue 26 item 4),
as experiments of `benchmarks/server.py --experiment` (nothing in staal is
edited; the tracer's import hook applies them, in the benchmark's servers
only). Models of the cost and the gain on a call's path, like folds.py's:
they measure, and prove nothing about recovery (BENCHMARKS.md, "Fsyncs in
parallel", says what each would do to the durable steps).

- `file-dir-together`: a new durable file and its directory, each fsync'd
  on its own thread at once, where staal syncs the file and then the
  directory: the arguments file (`write_durably`, in the supervisor) and
  the journal's creation (`AppendLog.create`, in the worker; a helper
  thread started in each worker at its first use, as a worker would).
- `reserve-beside-arguments`: the reserve event's ledger fsync on a helper
  thread while the call's thread writes and syncs the arguments file and
  its directory, where `Calls._reserve_and_keep` makes the reserve durable
  first. The run id is chosen before the reserve (the ledger's own
  `new_reserve` is handed it), and an arguments file whose reserve did not
  reserve (a once key found, over quota) is removed.
- `fsyncs-together`: both.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

PAIRS = ("file-dir-together", "reserve-beside-arguments", "fsyncs-together")
_pool: tuple[int, ThreadPoolExecutor] | None = None
_pool_lock = threading.Lock()


def install(experiments: tuple[str, ...], role: str) -> set[str]:
    """The modules to patch for the experiments in `experiments`, in a
    process of `role` ("sup" or "zyg": the workers are the zygote's forks)."""
    files = "file-dir-together" in experiments or "fsyncs-together" in experiments
    reserve = "reserve-beside-arguments" in experiments or "fsyncs-together" in experiments
    wanted = set()
    if files and role == "sup":
        wanted.add("staal.records.kept_arguments")
    if files and role == "zyg":
        wanted.add("staal.records.appendlog")
    if reserve and role == "sup":
        wanted.add("staal.supervisor.calls.pipeline")
    return wanted


def patch(module: Any, experiments: tuple[str, ...]) -> None:
    if not set(experiments) & set(PAIRS):
        return
    if module.__name__ == "staal.records.kept_arguments":
        module.write_durably = _write_durably_together
    elif module.__name__ == "staal.records.appendlog":
        _create_together(module)
    elif module.__name__ == "staal.supervisor.calls.pipeline":
        _reserve_beside_arguments(module)


def _helper() -> ThreadPoolExecutor:
    """This process's helper threads, made at first use (a fork's child
    gets its own: threads do not survive a fork)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(max_workers=16))
        return _pool[1]


def together(first: Callable[[], None], second: Callable[[], None]) -> None:
    """`second` on a helper thread while this one does `first`; both done
    (or the first failure raised) on return."""
    other = _helper().submit(second)
    try:
        first()
    finally:
        other.result()


def file_and_folder(syncer: Any, fd: int, folder: Any) -> None:
    """`fd` and its folder fsync'd together. The folder is opened on this
    thread: a worker's tripwire lets only the thread inside its broker
    section open a path (a helper thread's open would be refused)."""
    dirfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        together(lambda: syncer.sync_file(fd), lambda: os.fsync(dirfd))
    finally:
        os.close(dirfd)


def _write_durably_together(path: Any, data: bytes, syncer: Any = None) -> bool:
    from staal.records.fsio import FS, OS_SYNC, make_private_dir

    syncer = syncer or OS_SYNC
    make_private_dir(path.parent, syncer)
    try:
        fd = FS.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return False
    try:
        os.fchmod(fd, 0o600)
        FS.write(fd, data)
        file_and_folder(syncer, fd, path.parent)
    finally:
        os.close(fd)
    return True


def _create_together(module: Any) -> None:
    from staal.errors import LogExists
    from staal.records.fsio import FS, make_private_dir

    appendlog = module.AppendLog
    original = appendlog.create.__func__

    def create(cls: Any, path: Any, syncer: Any = module.OS_SYNC, first: Any = None,
               created: Any = None) -> Any:
        if not str(path).endswith(".journal"):
            return original(cls, path, syncer, first, created)
        from pathlib import Path

        target = Path(path)
        make_private_dir(target.parent, syncer)
        try:
            fd = FS.open(target, module._CREATE_FLAGS, module.LOG_FILE_MODE)
        except FileExistsError:
            raise LogExists(f"{target} already exists") from None
        try:
            os.fchmod(fd, module.LOG_FILE_MODE)
            if created is not None:
                created()
            if first is not None:
                FS.write(fd, module.line_of(first))
            file_and_folder(syncer, fd, target.parent)
        except BaseException:
            os.close(fd)
            raise
        return cls(target, fd, syncer)

    appendlog.create = classmethod(create)


def _reserve_beside_arguments(module: Any) -> None:
    from staal.runtime.ids import new_run_id
    from staal.runtime.killpoints import kill_point
    from staal.supervisor.calls.tool_runtime import money_held
    from staal.supervisor.store import file_ledger
    from staal.supervisor.store.entries import Reserved

    chosen = threading.local()
    new_reserve = file_ledger.new_reserve

    def new_reserve_named(*args: Any, **kwargs: Any) -> Any:
        event = new_reserve(*args, **kwargs)
        run = getattr(chosen, "run", None)
        return event if run is None else dataclasses.replace(event, run=run)

    file_ledger.new_reserve = new_reserve_named

    def _reserve_and_keep(self: Any, runtime: Any, once: Any, arguments: Any, state: Any,
                          admission: Any) -> Any:
        tool = runtime.tool
        files = self.files(tool.name, new_run_id())

        def reserve() -> Any:
            chosen.run = files.run
            try:
                with self.in_flight.reserving() as hold:
                    result = self.ledger.reserve_call(tool.name, tool.quota, 1,
                                                      money_held(runtime, admission), once,
                                                      admission)
                    if isinstance(result, Reserved):
                        hold(result.run)
                        state.run = result.run
                    return result
            finally:
                chosen.run = None

        reserving = _helper().submit(reserve)
        try:
            self.run_journals.keep_inputs(files, arguments)
        finally:
            result = reserving.result()
        if not isinstance(result, Reserved):
            os.unlink(files.inputs)  # no run: its arguments go (a model, unsynced)
            return result
        kill_point("supervisor", "reserve")
        kill_point("supervisor", "inputs")
        return result

    module.Calls._reserve_and_keep = _reserve_and_keep
