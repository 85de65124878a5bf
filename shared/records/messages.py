"""Messages between the supervisor and its workers (DESIGN.md section 6).

Versioned orjson objects over ZeroMQ. Failures cross the process boundary as
data (kind, message, and where a program failed as plain frames), never as
pickled exceptions or tracebacks.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, ClassVar, Literal

import orjson

from staal.errors import RecordError
from staal.journal.records import End, Stopped
from staal.records.content import ContentPart, check_content
from staal.records.outcomes import Failure, Outcome, Usage, check_outcome
from staal.records.record import Count, Family, Json, OpNumber, Pattern, Record, RunId, Sha256
from staal.runtime.timings import Timings


@dataclass(frozen=True, slots=True)
class Run(Record):
    """Supervisor → worker: run (or resume) one run.

    `secrets` are the values of exactly the variables the tool's grants
    name, read from the supervisor's environment, for the capabilities (the
    worker's environment holds none). They cross only the ipc socket in the
    0700 runtime directory, and never show in a repr or a log."""

    TYPE: ClassVar[str] = "run"
    run: RunId
    tool: str
    journal: str
    inputs: str
    resume: bool = False
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    # The tool's grant set the run runs with (`tools[i].profiles`, chosen by
    # the caller's profile); None: the tool's own grants.
    grants: str | None = None
    # The call's span (W3C traceparent) when traces are exported: the
    # worker then records its run's spans as data (RunSpans); None: it
    # records nothing.
    traceparent: str | None = None
    # Report what the run timed (its `timings`): only with metrics on, so a
    # server without them reads nothing more per run.
    timed: bool = False
    # Where the run's journal records go: "file", the journal file the
    # worker writes itself; "supervisor", each sent as a `JournalAppend`
    # and committed by the supervisor on its shared store (the worker
    # never holds the store's DSN or the fencing token).
    sink: Literal["file", "supervisor"] = "file"
    # The worker's last run: it exits after it, whatever it could still
    # serve (the tool's `runs_per_worker` reached; 1: a fresh process per run).
    last: bool = True
    # Its task was cancelled before it was sent: it stops before its first
    # action, as a run cancelled later stops before its next (CANCEL_SIGNAL).
    cancelled: bool = False


@dataclass(frozen=True, slots=True)
class Started(Record):
    TYPE: ClassVar[str] = "started"
    run: RunId
    pid: Count


@dataclass(frozen=True, slots=True)
class PrintLine(Record):
    TYPE: ClassVar[str] = "print"
    run: RunId
    text: str


@dataclass(frozen=True, slots=True)
class Progress(Record):
    """An action of the run begins: op `op`, described for the caller (its
    capability, action and parameter; never an argument value)."""

    TYPE: ClassVar[str] = "progress"
    run: RunId
    message: str
    op: Count = 0


@dataclass(frozen=True, slots=True)
class StoppedMsg(Record):
    """The run stopped in doubt at `op` and waits for an operator."""

    TYPE: ClassVar[str] = "stopped"
    run: RunId
    op: OpNumber
    message: str
    # What the worker timed (its actions, its fsyncs), for the metrics.
    timings: Timings | None = None


@dataclass(frozen=True, slots=True)
class Ended(Record):
    TYPE: ClassVar[str] = "ended"
    run: RunId
    outcome: Outcome
    result: Json = None
    failure: Failure | None = None
    usage: Mapping[str, Usage] = field(default_factory=dict)
    timings: Timings | None = None
    # The worker waits for another run of its grant set after this one
    # (worker/processes/binding.py says when it may); False: it exits now.
    stays: bool = False
    # Why a worker that could have served more runs does not stay (a run
    # that did not end done or failed by its program, what a run left in the
    # process); None: it stays, or this was its last run.
    retires: str | None = None
    # A result that is not JSON, as the journal's end holds it (End.content).
    content: tuple[ContentPart, ...] | None = None

    def __post_init__(self) -> None:
        check_outcome(self.outcome, self.failure)
        check_content(self.outcome, self.result, self.content)


SpanId = Annotated[str, Pattern(r"[0-9a-f]{16}", "a span id (16 hexadecimal characters)")]
# What became of one action, as its span says: performed and answered, failed
# for certain, refused before it happened, or stopped (in doubt, a mismatch).
ActionOutcome = Literal["ok", "failed", "refused", "stopped"]


@dataclass(frozen=True, slots=True)
class ActionSpan:
    """One action of a run, timed in the worker (wall clock, ns). Typed
    fields only: there is no place for an argument value, a URL or a result."""

    span_id: SpanId
    op: OpNumber
    cap: str
    action: str
    param: str
    outcome: ActionOutcome
    start_ns: Count
    end_ns: Count
    # The SHA-256 of the idempotency key it was sent (or journaled) with.
    key_sha256: Sha256 | None = None
    # Answered from the journal on resume, not performed again.
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class RunSpans(Record):
    """Worker → supervisor, just before its last word: the run's span and
    its actions', as data. The supervisor exports them (a worker never
    imports OpenTelemetry, starts no exporter and loses nothing on exit)."""

    TYPE: ClassVar[str] = "spans"
    run: RunId
    # The call's span, the run span's parent (the Run message's traceparent).
    traceparent: str
    span_id: SpanId
    tool: str
    outcome: str
    start_ns: Count
    end_ns: Count
    pid: Count
    resumed: bool = False
    failure_kind: str | None = None
    actions: tuple[ActionSpan, ...] = ()


@dataclass(frozen=True, slots=True)
class JournalAppend(Record):
    """Worker → supervisor, on a shared store (issue 15): one journal record
    (`record`, as the journal family encodes it) of the worker's run. The
    worker waits for the answer before it goes on: the record is durable
    once the supervisor committed it as a row."""

    TYPE: ClassVar[str] = "journal_append"
    run: RunId
    record: Json


@dataclass(frozen=True, slots=True)
class JournalAck(Record):
    """Supervisor → worker: the last `JournalAppend` is committed, or was
    `refused` (why: the run is no longer this instance's, or the store
    failed), `kind` the refusal's (`fenced`, `store`, ...); a refused record
    was not written, and the worker stops."""

    TYPE: ClassVar[str] = "journal_ack"
    run: RunId
    refused: str | None = None
    kind: str | None = None


@dataclass(frozen=True, slots=True)
class Heartbeat(Record):
    TYPE: ClassVar[str] = "heartbeat"
    pid: Count
    run: RunId | None = None


@dataclass(frozen=True, slots=True)
class Retire(Record):
    """Supervisor → a worker waiting between runs: exit now (idle too long,
    more idle workers than the pool keeps, or the pool closing)."""

    TYPE: ClassVar[str] = "retire"


@dataclass(frozen=True, slots=True)
class Check(Record):
    """Supervisor → worker at start: check one tool's program and config."""

    TYPE: ClassVar[str] = "check"
    manifest: str
    tool: str


@dataclass(frozen=True, slots=True)
class Checked(Record):
    """The start-up check's answer: problems, or the input type description
    the supervisor checks arguments with (it never imports a program)."""

    TYPE: ClassVar[str] = "checked"
    tool: str
    ok: bool
    problems: tuple[str, ...] = field(default_factory=tuple)
    inputs: Json = None
    schema: Json = None


@dataclass(frozen=True, slots=True)
class Verify(Record):
    """Supervisor → verifier: judge one request's head (`auth.credential`
    "provider"). `headers` are only the credential headers the manifest
    names; the body never crosses. They show in no repr."""

    TYPE: ClassVar[str] = "verify"
    id: Count
    method: str
    path: str
    headers: Mapping[str, tuple[str, ...]] = field(default_factory=dict, repr=False)


@dataclass(frozen=True, slots=True)
class Verified(Record):
    """The verifier's answer to `Verify` `id`: what its program returned, as
    data the supervisor checks (`principal`: the dict it returned; `refusal`:
    `{"status", "description"}`), or a `failure` (it raised, returned what is
    not JSON, or did what a verifier may not); and what it printed meanwhile."""

    TYPE: ClassVar[str] = "verified"
    id: Count
    principal: Json = None
    refusal: Json = None
    failure: Failure | None = None
    printed: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class VerifierReady(Record):
    """The verifier process loaded its program (no problems) and serves, or
    could not (each problem names its manifest key) and exits."""

    TYPE: ClassVar[str] = "verifier_ready"
    pid: Count
    problems: tuple[str, ...] = field(default_factory=tuple)


# Supervisor → the worker running a run whose task was cancelled, out of
# band (the worker reads no message during a run): stop before the next
# action (worker/processes/cancel.py).
CANCEL_SIGNAL = signal.SIGUSR1


MESSAGES = Family(
    name="message",
    tag="type",
    version=1,
    types=(Run, Started, PrintLine, Progress, StoppedMsg, Ended, Heartbeat, Check, Checked, Verify,
           Verified, VerifierReady, RunSpans, JournalAppend, JournalAck, Retire),
)


def pack(message: Record) -> bytes:
    return orjson.dumps(MESSAGES.encode(message))


def unpack(frame: bytes) -> Record:
    try:
        data = orjson.loads(frame)
    except orjson.JSONDecodeError as exc:
        raise RecordError(f"a message frame is not JSON: {exc}") from exc
    return MESSAGES.decode(data)


def report_of(run: str, record: End | Stopped) -> Ended | StoppedMsg:
    """A journal's last word (its end, or the stop it waits at) as the
    worker reports it to the supervisor."""
    if isinstance(record, Stopped):
        return StoppedMsg(run=run, op=record.op, message=record.message)
    return Ended(run=run, outcome=record.outcome, result=record.result, failure=record.failure,
                 usage=record.usage, content=record.content)
