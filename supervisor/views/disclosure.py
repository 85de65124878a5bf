"""What of a run's journal may be shown, and to whom: the one rule behind
the caller's runs resources (`journal_view.py`) and the operator's console
timeline (`timeline.py`). Each view picks from what the rule allows what it
displays (the resources give hashes and idempotency keys, the timeline
draws bars); neither shows anything the rule does not allow.

Withheld from every audience (seed 000 section 8: messages never hold a
secret, and a client is never shown argument values): argument values (the
journal holds only their SHA-256), action results and journaled clock or
random values (at most their SHA-256), an action's failure message (it may
quote its URL or a service's answer, which may hold an argument: its kind
alone is shown), and the server's own file paths. Shown to every audience:
each op's capability, action, parameter and time, whether it succeeded,
what it charged, the stop and its message, the operator's answer, and how
the run ended.

The audiences differ only in the fields of `Audience`, so what the operator
may see that the caller may not is written here, once, as data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from staal.protocol.mcp.results import internal_error_text
from staal.records.canonical import canonical_json, sha256_hex
from staal.records.journal_records import End, OutcomeRecord, Print
from staal.records.outcomes import format_frames

__all__ = ["CALLER", "OPERATOR", "Audience", "action_failure", "end_failure", "end_frames",
           "end_result", "printed", "sha256_of"]


@dataclass(frozen=True, slots=True)
class Audience:
    name: str
    # The text a program printed: the server's stderr carries it to the
    # operator; the caller never sees it (a print may hold anything).
    printed_text: bool
    # An internal failure's own message; without it, the text the caller's
    # call was answered with (which names the run and nothing of the server).
    internal_message: bool
    # The program's own frames where it failed, secrets already redacted in
    # the journal.
    program_frames: bool
    # A done run's result: the caller's own, as its call was answered. The
    # console's page leaves it out: a result may repeat an argument.
    run_result: bool


CALLER = Audience("caller", printed_text=False, internal_message=False, program_frames=False,
                  run_result=True)
OPERATOR = Audience("operator", printed_text=True, internal_message=True, program_frames=True,
                    run_result=False)


def sha256_of(value: Any) -> str:
    """What a withheld value is shown as, to any audience shown anything of it."""
    return sha256_hex(canonical_json(value))


def printed(record: Print, audience: Audience) -> str | None:
    return record.text if audience.printed_text else None


def action_failure(outcome: OutcomeRecord) -> str | None:
    """A failed action's kind, the same for every audience; never its message."""
    return outcome.failure.kind if outcome.failure is not None else None


def end_failure(end: End, run: str, audience: Audience) -> tuple[str, str] | None:
    """How a failed run's end reads: (kind, message)."""
    failure = end.failure
    if failure is None:
        return None
    if failure.kind == "internal" and not audience.internal_message:
        return failure.kind, internal_error_text(run)
    return failure.kind, failure.message


def end_frames(end: End, audience: Audience) -> tuple[str, ...]:
    if end.failure is None or not audience.program_frames:
        return ()
    return tuple(format_frames(end.failure.traceback))


def end_result(end: End, audience: Audience) -> tuple[bool, Any]:
    """(shown, result): a done run's result, to an audience that may see it."""
    if end.outcome == "done" and audience.run_result:
        return True, end.result
    return False, None
