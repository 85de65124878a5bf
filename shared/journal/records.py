"""Journal records (DESIGN.md section 5): what one run did, one line each,
each durable before anything depends on it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from staal.errors import RecordError
from staal.money import Money
from staal.records.content import ContentPart, check_content
from staal.records.outcomes import Failure, Outcome, Usage, check_one_per_currency, check_outcome
from staal.records.record import Family, Json, OpNumber, Record, RunId, Sha256, TimeMs


@dataclass(frozen=True, slots=True)
class Header(Record):
    """The first line: what this journal belongs to. A resume under a
    different program, config or runtime is refused (seed 000 section 7)."""

    TYPE: ClassVar[str] = "header"
    run: RunId
    tool: str
    program: str
    program_sha256: Sha256
    config_sha256: Sha256
    inputs_sha256: Sha256
    runtime: str
    # When the run began; its deadline is counted from here, resumed or not.
    time: TimeMs
    # The run config file a `staal run` read, which `staal resume` reads again.
    config: str | None = None


@dataclass(frozen=True, slots=True)
class Intent(Record):
    """Written before an action; an intent with no outcome is in doubt,
    unless the action is a read: safe to send again whatever happened, a
    read is sent again by a resumed run and never waits for an operator
    (seed 000: in doubt is "may or may not have happened and cannot safely
    be sent again")."""

    TYPE: ClassVar[str] = "intent"
    op: OpNumber
    param: str
    cap: str
    action: str
    args_sha256: Sha256
    time: TimeMs
    idempotency_key: str | None = None
    # False for journals written before reads were marked: in doubt, as then.
    read: bool = False


@dataclass(frozen=True, slots=True)
class OutcomeRecord(Record):
    TYPE: ClassVar[str] = "outcome"
    op: OpNumber
    ok: bool
    time: TimeMs
    result: Json = None
    failure: Failure | None = None
    charged: tuple[Money, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.ok and self.failure is not None:
            raise RecordError("a successful outcome has no failure", "failure")
        if not self.ok and self.failure is None:
            raise RecordError("a failed outcome needs a failure", "failure")
        check_one_per_currency(self.charged, "charged")


@dataclass(frozen=True, slots=True)
class Print(Record):
    """The seq-th line the program printed; a resumed run that prints it
    again neither journals nor shows it twice."""

    TYPE: ClassVar[str] = "print"
    seq: OpNumber
    text: str
    time: TimeMs


@dataclass(frozen=True, slots=True)
class Value(Record):
    """A clock or random value, journaled so a resumed run sees the same."""

    TYPE: ClassVar[str] = "value"
    op: OpNumber
    cap: str
    value: Json
    time: TimeMs
    # The capability parameter it was drawn through, for the run's usage.
    param: str | None = None


@dataclass(frozen=True, slots=True)
class Stopped(Record):
    """The run stopped because op may or may not have happened."""

    TYPE: ClassVar[str] = "stopped"
    op: OpNumber
    message: str
    time: TimeMs


@dataclass(frozen=True, slots=True)
class Resolved(Record):
    """An operator's answer for an op in doubt (`staal resolve`)."""

    TYPE: ClassVar[str] = "resolved"
    op: OpNumber
    happened: bool
    time: TimeMs
    result: Json = None
    # What the action charged, if it happened, as its result says (a
    # refund's amount): the run's usage and the ledger's settle count it.
    charged: tuple[Money, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not self.happened and (self.result is not None or self.charged):
            raise RecordError("an op that did not happen has no result and charged nothing",
                              "happened")
        check_one_per_currency(self.charged, "charged")


@dataclass(frozen=True, slots=True)
class End(Record):
    TYPE: ClassVar[str] = "end"
    outcome: Outcome
    time: TimeMs
    result: Json = None
    failure: Failure | None = None
    usage: Mapping[str, Usage] = field(default_factory=dict)
    # What a program returned that is not JSON (images, audio, embedded
    # resources, with text), in its order; `result` is None then.
    content: tuple[ContentPart, ...] | None = None

    def __post_init__(self) -> None:
        check_outcome(self.outcome, self.failure)
        check_content(self.outcome, self.result, self.content)


JOURNAL = Family(
    name="journal",
    tag="type",
    version=1,
    types=(Header, Intent, OutcomeRecord, Print, Value, Stopped, Resolved, End),
)

