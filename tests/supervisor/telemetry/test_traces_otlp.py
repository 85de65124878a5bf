"""Traces exported by the real server process over OTLP/HTTP to a receiver
written in the test (tests/helpers/otlp_receiver.py, decoding the protobuf as a
collector does): configured by the manifest's `server.traces` over stdio,
and by the standard OTEL_* variables over Streamable HTTP, continuing the
client's trace from `_meta.traceparent` and from the `traceparent` header.
Nothing configured: nothing of OpenTelemetry is even imported."""

from __future__ import annotations

import os

import pytest

from tests.helpers.http_servers import HttpServer
from tests.helpers.otlp_receiver import OtlpReceiver
from tests.helpers.servers import Site, stripe_refund_grant
from tests.supervisor.telemetry.test_tracing import REFUND, usd

TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE}-{CLIENT_SPAN}-01"
ECHO = "def main(text: str) -> dict:\n    return {'echo': text}\n"


@pytest.fixture
def receiver():
    receiver = OtlpReceiver()
    try:
        yield receiver
    finally:
        receiver.stop()


def without_otel(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment with none of the test machine's own OTEL_* variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(extra or {})
    return env


def test_stdio_server_configured_by_manifest_exports_call_run_and_action_spans_under_the_clients_trace(
        tmp_path, payments, receiver):
    from tests.helpers.servers import RawServer

    site = Site(tmp_path)
    site.program("refund.py", REFUND)
    site.write([{"name": "refund", "program": "refund.py",
                 "grants": {"pay": stripe_refund_grant(payments.base)},
                 "net": {"timeout_ms": 20000, "connect_timeout_ms": 2000}}],
               traces={"otlp_endpoint": receiver.endpoint, "service_name": "refunds-test"})
    intent = payments.intent(amount=5000)
    env = without_otel({"STRIPE_SECRET_KEY": payments.key})
    with RawServer(site, env=env) as server:
        server.initialize()
        answer = server.call("tools/call", {"name": "refund", "_meta": {"traceparent": TRACEPARENT},
                                            "arguments": {"order": intent["id"],
                                                          "amount": usd("35.00")}})
        assert answer["result"]["isError"] is False, answer
        server.close_stdin()
        assert server.wait_exit() == 0
    spans = receiver.wait(4)
    by_name = {s.name: s for s in spans}
    call, run = by_name["tools/call refund"], by_name["staal.run refund"]
    actions = [s for s in spans if s.name == "staal.action payments.stripe.refund"]
    assert len(spans) == 4 and len(actions) == 2
    assert {s.trace_id for s in spans} == {TRACE}
    assert call.parent_span_id == CLIENT_SPAN
    assert run.parent_span_id == call.span_id
    assert {a.parent_span_id for a in actions} == {run.span_id}
    assert {s.service_name for s in spans} == {"refunds-test"}
    assert sorted(a.attributes["staal.action.op"] for a in actions) == [1, 2]
    assert call.attributes["staal.call.outcome"] == "ok"
    run_id = call.attributes["staal.run.id"]
    assert run.attributes["staal.run.id"] == run_id and len(run_id) == 32
    text = repr(spans) + repr(receiver.requests)
    for value in (payments.key, intent["id"], "35.00", payments.base, f"{run_id}-2"):
        assert value not in text, value


def test_http_server_configured_by_otel_variables_continues_the_traceparent_header(
        tmp_path, receiver):
    site = Site(tmp_path)
    site.program("echo.py", ECHO)
    site.write([{"name": "echo", "program": "echo.py"}])
    base = receiver.endpoint.removesuffix("/v1/traces")
    env = without_otel({"OTEL_EXPORTER_OTLP_ENDPOINT": base, "OTEL_SERVICE_NAME": "echo-http"})
    with HttpServer(site, env=env) as http:
        answer = http.modern("tools/call", {"name": "echo", "arguments": {"text": "s3cr3t-word"}},
                             headers={"traceparent": TRACEPARENT})
        assert answer.status_code == 200
        assert answer.json()["result"]["structuredContent"] == {"result": {"echo": "s3cr3t-word"}}
    spans = receiver.wait(2)
    by_name = {s.name: s for s in spans}
    call, run = by_name["tools/call echo"], by_name["staal.run echo"]
    assert call.trace_id == run.trace_id == TRACE
    assert call.parent_span_id == CLIENT_SPAN and run.parent_span_id == call.span_id
    assert call.service_name == "echo-http"
    assert call.attributes["mcp.protocol.version"] == "2026-07-28"
    assert "s3cr3t-word" not in repr(spans)


def test_with_nothing_configured_the_server_imports_no_opentelemetry_and_starts_no_exporter(
        tmp_path):
    from tests.helpers.servers import RawServer

    site = Site(tmp_path)
    site.program("echo.py", ECHO)
    site.write([{"name": "echo", "program": "echo.py"}])
    # The interpreter reports every module it imports on stderr.
    with RawServer(site, env=without_otel({"PYTHONPROFILEIMPORTTIME": "1"})) as server:
        server.initialize()
        answer = server.call("tools/call", {"name": "echo", "arguments": {"text": "hi"},
                                            "_meta": {"traceparent": TRACEPARENT}})
        assert answer["result"]["isError"] is False
        server.close_stdin()
        assert server.wait_exit() == 0
    imports = [line for line in site.stderr_path.read_text().splitlines()
               if line.startswith("import time:")]
    assert any(line.endswith("staal.supervisor.app.server") for line in imports)  # the report works
    assert not [line for line in imports if "opentelemetry" in line]
    assert not server.stderr.events("traces")  # the line a server exporting spans logs at start


def test_otel_sdk_disabled_turns_off_even_an_endpoint_the_manifest_names(tmp_path, receiver):
    from tests.helpers.servers import RawServer

    site = Site(tmp_path)
    site.program("echo.py", ECHO)
    site.write([{"name": "echo", "program": "echo.py"}], traces={"otlp_endpoint": receiver.endpoint})
    with RawServer(site, env=without_otel({"OTEL_SDK_DISABLED": "true"})) as server:
        server.initialize()
        answer = server.call("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        assert answer["result"]["isError"] is False
        server.close_stdin()
        assert server.wait_exit() == 0
    assert receiver.requests == [] and receiver.spans == []
    assert not server.stderr.events("traces")


# The official Python SDK, traced by the SDK of OpenTelemetry as an agent
# would be: it injects its span into `_meta` (SEP-414). Run in its own
# process: a global tracer provider here would change every other test's
# traffic.
SDK_CLIENT = """
import asyncio, json, os, sys

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

manifest, mode = sys.argv[1], sys.argv[2]
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)


async def main():
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "staal.supervisor.app.main", "serve", manifest],
        env={k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ},
        cwd=os.path.dirname(manifest))
    with trace.get_tracer("agent").start_as_current_span("agent turn"):
        async with Client(stdio_client(params), mode=mode) as client:
            result = await client.call_tool("echo", {"text": "hi"})
    spans = [{"name": s.name, "trace_id": f"{s.context.trace_id:032x}",
              "span_id": f"{s.context.span_id:016x}"} for s in exporter.get_finished_spans()]
    print(json.dumps({"error": result.is_error, "spans": spans}))


asyncio.run(main())
"""


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_the_official_sdk_traced_by_opentelemetry_has_its_call_continued_by_the_server(
        tmp_path, receiver, mode):
    import json
    import subprocess
    import sys

    from tests.helpers.servers import START_WAIT

    site = Site(tmp_path)
    site.program("echo.py", ECHO)
    site.write([{"name": "echo", "program": "echo.py"}], traces={"otlp_endpoint": receiver.endpoint})
    script = tmp_path / "agent.py"
    script.write_text(SDK_CLIENT)
    done = subprocess.run([sys.executable, str(script), str(site.manifest), mode],
                          env=without_otel(), capture_output=True, text=True, timeout=START_WAIT * 2,
                          check=False)
    assert done.returncode == 0, done.stderr
    client = json.loads(done.stdout.strip().splitlines()[-1])
    assert client["error"] is False
    [sent] = [s for s in client["spans"] if s["name"] == "MCP send tools/call echo"]
    spans = receiver.wait(2)
    [call] = [s for s in spans if s.name == "tools/call echo"]
    [run] = [s for s in spans if s.name == "staal.run echo"]
    # The server's call span is a child of the SDK's span for the request.
    assert call.trace_id == sent["trace_id"] and call.parent_span_id == sent["span_id"]
    assert run.parent_span_id == call.span_id
