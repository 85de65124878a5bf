"""`staal journal show`: a journal as a person reads it, the whole history
in the order it happened: every attempt at an op, the stop when one was in
doubt, the operator's answer and when it was given, the new attempt under
its new key, what was printed, and how the run ended (with where the
program failed). An audit must be able to see that a person decided.

Whoever runs it can read the journal file itself: the `JOURNAL_SHOW` row
of staal.journal.disclosure's table shows them every field, and a record
kind with no row there stops the command rather than being left out."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from staal.errors import LogDamaged
from staal.journal.disclosure import JOURNAL_SHOW, NoDisclosureRule, row, shown
from staal.journal.reader import JournalState, read_journal
from staal.journal.records import End, Intent, OutcomeRecord, Print, Resolved, Stopped, Value
from staal.records.content import ContentPart
from staal.records.outcomes import format_frames
from staal.records.record import Record
from staal.runtime.utc import for_people as _when
from staal.worker.errors import WorkerError

if TYPE_CHECKING:
    from staal.money import Money


class NotAJournal(WorkerError):
    kind = "not_a_journal"


def show(path: Path) -> str:
    """The journal at `path` rendered; `NotAJournal` names a file that is
    missing or is not a journal, and `LogDamaged` a journal that is damaged."""
    if not path.exists():
        raise NotAJournal(f"{path}: no such file")
    if path.is_dir():
        raise NotAJournal(f"{path}: a directory, not a journal")
    try:
        return render(read_journal(path))
    except LogDamaged as exc:
        if exc.line == 1:
            raise NotAJournal(f"{path}: not a staal journal: its first line is not a journal "
                              f"header ({exc.reason})") from exc
        raise


def _short(value: Any, limit: int = 100) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _money(amounts: tuple[Money, ...]) -> str:
    return ", ".join(str(m) for m in amounts)


def render(state: JournalState) -> str:
    h = state.header
    row(h, JOURNAL_SHOW)
    config = shown(h, "config", JOURNAL_SHOW)
    lines = [
        f"run {h.run}  tool {h.tool}  began {_when(h.time)}",
        f"program {shown(h, 'program', JOURNAL_SHOW)}  sha256 {h.program_sha256[:16]}...  {h.runtime}",
        f"config sha256 {h.config_sha256[:16]}...  inputs sha256 {h.inputs_sha256[:16]}..."
        + (f"  from {config}" if config else ""),
        "",
    ]
    attempts: dict[int, int] = {}
    previous = None
    for record in state.history:
        lines.extend(_record_lines(record, previous, attempts))
        previous = record
    lines.extend(_now_lines(state))
    return "\n".join(lines)


def _record_lines(record: Record, previous: Record | None,
                  attempts: dict[int, int]) -> list[str]:
    row(record, JOURNAL_SHOW)
    if isinstance(record, Intent):
        attempts[record.op] = attempts.get(record.op, 0) + 1
        again = f" (attempt {attempts[record.op]})" if attempts[record.op] > 1 else ""
        key = f"  key {record.idempotency_key}" if record.idempotency_key else ""
        return [f"op {record.op:>3}  intent{again}  {record.cap} {record.action} through "
                f"'{record.param}'  at {_when(record.time)}{key}"]
    if isinstance(record, OutcomeRecord):
        failed = None if record.ok else shown(record, "failure", JOURNAL_SHOW)
        what = (_short(shown(record, "result", JOURNAL_SHOW)) if failed is None
                else f"FAILED: {failed.message}")
        charged = f"  charged {_money(record.charged)}" if record.charged else ""
        if isinstance(previous, Intent) and previous.op == record.op:
            return [f"         outcome {what}{charged}"]  # under its intent
        return [f"op {record.op:>3}  outcome  {what}{charged}  at {_when(record.time)}"]
    if isinstance(record, Value):
        return [f"op {record.op:>3}  value  {record.cap} = {_short(shown(record, 'value', JOURNAL_SHOW))}"
                f"  at {_when(record.time)}"]
    if isinstance(record, Stopped):
        return [f"STOPPED at op {record.op}, {_when(record.time)}: {record.message}"]
    if isinstance(record, Resolved):
        return [f"op {record.op:>3}  resolved by an operator at {_when(record.time)}: "
                + _answer(record)]
    if isinstance(record, Print):
        return [f"printed  {_short(shown(record, 'text', JOURNAL_SHOW))}"]
    if isinstance(record, End):
        return _end_lines(record)
    raise NoDisclosureRule(f"staal journal show has no form for {record.TYPE} records")


def _answer(record: Resolved) -> str:
    if not record.happened:
        return "did not happen (it is attempted again, under a new idempotency key if keyed)"
    charged = f", charged {_money(record.charged)}" if record.charged else ""
    return f"happened, result {_short(shown(record, 'result', JOURNAL_SHOW))}{charged}"


def _now_lines(state: JournalState) -> list[str]:
    """How the run stands after its last record, when it has no end."""
    if state.end is not None:
        return []
    doubt = state.in_doubt()
    if state.stopped is not None:
        return ["", f"WAITING for an operator: op {state.stopped.op} is in doubt"
                if state.stopped.op in doubt else f"WAITING at op {state.stopped.op}"]
    lines = [""]
    lines.extend(f"IN DOUBT: op {op} has an intent and no outcome" for op in doubt)
    lines.append("no end: the run is in progress, or was interrupted and will be resumed")
    return lines


def _part(part: ContentPart) -> str:
    """One content part, in short: its type, URI and MIME type, and its text
    or the size of its bytes."""
    if part.type == "text":
        return f"text {_short(part.text)}"
    words = [part.type, *(w for w in (part.uri, part.mime_type) if w is not None)]
    if part.text is not None:
        words.append(_short(part.text))
    else:
        words.append(f"{len(base64.b64decode(part.data or ''))} bytes")
    return " ".join(words)


def _end_lines(end: End) -> list[str]:
    usage = "; ".join(
        f"{name}: {u.actions} action{'s' if u.actions != 1 else ''}"
        + (f", charged {_money(u.charged)}" if u.charged else "")
        for name, u in sorted(end.usage.items()))
    failure = shown(end, "failure", JOURNAL_SHOW)
    content = shown(end, "content", JOURNAL_SHOW)
    if content is not None:
        what = "done: " + ", ".join(_part(part) for part in content)
    elif end.outcome == "done":
        what = f"done: {_short(shown(end, 'result', JOURNAL_SHOW))}"
    elif failure is not None:
        what = f"{end.outcome}: {failure.kind}: {failure.message}"
    else:  # a failed or error end always has its failure: not reached
        what = end.outcome
    lines = [f"END {_when(end.time)}  {what}"]
    if failure is not None:
        lines.extend(format_frames(failure.traceback, indent="  "))
    if usage:
        lines.append(f"usage  {usage}")
    return lines
