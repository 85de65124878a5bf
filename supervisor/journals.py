"""The supervisor's reading of journals: which exist, and what each says
about how its run stands. (The worker replays journals; the supervisor
only needs their header, end, stop and any op in doubt, to recover, to
answer a repeated call and to report status.)"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from staal.appendlog import read_log
from staal.ids import is_run_id
from staal.money import Money
from staal.outcomes import Usage
from staal.journal_records import (
    JOURNAL, End, Header, Intent, OutcomeRecord, Resolved, Stopped, Value,
)


@dataclass(frozen=True)
class Summary:
    header: Header
    end: End | None
    stopped: Stopped | None
    # The ops with an intent and neither an outcome nor an operator's answer.
    in_doubt: tuple[int, ...]
    last_op: int
    # Per capability parameter: actions attempted and money charged, as the
    # journal records them (for an end the supervisor writes itself).
    usage: dict[str, Usage]


def find_journals(journals: Path) -> dict[str, tuple[str, Path]]:
    """Every journal under `journals`: run id -> (tool, path)."""
    found: dict[str, tuple[str, Path]] = {}
    if not journals.is_dir():
        return found
    for tool_dir in sorted(p for p in journals.iterdir() if p.is_dir() and p.name != "waiting"):
        for path in sorted(tool_dir.glob("??/*.journal")):
            run = path.stem
            if is_run_id(run) and path.parent.name == run[:2]:
                found[run] = (tool_dir.name, path)
    return found


def summarize(path: Path) -> Summary:
    """What a journal says; `LogDamaged` names the line of any damage."""
    records = read_log(path, decode=JOURNAL.decode).records
    header = records[0] if records and isinstance(records[0], Header) else None
    if header is None:
        from staal.errors import LogDamaged

        raise LogDamaged(str(path), 1, "the first record of a journal is its header")
    intents: dict[int, Intent] = {}
    settled: set[int] = set()
    end = stopped = None
    last_op = 0
    for record in records[1:]:
        if isinstance(record, Intent):
            intents[record.op] = record
            settled.discard(record.op)
            last_op = max(last_op, record.op)
        elif isinstance(record, Value):
            settled.add(record.op)
            last_op = max(last_op, record.op)
        elif isinstance(record, OutcomeRecord):
            settled.add(record.op)
        elif isinstance(record, Resolved) and record.happened:
            settled.add(record.op)
        elif isinstance(record, Resolved):
            settled.discard(record.op)
        elif isinstance(record, Stopped):
            stopped = record
        elif isinstance(record, End):
            end = record
    answered = {r.op for r in records if isinstance(r, Resolved)}
    in_doubt = tuple(sorted(op for op in intents if op not in settled and op not in answered))
    return Summary(header, end, stopped, in_doubt, last_op, _usage(records, intents))


def _usage(records: tuple, intents: dict[int, Intent]) -> dict[str, Usage]:
    actions: dict[str, int] = {}
    charged: dict[str, dict[str, Money]] = {}
    for intent in intents.values():
        root = intent.param.split(".")[0]
        actions[root] = actions.get(root, 0) + 1
    for record in records:
        if isinstance(record, OutcomeRecord) and record.op in intents:
            root = intents[record.op].param.split(".")[0]
            totals = charged.setdefault(root, {})
            for money in record.charged:
                totals[money.currency] = totals.get(money.currency, Money.zero(money.currency)) + money
    return {
        param: Usage(actions=count, charged=tuple(
            charged.get(param, {})[c] for c in sorted(charged.get(param, {}))))
        for param, count in actions.items()
    }
