"""Running one run, new or resumed: the order of things in a run process.

Secrets are taken out of the environment and the environment scrubbed, the
tripwire is installed, and only then is the program imported (a worker
forked from the zygote did all of that before its run, except the secrets:
its environment never held one, and its run's own come with its run
message, worker/processes/serve.py). Arguments are
checked by the runtime's own rules before anything is created; the journal's
header is durable before the program starts; the program runs with its
capability parameters bound to the broker and its steps counted; the end is
journaled (a stopped run has no end: it waits).
"""

from __future__ import annotations

import io
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import staal
from staal.inputs.arguments import check_arguments
from staal.inputs.types import InputError
from staal.journal.reader import JournalState, read_journal
from staal.journal.records import Header
from staal.journal.writer import JournalSink, JournalWriter
from staal.program import RunFailed
from staal.records.canonical import arguments_hash
from staal.records.outcomes import Failure, FailureKind
from staal.records.record import Json
from staal.records.runconfig import RunConfig
from staal.runtime.budgets import memory_message
from staal.runtime.clock import SYSTEM_CLOCK, Clock
from staal.runtime.ids import new_run_id
from staal.worker.capabilities import implementation
from staal.worker.capabilities.services import Kept, Services
from staal.worker.confinement import confine
from staal.worker.confinement.limits import WaitBound, bound_process
from staal.worker.confinement.steps import StepCounter
from staal.worker.errors import WorkerError
from staal.worker.runs.actions import RunOutcome
from staal.worker.runs.broker import GrantState
from staal.worker.runs.engine import RunContext
from staal.worker.runs.program import ProgramInfo, fresh_entry, inspect_program, program_sha256
from staal.worker.runs.spans import RunRecorder

RUNTIME = staal.RUNTIME


class ResumeRefused(WorkerError):
    """A journal that cannot be resumed under what is here now."""

    kind = "resume_refused"


@dataclass(frozen=True)
class RunRequest:
    config: RunConfig
    arguments: Json
    journal: Path
    run_id: str | None = None
    clock: Clock = SYSTEM_CLOCK
    on_print: Callable[[str], None] | None = None
    # Told when each new action begins: (op, what it is).
    on_op: Callable[[int, str], None] | None = None
    # The program loaded by a process that confined itself already (a
    # worker forked from the zygote), with the secrets its run message
    # handed over; None: this process runs one run and exits, so `start`
    # confines it, takes the secrets from its environment and loads the program.
    prepared: Prepared | None = None
    # Records the run's action spans when traces are exported (worker/runs/spans.py).
    spans: RunRecorder | None = None
    # Where the journal's records go; None: the file `journal`, written
    # here. On a shared store, the supervisor's sink (worker/runs/journal_sink.py);
    # the file is then the supervisor's copy of the committed rows, read to
    # resume.
    sink: JournalSink | None = None
    # Run the program from a new module of its own (program.fresh_entry):
    # its module body runs again, so nothing an earlier run of this process
    # left in the program's globals is seen. False: the module loaded first.
    fresh: bool = False
    # The connections the worker keeps across the runs it serves (its
    # PostgreSQL ones, reset between runs by the worker); None: the run's
    # connections are its own, closed when it ends.
    kept: Kept | None = None
    # Whether the run's task was cancelled (a worker's: worker/runs/cancel.py).
    cancelled: Callable[[], bool] | None = None


@dataclass(frozen=True)
class Prepared:
    info: ProgramInfo
    secrets: dict[str, str]
    # Taken when the program was loaded: the file that runs is the one hashed.
    program_sha256: str = ""
    config_sha256: str = ""


def error(kind: FailureKind, message: str) -> RunOutcome:
    return RunOutcome("error", failure=Failure(kind, message))


def uses_ffi(config: RunConfig) -> bool:
    return any(g.cap == "ffi.c" for grant in config.grants.values() for g in grant.walk())


def confine_and_load(config: RunConfig) -> Prepared | RunOutcome:
    """Take the secrets, confine this process for good (an audit hook cannot
    be removed) and import the program."""
    secrets = confine.take_secrets(config.secret_names())
    confine.scrub_environment(())
    confine.refuse_stdin()
    confine.install_tripwire(allow_ffi=uses_ffi(config), on_violation=note_violation)
    prepared = load(config, secrets)
    # Counted from here, as in a worker forked with its programs loaded.
    bound_process(config.limits)
    return prepared


def load(config: RunConfig, secrets: dict[str, str]) -> Prepared | RunOutcome:
    """Import the program (the process is confined already) and check it
    against the config's grants."""
    info = inspect_program(config.program, config.entry, config.grants)
    if info.problems:
        return error("config", "; ".join(info.problems))
    for cap in sorted({g.cap for grant in config.grants.values() for g in grant.walk()}):
        try:
            implementation(cap)
        except ImportError as exc:
            return error("config", f"'{cap}' cannot be loaded: {exc}")
    return Prepared(info, secrets, info.sha256, config.sha256())


_violations: list[str] = []


def note_violation(message: str) -> None:
    """The tripwire's report: the run fails as `capability` even if the
    program catches the refusal."""
    _violations.append(message)


def violated() -> bool:
    """Whether the tripwire refused anything during the last run."""
    return bool(_violations)


def _prepared(request: RunRequest) -> Prepared | RunOutcome:
    return request.prepared or confine_and_load(request.config)


def start(request: RunRequest) -> RunOutcome:
    """A new run: check, create the journal, run the program."""
    prepared = _prepared(request)
    if isinstance(prepared, RunOutcome):
        return prepared
    info, secrets = prepared.info, prepared.secrets
    try:
        values = check_arguments(info.inputs, request.arguments, tuple(info.capabilities))
    except InputError as exc:
        return error("input", exc.message)
    config = request.config
    run_id = request.run_id or new_run_id()
    clock = request.clock
    header = Header(
        run=run_id, tool=config.tool, program=str(config.program),
        program_sha256=prepared.program_sha256, config_sha256=prepared.config_sha256,
        inputs_sha256=arguments_hash(values), runtime=RUNTIME, time=clock.now_ms(),
        config=str(config.source) if config.source else None,
    )
    with confine.broker_section():
        writer = JournalWriter.create(request.journal, header, clock) if request.sink is None \
            else JournalWriter.begin(request.sink, header, clock)
    return _execute(request, info, values, secrets, writer, header, None)


def resume(request: RunRequest, state: JournalState | None = None) -> RunOutcome:
    """Re-execute a journaled run, replaying what the journal holds."""
    state = state or read_journal(request.journal)
    if state.end is not None:
        return ended_outcome(state)
    refuse_changed(state, request.config)
    prepared = _prepared(request)
    if isinstance(prepared, RunOutcome):
        return prepared
    info, secrets = prepared.info, prepared.secrets
    try:
        values = check_arguments(info.inputs, request.arguments, tuple(info.capabilities))
    except InputError as exc:
        return error("input", exc.message)
    if arguments_hash(values) != state.header.inputs_sha256:
        raise ResumeRefused(f"{request.journal}: the inputs differ from the ones the run began with")
    with confine.broker_section():
        writer = JournalWriter.reopen(request.journal, request.clock) if request.sink is None \
            else JournalWriter(request.sink, request.clock)
    return _execute(request, info, values, secrets, writer, state.header, state)


def refuse_changed(state: JournalState, config: RunConfig) -> None:
    """A journal is tied to its program, config and runtime (seed 000
    section 7, "Upgrades"): say which changed."""
    header, changed = state.header, []
    if header.runtime != RUNTIME:
        changed.append(f"the runtime (the run began under {header.runtime}, this is {RUNTIME})")
    if Path(header.program) != config.program:
        changed.append(f"the program (the run began with {header.program}, now {config.program})")
    elif not config.program.is_file() or program_sha256(config.program) != header.program_sha256:
        changed.append(f"the program {config.program} (its SHA-256 differs)")
    if config.sha256() != header.config_sha256:
        changed.append("the config (grants, limits, net or entry differ)")
    if changed:
        raise ResumeRefused(f"{state.path}: cannot resume run {header.run}: "
                            + "; ".join(changed) + " since the run began")


def ended_outcome(state: JournalState) -> RunOutcome:
    end = state.end
    if end is None:
        raise ValueError(f"{state.path}: the run has not ended")
    return RunOutcome(end.outcome, run=state.header.run, result=end.result, failure=end.failure,
                      usage=dict(end.usage), content=end.content)


def _execute(request: RunRequest, info: ProgramInfo, values: dict[str, Any],
             secrets: dict[str, str], writer: JournalWriter, header: Header,
             replay: JournalState | None) -> RunOutcome:
    config = request.config
    ctx = RunContext(
        run_id=header.run, writer=writer, clock=request.clock, started_ms=header.time,
        deadline_ms=config.limits.deadline_ms, replay=replay, secrets=tuple(secrets.values()),
        on_print=request.on_print, program_dir=config.program.parent, on_op=request.on_op,
        spans=request.spans, wait_ms=config.limits.wait_ms, cancelled=request.cancelled,
    )
    services = Services(clock=request.clock, secrets=secrets, config=config, kept=request.kept)
    counter = StepCounter(config.limits.max_steps, config.program.parent)
    waits = _wait_bound(config, ctx)
    returned, failure = None, None
    stdout, printed = sys.stdout, _Printed(ctx)
    _violations.clear()
    try:
        waits.start()
        # A fresh module's body runs within the run's time bounds, but before
        # the program's stdout is taken and its steps are counted: its prints
        # and lines belong to no run, so the journal and the step count are
        # the same whichever process, and whichever of its runs, this is.
        entry = fresh_entry(info) if request.fresh else _entry(info)
        sys.stdout = printed
        arguments = _bind(info, values, ctx, services)
        counter.start()
        try:
            returned = entry(**arguments)
        finally:
            waits.stop()
            counter.stop()
    except BaseException as exc:  # noqa: BLE001 - whatever ended the program is data from here on
        failure = exc
    finally:
        waits.stop()  # a module body that raised: stopped here
        printed.flush_rest()
        sys.stdout = stdout
        services.close()
    if isinstance(failure, MemoryError):
        failure = _over_memory(failure, config)
    if _violations and ctx.violation is None:
        ctx.violation = ctx.redact(_violations[0])
    if counter.steps > config.limits.max_steps and not isinstance(failure, RunFailed):
        failure = RunFailed("budget", f"the run exceeded max_steps ({config.limits.max_steps})")
    try:
        return ctx.finish(returned, failure)
    finally:
        writer.close()


def _entry(info: ProgramInfo) -> Callable[..., Any]:
    if info.function is None:  # inspect_program loads it whenever it finds no problem
        raise RunFailed("internal", f"{info.entry}() was not loaded")
    return info.function


def _wait_bound(config: RunConfig, ctx: RunContext) -> WaitBound:
    """The bound on the program's time outside its actions: its deadline,
    and its max_wait; the time each action takes is not counted."""
    def expired(failure: RunFailed) -> None:
        if ctx.ended is None:
            ctx.ended = failure

    def replayed() -> bool:
        return ctx.replay is None or ctx.op >= ctx.replay.last_op

    waits = WaitBound(config.limits.wait_ms, config.limits.deadline_ms, ctx.deadline_at,
                      ctx.clock.now_ms, on_expired=expired, may_end=replayed,
                      cancelled=ctx.cancelled)
    ctx.after_action = waits.acted
    return waits


def _over_memory(error: MemoryError, config: RunConfig) -> RunFailed:
    """A refused allocation fails the run as `budget`, naming the limit. The
    frames it passed through are let go of first (their locals may hold what
    filled the memory), so that the end can be written."""
    failure = RunFailed("budget", memory_message(config.limits.memory_mib))
    failure = failure.with_traceback(error.__traceback__)
    traceback.clear_frames(error.__traceback__)
    return failure


def _bind(info: ProgramInfo, values: dict[str, Any], ctx: RunContext,
          services: Services) -> dict[str, Any]:
    """The entry function's arguments: the inputs, and each capability
    parameter bound to the broker through its grant."""
    arguments = dict(values)
    for name, cap in info.capabilities.items():
        state = GrantState.for_param(name, services.run_config.grants[name])
        ctx.params[name] = state
        arguments[name] = implementation(cap)(ctx, state, services)
    return arguments


class _Printed(io.TextIOBase):
    """The program's standard output: each line journaled and shown on stderr."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.pending = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            self.ctx.print_line(line)
        return len(text)

    def flush_rest(self) -> None:
        if self.pending:
            self.ctx.print_line(self.pending)
            self.pending = ""
