"""The step counter of the process that executes one run (DESIGN.md
section 4, "Limits"): `max_steps` counts line events in the program's own
frames and fails the run as `budget` when they run out. The C counter
(`staal.worker._steps`) does the counting when it was built; a Python tracer
stands in for it otherwise, several times slower."""

from __future__ import annotations

import functools
import itertools
import operator
import os
import sys
import sysconfig
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from staal.program import RunFailed

if TYPE_CHECKING:
    from staal.worker._steps import Counter


def _c_counter() -> tuple[type[Counter] | None, int, str]:
    """The C step counter and its largest budget, or why it is missing."""
    try:
        from staal.worker._steps import MAX_STEPS, Counter
    except ImportError as exc:  # built without a compiler: the Python tracer only
        return None, 0, str(exc)
    return Counter, MAX_STEPS, ""



_C_COUNTER, _C_MAX_STEPS, _STEPS_MISSING = _c_counter()
#: Whether the C step counter was built; StepCounter uses it by default.
C_STEP_COUNTER = _C_COUNTER is not None

__all__ = ["C_STEP_COUNTER", "StepCounter"]

_TraceFunction = Callable[[FrameType, str, Any], Any]


class StepCounter:
    """Counts `line` trace events in frames of the program's own code and
    fails the run as `budget` when the count passes `max_steps`.

    Two implementations count the same events. The C one (`implementation=
    "c"`, the default when the extension `staal.worker._steps` was built) is
    a C trace function installed with `PyEval_SetTrace`, as coverage.py's
    CTracer is; the Python one (`"python"`, the fallback) is a `sys.settrace`
    function, several times slower on a tight loop because every traced event
    costs a Python call.

    A frame is the program's when its file lies under `program_root`, the
    folder of the program file, and not under the standard library,
    site-packages or staal's own packages. Everything else (staal, the stdlib,
    installed packages, code compiled from strings) runs uncounted, though
    slower: tracing is on for the whole thread. "Its file" is the code's
    `co_filename` for the C implementation (decided once per file name) and
    the module's `__file__` (the frame's globals) for the Python one, which
    avoids `frame.f_code` because reading it raises an audit event, and would
    run the confinement tripwire's hook on every call. The two differ only in
    corners: code compiled from strings into a program module's globals
    (`exec(source, globals())`, the methods dataclasses generate) is counted
    by the Python implementation and not by the C one; the C one also counts
    lines of program frames that were already running at `start()`, and
    after `sys.settrace(sys.gettrace())` in program code misses the rest of
    that one line.

    `start()` traces the current thread and, through `threading.settrace`,
    threads started afterwards; `stop()` ends it and puts back the trace
    functions that were there (other threads detach at their next line or
    call). The N+1st line event, with N = `max_steps`, raises
    `RunFailed("budget", ...)` in the traced frame and removes tracing from
    that thread (Python does so for a Python trace function; the C one does
    it to match), and the program could catch the exception (it is a
    `RunEnded`, not an `Exception`); the engine must therefore fail the run
    whenever `exceeded` is true, however the program ended. Counting relies on
    the GIL, so the count is exact across threads.

    A program can escape counting on purpose (`sys.settrace(None)`, code
    compiled from strings); `cpu_backstop` is the limit it cannot escape.
    """

    def __init__(self, max_steps: int, program_root: Path | str, *,
                 implementation: str | None = None) -> None:
        if max_steps < 0:
            raise ValueError(f"max_steps must not be negative, not {max_steps}")
        if implementation is None:
            implementation = "c" if _C_COUNTER is not None else "python"
        if implementation not in ("c", "python"):
            raise ValueError(f"implementation must be 'c' or 'python', not {implementation!r}")
        counter_class = _C_COUNTER if implementation == "c" else None
        if implementation == "c" and counter_class is None:
            raise RuntimeError(f"the C step counter is not available: {_STEPS_MISSING}")
        self.max_steps = max_steps
        self.implementation = implementation
        self.program_root = Path(os.path.realpath(program_root))
        self._excluded = _excluded_dirs(self.program_root)
        self._running = False
        self._saved: tuple[Any, Any] = (None, None)
        self._counter: Counter | None = None
        if counter_class is not None:
            self._counter = counter_class(min(max_steps, _C_MAX_STEPS),
                                          self._counts_file, self._failure)
            return
        # One item per allowed line event; `next()` on it neither allocates
        # nor (being C) lets another thread in between.
        self._budget: Iterator[None] = itertools.repeat(None, max_steps)
        self._over = 0
        # module file -> the local trace function, or None for "not counted"
        self._decisions: dict[object, _TraceFunction | None] = {}
        self._global_trace, self._switch = self._make_tracers()

    # ------------------------------------------------------------ public

    @property
    def steps(self) -> int:
        """Line events counted so far (max_steps + 1 once exceeded)."""
        if self._counter is not None:
            return self._counter.steps
        return self.max_steps - operator.length_hint(self._budget) + self._over

    @property
    def exceeded(self) -> bool:
        """Whether the budget was exceeded, even if the program caught it."""
        if self._counter is not None:
            return self._counter.exceeded
        return self._over > 0

    @property
    def running(self) -> bool:
        return self._running

    def start(self) -> None:
        """Trace the current thread and every thread started from now on."""
        if self._running:
            raise RuntimeError("the step counter is already running")
        if self._counter is not None:
            previous_threading = threading.gettrace()
            self._counter.start()  # saves this thread's tracer, C or Python
            self._saved = (None, previous_threading)
            self._running = True
            # A new thread calls the counter as a Python trace function once;
            # it then installs itself there as the C one.
            threading.settrace(self._counter)
            return
        self._saved = (sys.gettrace(), threading.gettrace())
        self._decisions.clear()
        self._running = True
        self._switch(self._budget)
        threading.settrace(self._global_trace)
        sys.settrace(self._global_trace)

    def stop(self) -> None:
        """Stop counting; `steps` keeps its value. Puts back the trace
        functions that were set when `start()` was called."""
        if not self._running:
            return
        self._running = False
        previous_sys, previous_threading = self._saved
        self._saved = (None, None)
        if self._counter is not None:
            self._counter.stop()  # other threads detach at their next event
            threading.settrace(previous_threading)
            return
        self._switch(iter(()))  # other threads' tracers find it empty and detach
        self._decisions.clear()
        sys.settrace(previous_sys)
        threading.settrace(previous_threading)

    # --------------------------------------------------------- C tracing

    def _counts_file(self, filename: str) -> bool:
        """Asked by the C counter once per `co_filename` (per counter: a run
        has its own), answered from what this process decided before."""
        key = (self.program_root, filename)
        try:
            return _DECIDED[key]
        except KeyError:
            pass
        try:
            counted = self._counts(filename)
        except (TypeError, ValueError, OSError):  # an odd file name
            counted = False
        _DECIDED[key] = counted
        return counted

    def decide_ahead(self, filenames: Iterable[str]) -> None:
        """Decide now whether each of `filenames` is counted: the zygote does
        so for every module it imported, so its workers' counters ask the
        file system (realpath, one comparison per excluded folder) about
        none of them."""
        for filename in filenames:
            self._counts_file(filename)

    def _failure(self) -> RunFailed:
        return RunFailed("budget", f"the run exceeded max_steps ({self.max_steps} line events)")

    # ------------------------------------------------------------ tracing

    def _make_tracers(self) -> tuple[_TraceFunction, Callable[[Iterator[None]], None]]:
        decisions = self._decisions
        budget: Iterator[None] = iter(())

        def switch(iterator: Iterator[None]) -> None:
            nonlocal budget
            budget = iterator

        # The hot path: called for every line of program code. One string
        # comparison and one C call; anything else goes to `overflow`.
        def local_trace(frame: FrameType, event: str, arg: Any) -> None:
            if event == "line":
                try:
                    next(budget)
                except StopIteration:
                    overflow(frame)

        def overflow(frame: FrameType) -> None:
            if not self._running:  # stopped: leave this frame and this thread
                frame.f_trace = None
                sys.settrace(None)
                return
            self._over += 1
            raise self._failure()

        # Called for every call in the thread. `frame.f_code` is avoided on
        # purpose: reading it raises an audit event, which would run the
        # confinement tripwire's hook on every call.
        def global_trace(frame: FrameType, event: str, arg: Any) -> _TraceFunction | None:
            try:
                return decisions[frame.f_globals.get("__file__")]
            except KeyError:
                return decide(frame)

        def decide(frame: FrameType) -> _TraceFunction | None:
            if not self._running:
                sys.settrace(None)
                return None
            module_file = frame.f_globals.get("__file__")
            try:
                counted = self._counts(module_file)
            except TypeError:  # an unhashable or odd __file__
                return None
            decision = local_trace if counted else None
            decisions[module_file] = decision
            return decision

        return global_trace, switch

    def _counts(self, module_file: object) -> bool:
        if not isinstance(module_file, str) or not module_file or module_file.startswith("<"):
            return False
        path = Path(os.path.realpath(module_file))
        if not path.is_relative_to(self.program_root):
            return False
        return not any(path.is_relative_to(excluded) for excluded in self._excluded)


# Whether a file is counted, by (program root, file name): it depends on
# the two paths only, so every counter of this process shares the answers,
# and a worker inherits those its zygote took.
_DECIDED: dict[tuple[Path, str], bool] = {}


@functools.lru_cache(maxsize=64)
def _excluded_dirs(program_root: Path) -> tuple[Path, ...]:
    """The standard library, site-packages and staal's own packages, when they
    lie inside the program root (a venv or a checkout under it). A folder that
    contains the root is left out, so a root inside site-packages still counts."""
    candidates = {
        sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")
    }
    candidates.update(
        os.path.dirname(path)
        for name, module in list(sys.modules.items())
        if (name == "staal" or name.startswith("staal.")) and (path := getattr(module, "__file__", None))
    )
    candidates.update(
        p for p in sys.path if p and os.path.basename(p) in {"site-packages", "dist-packages"}
    )
    excluded = []
    for candidate in candidates:
        path = Path(os.path.realpath(candidate))
        if program_root.is_relative_to(path):
            continue
        if path.is_relative_to(program_root):
            excluded.append(path)
    return tuple(sorted(excluded))
