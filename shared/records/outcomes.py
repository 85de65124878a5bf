"""How a run ends (seed 000 section 5, the outcome table), shared by the
journal's end record, the worker's `ended` message and the ledger's settle."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

from staal.errors import RecordError
from staal.money import Money
from staal.records.record import Count, OpNumber

# done: a result; failed: a failure of one of FAILURE_KINDS; error: the call's
# config or inputs were refused before anything ran (ERROR_KINDS).
Outcome = Literal["done", "failed", "error"]
FailureKind = Literal[
    "capability", "validation", "action", "value", "provider", "budget", "deadline",
    "internal", "config", "input", "cancelled",
]
FAILURE_KINDS = (
    "capability", "validation", "action", "value", "provider", "budget", "deadline", "internal",
    "cancelled",
)
# A run whose task was cancelled (DESIGN.md section 8): it stopped before its
# next action, as at a deadline. Never a program's own kind (`fail` refuses it).
CANCELLED: Final = "cancelled"
ERROR_KINDS = ("config", "input")


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame of the operator's program, where an exception passed:
    for the operator (the run's log, the server's log, `journal show`),
    never for the client."""

    file: str
    line: OpNumber
    function: str
    source: str


@dataclass(frozen=True, slots=True)
class Failure:
    kind: FailureKind
    message: str
    # The program's own frames the exception that ended it passed through,
    # most recent call last; empty when it did not come from program code.
    traceback: tuple[Frame, ...] = ()
    # The `kind` of the staal error behind a failure that was not the
    # program's (a worker's refusal: `resume_refused`, `journal_refused`),
    # so the supervisor learns why without reading the message; None when
    # the program's own exception or a check of the engine ended the run.
    cause: str | None = None


def format_frames(frames: tuple[Frame, ...], indent: str = "") -> list[str]:
    """A traceback as Python prints one, for people."""
    if not frames:
        return []
    lines = [f"{indent}Traceback (the program's frames, most recent call last):"]
    for frame in frames:
        lines.append(f'{indent}  File "{frame.file}", line {frame.line}, in {frame.function}')
        if frame.source:
            lines.append(f"{indent}    {frame.source}")
    return lines


@dataclass(frozen=True, slots=True)
class Usage:
    """What one capability parameter did in a run, replayed ops included."""

    actions: Count = 0
    charged: tuple[Money, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        check_one_per_currency(self.charged, "charged")


def check_one_per_currency(amounts: tuple[Money, ...], field_name: str) -> None:
    """Amounts held or charged are one per currency, never two of one."""
    seen: set[str] = set()
    for amount in amounts:
        if amount.currency in seen:
            raise RecordError(f"{amount.currency} appears twice", field_name)
        seen.add(amount.currency)


def check_outcome(outcome: str, failure: Failure | None) -> None:
    """done carries no failure; failed carries one of FAILURE_KINDS; error
    one of ERROR_KINDS."""
    if outcome == "done":
        if failure is not None:
            raise RecordError("a done outcome has no failure", "failure")
        return
    if failure is None:
        raise RecordError(f"{_a(outcome)} outcome needs a failure", "failure")
    kinds = FAILURE_KINDS if outcome == "failed" else ERROR_KINDS
    if failure.kind not in kinds:
        raise RecordError(
            f"{_a(outcome)} outcome has a failure of kind {', '.join(kinds)}, not {failure.kind}",
            "failure.kind",
        )


def _a(word: str) -> str:
    return f"an {word}" if word[0] in "aeiou" else f"a {word}"
