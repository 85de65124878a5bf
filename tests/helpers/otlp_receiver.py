"""An OTLP/HTTP traces receiver written for the tests (the OpenTelemetry
Collector is not on PyPI): a real HTTP server on a loopback port that takes
`POST /v1/traces`, decodes each body as the protobuf
`ExportTraceServiceRequest` with `opentelemetry-proto`, as a collector
does, and answers 200 with an empty `ExportTraceServiceResponse`."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.helpers.servers import WAIT


@dataclass(frozen=True)
class Received:
    """One exported span, as the receiver decoded it."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    service_name: str


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[Received] = []
        self.requests: list[dict[str, str]] = []
        self._cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver._take(request, {k.lower(): v for k, v in self.headers.items()})
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="otlp", daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/v1/traces"

    def _take(self, request: ExportTraceServiceRequest, headers: dict[str, str]) -> None:
        received = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(Received(
                        name=span.name, trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        service_name=resource.get("service.name", "")))
        with self._cond:
            self.spans.extend(received)
            self.requests.append(headers)
            self._cond.notify_all()

    def wait(self, count: int, timeout: float = WAIT) -> list[Received]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.spans) >= count, timeout), (
                f"the receiver got {len(self.spans)} spans, not {count}, in {timeout} s")
            return list(self.spans)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
