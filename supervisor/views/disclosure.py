"""What of a run's journal may be shown to the operator's console
(`timeline.py`) and to the caller's runs resources (`journal_view.py`):
the table of staal.journal.disclosure read for the texts only the
supervisor knows (the answer an internal failure's call was given).

Each view picks from what its audience's row allows what it displays (the
resources give hashes and idempotency keys, the timeline draws bars);
neither shows anything the row does not allow.
"""

from __future__ import annotations

from typing import Any

from staal.journal.disclosure import CALLER, OPERATOR, Audience, may_see, shown, shown_as
from staal.journal.records import End, OutcomeRecord, Print
from staal.protocol.mcp.results import internal_error_text
from staal.records.canonical import canonical_json, sha256_hex
from staal.records.outcomes import format_frames
from staal.records.record import Record

__all__ = ["CALLER", "OPERATOR", "Audience", "action_failure", "end_failure", "end_frames",
           "end_result", "hashed", "printed", "sha256_of"]


def sha256_of(value: Any) -> str:
    """What a withheld value is shown as, to any audience shown anything of it."""
    return sha256_hex(canonical_json(value))


def hashed(record: Record, name: str, audience: Audience) -> str:
    """The SHA-256 of a field the audience sees at most the hash of."""
    if shown_as(record, name, audience) not in ("sha256", "shown"):
        raise ValueError(f"{audience} sees nothing of the {name} of {record.TYPE} records")
    return sha256_of(getattr(record, name))


def printed(record: Print, audience: Audience) -> str | None:
    text: str | None = shown(record, "text", audience) if may_see(record, "text", audience) \
        else None
    return text


def action_failure(outcome: OutcomeRecord, audience: Audience) -> str | None:
    """A failed action's kind: what both audiences see of it, never its message."""
    if outcome.failure is None or not may_see(outcome, "failure", audience):
        return None
    return outcome.failure.kind


def end_failure(end: End, run: str, audience: Audience) -> tuple[str, str] | None:
    """How a failed run's end reads: (kind, message)."""
    failure = end.failure
    if failure is None:
        return None
    seen = shown_as(end, "failure", audience)
    if seen == "kind":
        return failure.kind, ""
    if seen == "answer" and failure.kind == "internal":
        return failure.kind, internal_error_text(run)
    return failure.kind, failure.message


def end_frames(end: End, audience: Audience) -> tuple[str, ...]:
    """The program's own frames where it failed, secrets already redacted in
    the journal: for an audience shown the failure whole."""
    if end.failure is None or shown_as(end, "failure", audience) != "shown":
        return ()
    return tuple(format_frames(end.failure.traceback))


def end_result(end: End, audience: Audience) -> tuple[bool, Any]:
    """(shown, result): a done run's result, to an audience that may see it."""
    if end.outcome == "done" and may_see(end, "result", audience):
        return True, shown(end, "result", audience)
    return False, None
