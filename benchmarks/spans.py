"""What traces cost a run (issue 17; issue 12 is about the call path's cost).

1. Per action, in the worker: a GET through the broker with its span
   recorded (a traced run) against the same GET untraced, CPU time of this
   process (the worker's CPU is what a run pays), journal on /dev/shm so
   the fsync does not drown the difference.
2. Per run, in the worker: making the run's recorder and, at its end, the
   RunSpans message of a run with two actions, packed as it is sent.
3. Per call, in the supervisor: the call span, and the run span and two
   action spans handed to the BatchSpanProcessor (its export runs in its
   own thread, here to an exporter that drops them).

    python benchmarks/spans.py [--requests 500] [--runs 2000] [--rounds 5]

Prints Markdown tables of medians (µs of CPU).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from engine import staal_gets
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from staal.protocol.mcp.dispatch import CallTool
from staal.protocol.mcp.results import Done
from staal.records.messages import Ended, pack
from staal.runtime.tracecontext import TraceParent
from staal.supervisor.telemetry.tracing import OtelTracing
from staal.worker.runs.spans import ActionNote, RunRecorder

PARENT = TraceParent("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
RUN = "0123456789abcdef0123456789abcdef"


class Dropping(SpanExporter):
    def export(self, spans: Sequence) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def per_run(count: int) -> float:
    """CPU seconds for `count` runs' recorder and RunSpans (two actions)."""
    ended = Ended(run=RUN, outcome="done", result={"ok": True})
    start = time.process_time()
    for _ in range(count):
        recorder = RunRecorder(RUN, "refund", PARENT.header(), False)
        for op in (1, 2):
            recorder.action(ActionNote(op, key=f"{RUN}-{op}"), "payments.stripe.refund", "refund",
                            "pay", "ok", recorder.now())
        pack(recorder.finish(ended))
    return time.process_time() - start


def per_action(count: int) -> float:
    """CPU seconds for `count` action spans recorded (what `_traced` adds
    to an action: a clock read before, the note, the span after)."""
    recorder = RunRecorder(RUN, "refund", PARENT.header(), False)
    start = time.process_time()
    for op in range(1, count + 1):
        began = recorder.now()
        note = ActionNote(op, key=f"{RUN}-{op}")
        recorder.action(note, "payments.stripe.refund", "refund", "pay", "ok", began)
    return time.process_time() - start


def per_call(tracing: OtelTracing, count: int) -> float:
    """CPU seconds for `count` calls' spans in the supervisor."""
    call = CallTool(1, "refund", {}, "2026-07-28", trace=PARENT)
    ended = Ended(run=RUN, outcome="done", result={"ok": True})
    start = time.process_time()
    for _ in range(count):
        with tracing.call(call, "ab" * 32) as span:
            recorder = RunRecorder(RUN, "refund", span.traceparent, False)
            for op in (1, 2):
                recorder.action(ActionNote(op), "payments.stripe.refund", "refund", "pay", "ok",
                                recorder.now())
            tracing.worker_spans(recorder.finish(ended), span.traceparent)
            span.ended(Done(RUN, {}), RUN)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    service = Path(__file__).resolve().parent / "servers" / "http_service.py"
    server = subprocess.Popen([sys.executable, str(service)], stdout=subprocess.PIPE, text=True)
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    actions: dict[str, list[float]] = {"untraced": [], "traced": []}
    try:
        url = f"http://127.0.0.1:{int(server.stdout.readline())}/v1/orders/o1"
        for round_ in range(args.rounds):
            # Alternating which goes first, so neither always runs warmer.
            for name in (("untraced", "traced") if round_ % 2 else ("traced", "untraced")):
                recorder = RunRecorder(RUN, "bench", PARENT.header(), False) \
                    if name == "traced" else None
                with tempfile.TemporaryDirectory(dir=shm) as tmp:
                    actions[name].append(staal_gets(url, args.requests, Path(tmp), recorder,
                                                    time.process_time) / args.requests)
    finally:
        server.kill()
        server.wait()
    tracing = OtelTracing(BatchSpanProcessor(Dropping()))
    runs = [per_run(args.runs) / args.runs for _ in range(args.rounds)]
    recorded = [per_action(args.runs) / args.runs for _ in range(args.rounds)]
    calls = [per_call(tracing, args.runs) / args.runs for _ in range(args.rounds)]
    tracing.close()
    untraced, traced = (statistics.median(actions[n]) for n in ("untraced", "traced"))
    print("\n### One GET through the broker, CPU of the worker\n")
    print("| run | median CPU per action |\n|---|---|")
    print(f"| untraced | {untraced * 1e6:.1f} µs |\n| traced | {traced * 1e6:.1f} µs |")
    print(f"\ntraced - untraced: {(traced - untraced) * 1e6:.1f} µs per action")
    print("\n### What traces add, measured alone\n")
    print("| where | median CPU |\n|---|---|")
    print(f"| worker: one action's span recorded | {statistics.median(recorded) * 1e6:.1f} µs |")
    print(f"| worker: recorder, two action spans, RunSpans packed | "
          f"{statistics.median(runs) * 1e6:.1f} µs |")
    print(f"| supervisor: call span, run and action spans to the batch processor | "
          f"{statistics.median(calls) * 1e6:.1f} µs |")


if __name__ == "__main__":
    main()
