"""An in-process supervisor whose spans go to the SDK's in-memory exporter:
the real server (its ledger, zygote and forked workers), started in the
test's own event loop with `serve`, and a transport that makes the test's
calls through `Server.outcome_of`, the pipeline every transport uses.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from staal.manifest.check import load_manifest
from staal.protocol.mcp.dispatch import CallTool
from staal.protocol.mcp.results import CallOutcome
from staal.protocol.mcp.revisions import MODERN
from staal.runtime.tracecontext import TraceParent
from staal.supervisor.app.server import Server, serve
from staal.supervisor.auth.callers import LOCAL, Admitted
from staal.supervisor.calls.pipeline import CallState
from staal.supervisor.telemetry.log import StderrLog
from staal.supervisor.telemetry.tracing import tracing_for

CLIENT = TraceParent("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")


def a_call(name: str, arguments: dict[str, Any], trace: TraceParent | None = CLIENT,
           request_id: int = 1, tracestate: str | None = None) -> CallTool:
    return CallTool(request_id, name, arguments, MODERN, trace=trace, tracestate=tracestate)


@dataclass
class Traced:
    outcomes: list[CallOutcome | None]
    spans: list[ReadableSpan]

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.spans if s.name.startswith(prefix)]

    def children_of(self, span: ReadableSpan) -> list[ReadableSpan]:
        return [s for s in self.spans
                if s.parent is not None and s.parent.span_id == span.context.span_id]


def run_traced(manifest: Path, calls: list[CallTool], log_path: Path,
               admitted: Admitted = LOCAL) -> Traced:
    """Serve `manifest` in this process, make `calls` one after another as
    the caller `admitted`, and return their outcomes and every span
    exported meanwhile."""
    exporter = InMemorySpanExporter()
    outcomes: list[CallOutcome | None] = []

    async def transport(server: Server) -> None:
        for call in calls:
            outcomes.append(await server.outcome_of(call, CallState(), admitted))

    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        log = StderrLog("json", fd)
        tracing = tracing_for(None, {}, log, exporter=exporter)
        code = asyncio.run(serve(load_manifest(manifest), transport, log, tracing=tracing))
    finally:
        os.close(fd)
    assert code == 0, log_path.read_text()
    return Traced(outcomes, list(exporter.get_finished_spans()))
