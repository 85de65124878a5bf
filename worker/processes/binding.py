"""What a warm worker holds across its runs (DESIGN.md section 6, issue 26).

A worker is bound at its first run to that run's grant set (the tool, or
the tool under one caller profile: `config_key`) and serves only runs of it
from then on, so it only ever holds that set's secrets; a run of another set
is a bug in the supervisor and is refused as `internal`.

Limits split into the worker's and each run's (confinement/warm_limits.py):
with `runs_per_worker` 1 the worker bounds itself for its one run exactly as
a one-run process does (`bound_process`); otherwise it binds the hard limits
once and gives each run its own CPU budget, disarmed after it.

After each run the binding says whether the worker may serve another
(`after_run`). It may not after any run that did not end done or failed by
its program: the process may hold what that run left (a thread stuck in C,
a broken connection, memory at its limit, a tripwire's refusal), so it is
replaced. Nor when the memory it kept from its runs, or the CPU its hard
limit has left, could cut the next run's budget short, or when a run left
the process changed where the next would notice (a thread still running, the
working directory, `sys.path`, the standard streams, a signal handler).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from staal.records.messages import Ended, Run, StoppedMsg
from staal.records.runconfig import Limits, RunConfig, config_key
from staal.worker.capabilities.services import Kept
from staal.worker.confinement import confine
from staal.worker.confinement.limits import RAW_SIGNAL, bound_process
from staal.worker.confinement.warm_limits import (
    ProcessBound,
    arm_run_cpu,
    bind_process_limits,
    cpu_headroom_ok,
    disarm_run_cpu,
    memory_retained_ok,
)
from staal.worker.errors import WorkerError
from staal.worker.runs.actions import RunOutcome
from staal.worker.runs.run import Prepared, note_violation, uses_ffi, violated

# Failures a program meets in the course of its work, after which the
# process is as sound as before the run: the worker stays. Every other kind
# (budget, deadline, internal, config) retires it.
PROGRAM_FAILURES = frozenset({"validation", "action", "value", "provider", "capability"})
# Signal handlers a program could change and a later run would inherit.
WATCHED_SIGNALS = tuple(number.value for number in (
    signal.SIGALRM, signal.SIGXCPU, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE,
    signal.SIGUSR1))  # SIGUSR1: a cancel (worker/processes/cancel.py)


class WrongGrantSet(WorkerError):
    """A run for another grant set reached a bound worker."""

    kind = "wrong_grant_set"


@dataclass(frozen=True, slots=True)
class Hygiene:
    """What a run must leave as it found it for the worker to serve another."""

    threads: int
    cwd: str
    path: tuple[str, ...]
    streams: tuple[int, int]
    handlers: tuple[object, ...]

    @classmethod
    def now(cls) -> Hygiene:
        with confine.broker_section():
            threads = len(os.listdir("/proc/self/task"))
            cwd = os.getcwd()
        return cls(threads=threads, cwd=cwd, path=tuple(sys.path),
                   streams=(id(sys.stdout), id(sys.stderr)),
                   handlers=tuple(RAW_SIGNAL.getsignal(number) for number in WATCHED_SIGNALS))

    def changed(self, later: Hygiene) -> str | None:
        """What differs in `later`, for the log; None: nothing."""
        for name in ("threads", "cwd", "path", "streams", "handlers"):
            if getattr(self, name) != getattr(later, name):
                return name
        return None


class Binding:
    """The worker's grant set, its runs so far, and what it keeps between them."""

    def __init__(self, configs: Mapping[str, RunConfig],
                 prepared: Mapping[str, Prepared | RunOutcome],
                 reuse: Mapping[str, int]) -> None:
        self.configs = configs
        self.prepared = prepared
        self.reuse = reuse
        self.key: str | None = None
        self.runs = 0  # runs begun in this worker
        self.bound: ProcessBound | None = None  # None: bounded per run (one run)
        self.hygiene: Hygiene | None = None
        # The connections its runs keep (None: a worker of one run keeps none).
        self.kept: Kept | None = None
        self.why_not: str | None = None  # why the worker does not stay, once it does not
        self.ffi = False  # whether its grant set may call C code (ffi.c)

    @property
    def warm(self) -> bool:
        return self.reuse.get(self.key or "", 1) > 1

    def accept(self, message: Run) -> tuple[RunConfig, Prepared | RunOutcome, bool]:
        """The run's config, its loaded program, and whether it gets a fresh
        program module (every run after a worker's first: the first uses the
        module the zygote loaded, which no run has touched)."""
        key = config_key(message.tool, message.grants)
        if self.key is None:
            self.key = key
            config = self.configs[key]
            self.ffi = uses_ffi(config)
            # Per process: the zygote allowed what any tool may do.
            confine.narrow_tripwire(self.ffi, note_violation)
        elif key != self.key:
            raise WrongGrantSet(f"a worker bound to {self.key!r} was sent a run of {key!r}")
        fresh = self.runs > 0
        self.runs += 1
        return self.configs[key], self.prepared[key], fresh

    def arm(self, limits: Limits) -> None:
        """Bound the run about to start (main thread)."""
        if not self.warm:
            bound_process(limits)
            return
        if self.bound is None:
            self.bound = bind_process_limits(limits, self.reuse[self.key or ""])
            self.hygiene = Hygiene.now()
            self.kept = Kept()
        arm_run_cpu(limits)

    def disarm(self) -> None:
        """After the run: its CPU budget can no longer fire."""
        if self.bound is not None:
            disarm_run_cpu()

    def after_run(self, report: Ended | StoppedMsg, engine_failed: bool, last: bool) -> bool:
        """Whether the worker may wait for another run; `why_not` says why
        not when it may not."""
        self.why_not = self._retire_reason(report, engine_failed, last)
        return self.why_not is None

    @property
    def retires(self) -> str | None:
        """Why a worker that could serve more runs does not stay, for the
        operator's log; None when it stays or it served its last."""
        return None if self.why_not in (None, "last run") else self.why_not

    def _retire_reason(self, report: Ended | StoppedMsg, engine_failed: bool,
                       last: bool) -> str | None:
        if last or not self.warm:
            return "last run"
        if engine_failed:
            return "the engine failed"
        if isinstance(report, StoppedMsg):
            return "stopped in doubt"
        failure = report.failure
        if failure is not None:
            if violated():
                return "tripwire"
            if failure.kind not in PROGRAM_FAILURES and failure.kind != "input":
                return failure.kind
        config = self.configs[self.key or ""]
        if self.bound is not None and not memory_retained_ok(self.bound):
            return "memory"
        if not cpu_headroom_ok(config.limits):
            return "cpu"
        if self.hygiene is not None:
            changed = self.hygiene.changed(Hygiene.now())
            if changed is not None:
                return f"changed {changed}"
        return None

    def between_runs(self) -> None:
        """Off the call's path, after the report went: what a run left in the
        connections the worker keeps is reset, and C's buffered output (a
        library called through ffi.c) flushed, as an exiting worker flushes it."""
        if self.kept is not None:
            self.kept.between_runs()
        if self.ffi:
            flush_c_stdio()

    def close(self) -> None:
        if self.kept is not None:
            self.kept.close()


def flush_c_stdio() -> None:
    """What a C library called through ffi.c wrote with printf may still sit
    in C's stdout buffer (fully buffered: descriptor 1 is a pipe to stderr);
    os._exit would drop it, so every C stream is flushed first."""
    import ctypes

    try:
        with confine.broker_section():
            ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass
