"""From a run's end to the call's answer (seed 000 section 5's outcome
table), whether the end arrives from a worker now or is read back from the
journal for a repeated `once` call or `staal_run_status`."""

from __future__ import annotations

from typing import Any

from staal.errors import LogDamaged
from staal.journal.reader import discard_unstarted, journal_started
from staal.journal.records import End
from staal.journal.writer import close_unfinished
from staal.money import Money
from staal.protocol.mcp.results import CallOutcome, Done, Errored, Failed, Refused, RunStatus, Stopped
from staal.records.content import ContentPart
from staal.records.messages import Ended, StoppedMsg, report_of
from staal.supervisor.store.files import RunFiles
from staal.supervisor.store.journals import FILE_JOURNALS, RunJournals
from staal.supervisor.store.ledger import Ledger, RunEntry
from staal.supervisor.store.notes import RunNotes

# The answer for a run whose task was cancelled before it was handed to a worker.
CANCELLED_UNSTARTED = "its task was cancelled before its run started: nothing was done"


def outcome_of_end(run: str, outcome: str, result: Any, failure: Any,
                   content: tuple[ContentPart, ...] | None = None) -> CallOutcome:
    if outcome == "done":
        return Done(run, result, content)
    if outcome == "failed":
        return Failed(run, failure.kind, failure.message)
    return Errored(run, failure.kind, failure.message)


def outcome_of_message(message: Ended) -> CallOutcome:
    return outcome_of_end(message.run, message.outcome, message.result, message.failure,
                          message.content)


def charged_of(message: Ended | End) -> tuple[Money, ...]:
    """What the run's broker actually spent, per currency, over every
    capability parameter (replayed ops included)."""
    totals: dict[str, Money] = {}
    for usage in message.usage.values():
        for money in usage.charged:
            totals[money.currency] = totals.get(money.currency, Money.zero(money.currency)) + money
    return tuple(totals[c] for c in sorted(totals))


def journal_end(files: RunFiles, journals: RunJournals = FILE_JOURNALS) -> End | None:
    """The journal's end record, if any; None too when the journal is gone
    (deleted under retention). On a shared store the journal is its rows,
    whichever instance ran it."""
    journal = journals.read(files)
    return None if journal is None else journal.end


def answer_of_journal(entry: RunEntry, files: RunFiles,
                      journals: RunJournals = FILE_JOURNALS) -> CallOutcome:
    """The earlier run's answer, exactly as it was given."""
    try:
        end = journal_end(files, journals)
    except LogDamaged as exc:
        return Refused("in_progress", f"run {entry.run} ended, but its journal cannot be read: {exc}")
    if end is None:
        return Refused(
            "in_progress",
            f"this call was already made as run {entry.run}, which ended as {entry.outcome}; "
            "its journal is no longer kept, so its result cannot be given again")
    return outcome_of_end(entry.run, end.outcome, end.result, end.failure, end.content)


def answer_earlier(entry: RunEntry, args_hash: str, files: RunFiles, notes: RunNotes,
                   journals: RunJournals = FILE_JOURNALS) -> CallOutcome:
    """Seed 000 section 5's table for a repeated once call: `entry` holds
    the key, `args_hash` is the repeat's arguments ("" for a call refused as
    a different operation under it)."""
    if entry.once is not None and args_hash != entry.once.args:
        return Refused(
            "once_conflict",
            f"run {entry.run} already holds this call's once key with different arguments: "
            "it is a different operation under the same key, and is refused")
    if entry.state == "unsettled":
        stopped = notes.waiting(files)
        if stopped is not None:
            return Stopped(entry.run, stopped.op, stopped.message)
        return Refused(
            "in_progress",
            f"this call is already in progress as run {entry.run}; follow it with "
            f"staal_run_status {{\"run\": \"{entry.run}\"}}")
    return answer_of_journal(entry, files, journals)


def run_status(entry: RunEntry, files: RunFiles, notes: RunNotes,
               journals: RunJournals = FILE_JOURNALS) -> RunStatus:
    """What staal_run_status answers: running, done, failed, waiting for an
    operator, expired (settled, journal gone) or unknown."""
    run = entry.run
    if entry.state == "released":
        return RunStatus(run, "unknown")
    if entry.state == "unsettled":
        stopped = notes.waiting(files)
        if stopped is not None:
            return RunStatus(run, "waiting_for_operator", op=stopped.op,
                             message=stopped.message)
        return RunStatus(run, "running")
    try:
        end = journal_end(files, journals)
    except LogDamaged:
        end = None
    if end is None:
        return RunStatus(run, "expired")
    if end.outcome == "done":
        return RunStatus(run, "done", result=end.result, content=end.content)
    assert end.failure is not None  # an end other than done says how it failed
    return RunStatus(run, "failed", kind=end.failure.kind, message=end.failure.message)


def give_up(files: RunFiles, params: tuple[str, ...], deaths: int,
            how: str, journals: RunJournals = FILE_JOURNALS) -> Ended | StoppedMsg | None:
    """After its workers died `deaths` times: a run with an op in doubt waits
    for an operator; any other fails as internal (`close_unfinished`). The
    supervisor writes the journal's record itself, since no worker holds it
    any more. None: the run never got a journal, so it never started.
    `params` are the tool's capability parameters, for the end's usage."""
    if not journal_started(files.journal):
        return None  # cut during its creation, if at all: the caller releases it
    reason = f"the worker running it died {deaths} times (the last {how})"
    return report_of(files.run, close_unfinished(files.journal, params, reason,
                                                  reopen=journals.reopen(files)))


def over_limit(files: RunFiles, params: tuple[str, ...], message: str,
               journals: RunJournals = FILE_JOURNALS) -> Ended | StoppedMsg | None:
    """After its worker was ended by its own CPU or memory limit: the run
    failed for good, as `budget` with `message` (it would fail the same way
    again, so it is not resumed), unless an op is in doubt, which waits for
    an operator as after any death. None: it never got a journal."""
    if not files.journal.exists():
        return None
    return report_of(files.run, close_unfinished(files.journal, params, message, kind="budget",
                                                  reopen=journals.reopen(files)))



def release_unstarted(ledger: Ledger, notes: RunNotes, files: RunFiles, lines: bytes) -> bool:
    """A run that never started (no worker made its journal's header
    durable, or its task was cancelled before it was handed to one): its
    reservation given back, a journal cut before its header removed, then
    it ends as any run (its kept arguments go, its log ends with `lines`).
    Whether a cut journal was removed."""
    ledger.release(files.run)
    cut = discard_unstarted(files.journal)
    notes.end(files, lines)
    return cut
