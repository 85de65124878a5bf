"""`staal resolve`: an operator's answer for an op in doubt.

Only the operator can know, from the service's own records, whether an
action in doubt happened. The answer is journaled; the next resume replays
it (happened: the given result) or performs the action (did not happen).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from staal.journal.reader import read_journal
from staal.journal.records import Resolved
from staal.journal.writer import JournalWriter
from staal.worker.capabilities import implementation
from staal.worker.errors import WorkerError


class ResolveRefused(WorkerError):
    kind = "resolve_refused"


def resolve_op(journal: Path, op: int, happened: bool, result_text: str | None) -> str:
    state = read_journal(journal)
    if state.end is not None:
        raise ResolveRefused(f"{journal}: the run has ended; nothing is in doubt")
    entry = state.ops.get(op)
    if entry is None or entry.intent is None:
        doubt = state.in_doubt()
        raise ResolveRefused(f"{journal}: op {op} is not an action of this run"
                             + (f"; in doubt: op {', '.join(map(str, doubt))}" if doubt else ""))
    if not entry.in_doubt:
        raise ResolveRefused(f"{journal}: op {op} is not in doubt (it has an outcome or an answer)")
    cap, action = entry.intent.cap, entry.intent.action
    result = _result(cap, action, happened, result_text)
    charged = implementation(cap).charged_of(action, result) if happened else ()
    with JournalWriter.reopen(journal) as writer:
        writer.write(Resolved(op=op, happened=happened, time=writer.now(), result=result,
                              charged=charged))
    said = "happened" if happened else "did not happen"
    if _served(journal):
        return (f"op {op} of run {state.header.run} recorded as {said}; the server resumes "
                "the run at its next start")
    return (f"op {op} of run {state.header.run} recorded as {said}; "
            f"resume the run to continue (staal resume --journal {journal})")


def _served(journal: Path) -> bool:
    """Whether the journal is a server's (`<journals>/<tool>/<xx>/<run id>.journal`
    beside `<journals>/server.ledger`): the server resumes its runs at start,
    and a `staal resume` beside it would run the program outside the server."""
    return (journal.resolve().parent.parent.parent / "server.ledger").is_file()


def _result(cap: str, action: str, happened: bool, text: str | None) -> Any:
    if not happened:
        if text is not None:
            raise ResolveRefused("--result goes with --happened yes only")
        return None
    if text is None:
        raise ResolveRefused("--happened yes needs --result: the action's result as JSON")
    try:
        result = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResolveRefused(f"--result: not valid JSON: {exc}") from exc
    try:
        implementation(cap).check_result(action, result)
    except ValueError as exc:
        raise ResolveRefused(f"--result: {exc}") from exc
    return result
