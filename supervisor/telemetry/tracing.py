"""Traces (issue 17): a span per call, the worker's run span under it, and
one per action under that, exported over OTLP/HTTP only when the operator
configured an endpoint.

`tracing_for` decides once, at start, from the manifest's `server.traces`
and the standard `OTEL_*` variables (`export_plan`); with neither, the
server gets `NO_TRACING`, imports nothing of OpenTelemetry, starts no
exporter thread and opens no connection. Otherwise the SDK's tracer makes
the call spans (continuing the client's trace context when its call carried
a valid one) and a `BatchSpanProcessor` exports them from its own thread,
off the event loop. A worker never imports OpenTelemetry: it sends its
spans as data (`RunSpans`), and `OtelTracing.worker_spans` hands them to
the same processor as finished spans, with the ids and times the worker
recorded.

What a span may carry is decided here and in the `RunSpans` record's typed
fields: the tool, outcome and failure or refusal kind, run id, caller hash
(the ledger's SHA-256 of the principal), capability, action, parameter
name, op number and the idempotency key's SHA-256. Never an argument value,
a result, a URL, an error message, a secret or a token.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit

import staal
from staal.manifest.model import TracesConfig
from staal.protocol.mcp.dispatch import CallTool
from staal.protocol.mcp.results import CallOutcome, Errored, Failed, Refused, Stopped
from staal.records.messages import ActionSpan, RunSpans
from staal.runtime.tracecontext import TraceParent, parse_traceparent
from staal.supervisor.telemetry.log import Log

if TYPE_CHECKING:  # the SDK is imported only when traces are exported
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span

DEFAULT_SERVICE_NAME = "staal"
# What a span's attributes may hold here: ids, names, kinds, numbers, flags.
Attributes = dict[str, str | int | bool]
SCOPE = "staal"


@dataclass(frozen=True, slots=True)
class ExportPlan:
    """Where spans go: an OTLP/HTTP traces endpoint, as `service_name`."""

    endpoint: str
    service_name: str


def export_plan(config: TracesConfig | None, environ: Mapping[str, str]) -> ExportPlan | None:
    """Whether and where to export. `OTEL_SDK_DISABLED=true` turns traces
    off whatever else says. The manifest's `server.traces.otlp_endpoint`
    wins over the variables (it is this server's own configuration); else
    `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as it is, else
    `OTEL_EXPORTER_OTLP_ENDPOINT` with `/v1/traces` appended (the
    specification's rule), unless `OTEL_TRACES_EXPORTER` is `none`. The
    service name: the manifest's, else `OTEL_SERVICE_NAME`, else "staal"."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    endpoint = config.otlp_endpoint if config is not None else None
    if endpoint is None and environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() != "none":
        endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip() or None
        base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        if endpoint is None and base:
            endpoint = base.rstrip("/") + "/v1/traces"
    if endpoint is None:
        return None
    name = (config.service_name if config is not None else None) \
        or environ.get("OTEL_SERVICE_NAME", "").strip() or DEFAULT_SERVICE_NAME
    return ExportPlan(endpoint, name)


class CallSpan(Protocol):
    @property
    def traceparent(self) -> str | None:
        """The call span as a W3C traceparent for the worker; None when it
        is not recorded (traces off, or a parent that is not sampled)."""

    def ended(self, outcome: CallOutcome | None, run: str | None) -> None: ...


class Tracing(Protocol):
    def call(self, call: CallTool, caller: str | None) -> AbstractContextManager[CallSpan]:
        """Around one call, giving its `CallSpan`; `caller` is the
        identity's SHA-256 (None: the local client)."""

    def worker_spans(self, spans: RunSpans, sent: str) -> None:
        """A worker's spans, if they hang under `sent`, the traceparent its
        run message carried."""

    def close(self) -> None: ...


class _Unrecorded:
    """The span of every call while traces are off, and its own context
    manager: one object for all calls, no generator made per call."""

    traceparent = None

    def ended(self, outcome: CallOutcome | None, run: str | None) -> None:
        pass

    def __enter__(self) -> _Unrecorded:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_UNRECORDED = _Unrecorded()


class NoTracing:
    """Traces off: nothing recorded, imported, exported or connected."""

    def call(self, call: CallTool, caller: str | None) -> AbstractContextManager[CallSpan]:
        return _UNRECORDED

    def worker_spans(self, spans: RunSpans, sent: str) -> None:
        pass

    def close(self) -> None:
        pass


NO_TRACING = NoTracing()


def outcome_attributes(outcome: CallOutcome | None) -> dict[str, str]:
    """A call's outcome as span attributes: what it came to and its kind,
    never its message (it may quote the caller's arguments)."""
    if outcome is None:
        return {"staal.call.outcome": "cancelled"}
    if isinstance(outcome, Failed):
        return {"staal.call.outcome": "failed", "staal.failure.kind": outcome.kind}
    if isinstance(outcome, Errored):
        return {"staal.call.outcome": "error", "staal.failure.kind": outcome.kind}
    if isinstance(outcome, Refused):
        return {"staal.call.outcome": "refused", "staal.refusal.kind": outcome.kind}
    if isinstance(outcome, Stopped):
        return {"staal.call.outcome": "stopped"}
    return {"staal.call.outcome": "ok"}


class _OtelCallSpan:
    def __init__(self, span: Span) -> None:
        self.span = span

    @property
    def traceparent(self) -> str | None:
        if not self.span.is_recording():
            return None
        context = self.span.get_span_context()
        return TraceParent(f"{context.trace_id:032x}", f"{context.span_id:016x}",
                           context.trace_flags.sampled).header()

    def ended(self, outcome: CallOutcome | None, run: str | None) -> None:
        from opentelemetry.trace import Status, StatusCode

        attributes: dict[str, str] = outcome_attributes(outcome)
        if run is not None:
            attributes["staal.run.id"] = run
        self.span.set_attributes(attributes)
        if isinstance(outcome, (Failed, Errored)):
            self.span.set_status(Status(StatusCode.ERROR, outcome.kind))


class OtelTracing:
    """Traces through the OpenTelemetry SDK: `processor` (a batch one over
    OTLP/HTTP in `serve`; a test may give a simple one over its in-memory
    exporter) receives the call spans and the workers' alike."""

    def __init__(self, processor: SpanProcessor, service_name: str = DEFAULT_SERVICE_NAME) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider

        self.processor = processor
        resource = Resource.create({"service.name": service_name,
                                    "service.version": staal.__version__})
        # Not the global provider: the server's spans are its own, and a
        # test may make several.
        self.provider: TracerProvider = TracerProvider(resource=resource, shutdown_on_exit=False)
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer(SCOPE, staal.__version__)

    @contextmanager
    def call(self, call: CallTool, caller: str | None) -> Iterator[CallSpan]:
        from opentelemetry.trace import SpanKind, Status, StatusCode

        attributes = {"staal.tool": call.name, "mcp.method.name": "tools/call",
                      "mcp.protocol.version": call.revision}
        if caller is not None:
            attributes["staal.caller.hash"] = caller
        span = self.tracer.start_span(f"tools/call {call.name}", context=_parent(call),
                                      kind=SpanKind.SERVER, attributes=attributes)
        try:
            yield _OtelCallSpan(span)
        except BaseException as exc:
            # The type only: an exception's message may hold anything.
            span.set_attributes({"staal.call.outcome": "internal",
                                 "error.type": type(exc).__name__})
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise
        finally:
            span.end()

    def worker_spans(self, spans: RunSpans, sent: str) -> None:
        """A worker's run span and its actions', as finished spans. Only
        under the call span this server sent it: a worker cannot put spans
        into another trace."""
        parent = parse_traceparent(spans.traceparent)
        if parent is None or spans.traceparent != sent:
            return
        trace_id = int(parent.trace_id, 16)
        run_attributes: Attributes = {
            "staal.tool": spans.tool, "staal.run.id": spans.run, "staal.run.outcome": spans.outcome,
            "staal.run.resumed": spans.resumed, "process.pid": spans.pid}
        if spans.failure_kind is not None:
            run_attributes["staal.failure.kind"] = spans.failure_kind
        self.processor.on_end(self._finished(
            f"staal.run {spans.tool}", trace_id, spans.span_id, parent.span_id, run_attributes,
            spans.start_ns, spans.end_ns, error=spans.outcome in ("failed", "error")))
        for action in spans.actions:
            self.processor.on_end(self._finished(
                f"staal.action {action.cap}", trace_id, action.span_id, spans.span_id,
                action_attributes(spans.run, action), action.start_ns, action.end_ns,
                error=action.outcome == "failed"))

    def _finished(self, name: str, trace_id: int, span_id: str, parent_id: str,
                  attributes: Attributes, start_ns: int, end_ns: int,
                  error: bool) -> ReadableSpan:
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

        flags = TraceFlags(TraceFlags.SAMPLED)
        return ReadableSpan(
            name=name,
            context=SpanContext(trace_id, int(span_id, 16), is_remote=False, trace_flags=flags),
            parent=SpanContext(trace_id, int(parent_id, 16), is_remote=False, trace_flags=flags),
            resource=self.provider.resource, attributes=attributes, kind=SpanKind.INTERNAL,
            status=Status(StatusCode.ERROR) if error else Status(StatusCode.UNSET),
            start_time=start_ns, end_time=max(start_ns, end_ns),
            instrumentation_scope=InstrumentationScope(SCOPE, staal.__version__))

    def close(self) -> None:
        """Export what is pending (bounded by the exporter's timeout) and stop."""
        self.provider.shutdown()


def action_attributes(run: str, action: ActionSpan) -> Attributes:
    attributes: Attributes = {
        "staal.run.id": run, "staal.action.capability": action.cap,
        "staal.action.name": action.action, "staal.action.param": action.param,
        "staal.action.op": action.op, "staal.action.outcome": action.outcome,
        "staal.action.replayed": action.replayed}
    if action.key_sha256 is not None:
        attributes["staal.action.idempotency_key_sha256"] = action.key_sha256
    return attributes


def _parent(call: CallTool) -> Context | None:
    """The client's span as the call span's parent context; None (a new
    trace) when the call carried none, or none that was valid."""
    if call.trace is None:
        return None
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

    state = TraceState.from_header([call.tracestate]) if call.tracestate else None
    context = SpanContext(int(call.trace.trace_id, 16), int(call.trace.span_id, 16), is_remote=True,
                          trace_flags=TraceFlags(1 if call.trace.sampled else 0), trace_state=state)
    return trace.set_span_in_context(NonRecordingSpan(context))


class _ToLog(logging.Handler):
    """The SDK's own complaints (an export that failed) as the server's log
    events, so stderr stays one JSON object per line."""

    def __init__(self, log: Log) -> None:
        super().__init__(level=logging.WARNING)
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        self.log("traces_export", level="warning", message=record.getMessage())


def shown_endpoint(endpoint: str) -> str:
    """The endpoint for the log: scheme, host, port and path; a variable's
    value could carry credentials or a query, which are left out."""
    parts = urlsplit(endpoint)
    host = parts.hostname or "?"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def tracing_for(config: TracesConfig | None, environ: Mapping[str, str], log: Log,
                exporter: SpanExporter | None = None) -> NoTracing | OtelTracing:
    """The server's tracing: none unless `export_plan` finds an endpoint
    (or a test gives an exporter, exported through at once)."""
    if exporter is not None:
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor

        return OtelTracing(SimpleSpanProcessor(exporter))
    plan = export_plan(config, environ)
    if plan is None:
        return NO_TRACING
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    otel_logger = logging.getLogger("opentelemetry")
    otel_logger.addHandler(_ToLog(log))
    otel_logger.propagate = False
    log("traces", endpoint=shown_endpoint(plan.endpoint), service_name=plan.service_name)
    return OtelTracing(BatchSpanProcessor(OTLPSpanExporter(endpoint=plan.endpoint)), plan.service_name)
