"""`staal journal show`: a journal as a person reads it."""

from __future__ import annotations

import datetime
import json
from typing import Any

from staal.journal_records import End
from staal.worker.journal import JournalState


def _when(ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _short(value: Any, limit: int = 100) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def render(state: JournalState) -> str:
    h = state.header
    lines = [
        f"run {h.run}  tool {h.tool}  began {_when(h.time)}",
        f"program {h.program}  sha256 {h.program_sha256[:16]}...  {h.runtime}",
        f"config sha256 {h.config_sha256[:16]}...  inputs sha256 {h.inputs_sha256[:16]}..."
        + (f"  from {h.config}" if h.config else ""),
        "",
    ]
    for op, entry in sorted(state.ops.items()):
        lines.extend(_op_lines(op, entry))
    if state.prints:
        lines.append(f"printed {state.prints} line{'s' if state.prints != 1 else ''} "
                     "(shown on stderr when printed)")
    if state.stopped is not None:
        lines.append(f"STOPPED at op {state.stopped.op}, {_when(state.stopped.time)}: "
                     f"{state.stopped.message}")
    if state.end is not None:
        lines.append(_end_line(state.end))
    elif state.stopped is None:
        lines.append("no end: the run is in progress, or was interrupted and will be resumed")
    return "\n".join(lines)


def _op_lines(op: int, entry: Any) -> list[str]:
    if entry.value is not None:
        return [f"op {op:>3}  value   {entry.value.cap} = {_short(entry.value.value)}"]
    intent = entry.intent
    key = f"  key {intent.idempotency_key}" if intent.idempotency_key else ""
    lines = [f"op {op:>3}  intent  {intent.cap} {intent.action} through '{intent.param}'"
             f"  at {_when(intent.time)}{key}"]
    if entry.outcome is not None:
        outcome = entry.outcome
        what = _short(outcome.result) if outcome.ok else f"FAILED: {outcome.failure.message}"
        charged = ", ".join(str(m) for m in outcome.charged)
        lines.append(f"         outcome {what}" + (f"  charged {charged}" if charged else ""))
    if entry.resolved is not None:
        said = "happened" if entry.resolved.happened else "did not happen"
        lines.append(f"         resolved by an operator: {said}"
                     + (f", result {_short(entry.resolved.result)}" if entry.resolved.happened else ""))
    if entry.in_doubt:
        lines.append("         IN DOUBT: no outcome was recorded")
    return lines


def _end_line(end: End) -> str:
    usage = "; ".join(
        f"{name}: {u.actions} action{'s' if u.actions != 1 else ''}"
        + (", charged " + ", ".join(str(m) for m in u.charged) if u.charged else "")
        for name, u in sorted(end.usage.items()))
    if end.outcome == "done":
        what = f"done: {_short(end.result)}"
    else:
        what = f"{end.outcome}: {end.failure.kind}: {end.failure.message}"
    return f"END {_when(end.time)}  {what}" + (f"\nusage  {usage}" if usage else "")
