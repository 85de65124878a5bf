"""A run's journal as data for its caller (the `.../runs/{run}/journal`
resource): what it did, op by op, from the one journal reader
(`staal.journal.reader.read_journal`), with nothing the caller must not see: what
that is, is the `CALLER` row of staal.journal.disclosure's table.

Shown: each op's capability, action, parameter, time, idempotency key and
the SHA-256 of its arguments; whether its outcome succeeded, the failure's
kind and what it charged, the SHA-256 of its result; the SHA-256 of a
journaled clock or random value; that a print happened, never its text; the
stop and the operator's answer; how the run ended, with the caller's own
result, and for an internal failure the text its call was answered with.
"""

from __future__ import annotations

from typing import Any

from staal.journal.disclosure import NoDisclosureRule, may_see, row
from staal.journal.reader import JournalState
from staal.journal.records import End, Intent, OutcomeRecord, Print, Resolved, Stopped, Value
from staal.money import Money
from staal.protocol.mcp.results import content_items
from staal.records.record import Record
from staal.runtime.utc import for_machines
from staal.supervisor.views.disclosure import (
    CALLER,
    action_failure,
    end_failure,
    end_result,
    hashed,
    printed,
)


def when(ms: int | None) -> str | None:
    if ms is None:
        return None
    return for_machines(ms)


def _money(amounts: tuple[Money, ...]) -> list[dict[str, str]]:
    return [{"amount": str(m.amount), "currency": m.currency} for m in amounts]


def header_data(state: JournalState) -> dict[str, Any]:
    h = state.header
    row(h, CALLER)  # the header's paths (program, config) are not the caller's
    return {"run": h.run, "tool": h.tool, "began": when(h.time), "runtime": h.runtime,
            "program_sha256": h.program_sha256, "config_sha256": h.config_sha256,
            "inputs_sha256": h.inputs_sha256}


def record_data(record: Record, run: str) -> dict[str, Any]:
    """One record after the header, as the caller may see it;
    `NoDisclosureRule` for a kind the table has no row for."""
    row(record, CALLER)
    if isinstance(record, Intent):
        return {"type": "intent", "op": record.op, "param": record.param, "cap": record.cap,
                "action": record.action, "args_sha256": record.args_sha256,
                "idempotency_key": record.idempotency_key, "read": record.read,
                "time": when(record.time)}
    if isinstance(record, OutcomeRecord):
        data: dict[str, Any] = {"type": "outcome", "op": record.op, "ok": record.ok,
                                "time": when(record.time), "charged": _money(record.charged)}
        if record.ok:
            data["result_sha256"] = hashed(record, "result", CALLER)
        else:
            data["failure"] = {"kind": action_failure(record, CALLER)}
        return data
    if isinstance(record, Value):
        return {"type": "value", "op": record.op, "cap": record.cap, "param": record.param,
                "value_sha256": hashed(record, "value", CALLER), "time": when(record.time)}
    if isinstance(record, Print):
        data = {"type": "print", "seq": record.seq, "time": when(record.time)}
        text = printed(record, CALLER)
        if text is not None:
            data["text"] = text
        return data
    if isinstance(record, Stopped):
        return {"type": "stopped", "op": record.op, "message": record.message,
                "time": when(record.time)}
    if isinstance(record, Resolved):
        answer: dict[str, Any] = {"type": "resolved", "op": record.op, "happened": record.happened,
                                  "time": when(record.time), "charged": _money(record.charged)}
        if record.happened:
            answer["result_sha256"] = hashed(record, "result", CALLER)
        return answer
    if isinstance(record, End):
        return end_data(record, run)
    raise NoDisclosureRule(f"the caller's journal has no form for {record.TYPE} records")


def end_data(end: End, run: str) -> dict[str, Any]:
    data: dict[str, Any] = {"type": "end", "outcome": end.outcome, "time": when(end.time),
                            "usage": {name: {"actions": u.actions, "charged": _money(u.charged)}
                                      for name, u in sorted(end.usage.items())}}
    shown, result = end_result(end, CALLER)
    if shown:
        data["result"] = result
    if end.content is not None and may_see(end, "content", CALLER):
        data["content"] = list(content_items(end.content))  # as the call was answered
    failure = end_failure(end, run, CALLER)
    if end.outcome != "done" and failure is not None:
        data["failure"] = {"kind": failure[0], "message": failure[1]}
    return data
