"""A run's journal as data for its caller (the `.../runs/{run}/journal`
resource): what it did, op by op, from the one journal reader
(`staal.journal.read_journal`), with nothing the caller must not see.

Kept: each op's capability, action, parameter, time, idempotency key and the
SHA-256 of its arguments; whether its outcome succeeded, the failure's kind
and what it charged; the stop and the operator's answer; how the run ended.
Left out, by rule (seed 000 section 8: messages never hold a secret, and a
client is never shown argument values): argument values, action results and
journaled clock/random values (each replaced by its SHA-256), the text a
program printed (the operator's, never the client's), failure messages of
actions (they may quote a URL or a service's answer), the program's frames,
and the server's own file paths.
"""

from __future__ import annotations

import datetime
from typing import Any

from staal.canonical import canonical_json, sha256_hex
from staal.journal import JournalState
from staal.journal_records import End, Intent, OutcomeRecord, Print, Resolved, Stopped, Value
from staal.protocol.results import internal_error_text
from staal.records import Record


def when(ms: int | None) -> str | None:
    if ms is None:
        return None
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _hash(value: Any) -> str:
    return sha256_hex(canonical_json(value))


def _money(amounts: tuple) -> list[dict[str, str]]:
    return [{"amount": str(m.amount), "currency": m.currency} for m in amounts]


def header_data(state: JournalState) -> dict[str, Any]:
    h = state.header
    return {"run": h.run, "tool": h.tool, "began": when(h.time), "runtime": h.runtime,
            "program_sha256": h.program_sha256, "config_sha256": h.config_sha256,
            "inputs_sha256": h.inputs_sha256}


def record_data(record: Record, run: str) -> dict[str, Any] | None:
    """One record after the header, as the caller may see it."""
    if isinstance(record, Intent):
        return {"type": "intent", "op": record.op, "param": record.param, "cap": record.cap,
                "action": record.action, "args_sha256": record.args_sha256,
                "idempotency_key": record.idempotency_key, "read": record.read,
                "time": when(record.time)}
    if isinstance(record, OutcomeRecord):
        data: dict[str, Any] = {"type": "outcome", "op": record.op, "ok": record.ok,
                                "time": when(record.time), "charged": _money(record.charged)}
        if record.ok:
            data["result_sha256"] = _hash(record.result)
        else:
            data["failure"] = {"kind": record.failure.kind}
        return data
    if isinstance(record, Value):
        return {"type": "value", "op": record.op, "cap": record.cap, "param": record.param,
                "value_sha256": _hash(record.value), "time": when(record.time)}
    if isinstance(record, Print):
        return {"type": "print", "seq": record.seq, "time": when(record.time)}
    if isinstance(record, Stopped):
        return {"type": "stopped", "op": record.op, "message": record.message,
                "time": when(record.time)}
    if isinstance(record, Resolved):
        answer: dict[str, Any] = {"type": "resolved", "op": record.op, "happened": record.happened,
                                  "time": when(record.time), "charged": _money(record.charged)}
        if record.happened:
            answer["result_sha256"] = _hash(record.result)
        return answer
    if isinstance(record, End):
        return end_data(record, run)
    return None


def end_data(end: End, run: str) -> dict[str, Any]:
    data: dict[str, Any] = {"type": "end", "outcome": end.outcome, "time": when(end.time),
                            "usage": {name: {"actions": u.actions, "charged": _money(u.charged)}
                                      for name, u in sorted(end.usage.items())}}
    if end.outcome == "done":
        data["result"] = end.result  # the caller's own result, as its call was answered
    elif end.failure is not None:
        internal = end.failure.kind == "internal"
        data["failure"] = {"kind": end.failure.kind,
                           "message": internal_error_text(run) if internal else end.failure.message}
    return data
