"""A run's spans, recorded as data in the worker (issue 17).

The worker never imports OpenTelemetry: a forked worker serves one run and
exits, so an exporter of its own would cost each run a start-up and lose
what it had not sent when the process ends. It records its run's span and
one per action with the wall clock and random ids (a few dicts per action),
and hands them to the supervisor in a `RunSpans` message just before its
last word; the supervisor exports them under the call's span. With traces
off the run message carries no traceparent, no recorder exists, and a run
pays nothing.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from staal.records.canonical import sha256_hex
from staal.records.messages import ActionOutcome, ActionSpan, Ended, RunSpans, StoppedMsg
from staal.runtime.tracecontext import new_span_id


@dataclass
class ActionNote:
    """What the run context learns of the action in progress: its op, and
    the key it carried (set as the op is performed or replayed)."""

    op: int
    key: str | None = None
    replayed: bool = False


class RunRecorder:
    """The run span (from its creation to the worker's last word) and its
    actions' spans, children of it."""

    def __init__(self, run: str, tool: str, traceparent: str, resumed: bool) -> None:
        self.run = run
        self.tool = tool
        self.traceparent = traceparent
        self.resumed = resumed
        self.span_id = new_span_id()
        self.start_ns = time.time_ns()
        self.actions: list[ActionSpan] = []

    @staticmethod
    def now() -> int:
        return time.time_ns()

    def action(self, note: ActionNote, cap: str, action: str, param: str,
               outcome: ActionOutcome, start_ns: int) -> None:
        key = None if note.key is None else sha256_hex(note.key.encode())
        self.actions.append(ActionSpan(
            span_id=new_span_id(), op=note.op, cap=cap, action=action, param=param,
            outcome=outcome, start_ns=start_ns, end_ns=time.time_ns(), key_sha256=key,
            replayed=note.replayed))

    def finish(self, report: Ended | StoppedMsg) -> RunSpans:
        if isinstance(report, StoppedMsg):
            outcome, kind = "stopped", None
        else:
            outcome = report.outcome
            kind = report.failure.kind if report.failure is not None else None
        return RunSpans(run=self.run, traceparent=self.traceparent, span_id=self.span_id,
                        tool=self.tool, outcome=outcome, start_ns=self.start_ns,
                        end_ns=time.time_ns(), pid=os.getpid(), resumed=self.resumed,
                        failure_kind=kind, actions=tuple(self.actions))
