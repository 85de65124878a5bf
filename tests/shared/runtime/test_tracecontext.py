"""The pieces of traces that need no server: reading a W3C traceparent
(shared/runtime/tracecontext.py), where a call's trace context comes from (the
protocol, both revisions and the HTTP header), `server.traces` in the
manifest, and which configuration decides the export (export_plan)."""

from __future__ import annotations

import orjson
import pytest

from staal.errors import RecordError
from staal.manifest.check import check
from staal.manifest.model import TracesConfig
from staal.protocol.http.endpoint import Call, Endpoint
from staal.protocol.mcp.dispatch import CallTool, Dispatcher
from staal.protocol.mcp.revisions import trace_of
from staal.records.messages import ActionSpan, Run, RunSpans, pack, unpack
from staal.runtime.tracecontext import TraceParent, parse_traceparent
from staal.supervisor.telemetry.tracing import ExportPlan, export_plan
from tests.helpers.manifests import broken, seed_example, write_programs
from tests.protocol.http.test_endpoint import SETTINGS, body, head, modern_headers
from tests.protocol.test_support import ENVELOPE, SERVER, descriptor

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
GOOD = f"00-{TRACE}-{SPAN}-01"


# -- traceparent --------------------------------------------------------------


def test_a_valid_traceparent_names_its_trace_span_and_sampling():
    assert parse_traceparent(GOOD) == TraceParent(TRACE, SPAN, sampled=True)
    assert parse_traceparent(f"00-{TRACE}-{SPAN}-00") == TraceParent(TRACE, SPAN, sampled=False)
    # A later version may add fields; they are ignored.
    assert parse_traceparent(f"01-{TRACE}-{SPAN}-01-more") == TraceParent(TRACE, SPAN)
    assert parse_traceparent(GOOD).header() == GOOD


@pytest.mark.parametrize("value", [
    None, 7, "", "garbage", f"00-{TRACE}-{SPAN}", f"00-{TRACE.upper()}-{SPAN}-01",
    f"00-{'0' * 32}-{SPAN}-01", f"00-{TRACE}-{'0' * 16}-01", f"ff-{TRACE}-{SPAN}-01",
    f"00-{TRACE}-{SPAN}-01-extra", f"00-{TRACE[:-1]}-{SPAN}-01", "x" * 600,
])
def test_a_malformed_traceparent_is_no_parent_at_all(value):
    assert parse_traceparent(value) is None


def test_meta_traceparent_and_tracestate_are_read_and_a_bad_one_is_ignored_not_refused():
    assert trace_of({"_meta": {"traceparent": GOOD, "tracestate": "vendor=1"}}) == (
        TraceParent(TRACE, SPAN), "vendor=1")
    assert trace_of({"_meta": {"traceparent": "nonsense", "tracestate": "vendor=1"}}) == (None, None)
    assert trace_of({"_meta": {"traceparent": GOOD, "tracestate": "Bad Key=1"}}) == (
        TraceParent(TRACE, SPAN), None)
    assert trace_of({"_meta": {"traceparent": GOOD, "tracestate": "a=1, t@sys=x y"}}) == (
        TraceParent(TRACE, SPAN), "a=1,t@sys=x y")
    assert trace_of({"_meta": {"traceparent": GOOD, "tracestate": ",".join(
        f"k{i}=v" for i in range(33))}}) == (TraceParent(TRACE, SPAN), None)
    assert trace_of({"_meta": "not an object"}) == (None, None)
    assert trace_of({}) == (None, None)


@pytest.mark.parametrize("revision", ["2025-11-25", "2026-07-28"])
def test_both_revisions_hand_the_meta_traceparent_to_the_application(tmp_path, revision):
    dispatcher = Dispatcher(SERVER, [descriptor(tmp_path)])
    params = {"name": "refund_order", "arguments": {"order": "o1"}, "_meta": {"traceparent": GOOD}}
    if revision == "2026-07-28":
        params["_meta"].update(ENVELOPE)
        call = dispatcher.request(1, "tools/call", params, initialized=False)
    else:
        call = dispatcher.request(1, "tools/call", params, initialized=True)
    assert isinstance(call, CallTool), call
    assert call.revision == revision and call.trace == TraceParent(TRACE, SPAN)


def test_over_http_the_traceparent_header_is_continued_unless_the_body_names_its_own(tmp_path):
    endpoint = Endpoint(Dispatcher(SERVER, [descriptor(tmp_path)]), SETTINGS)
    other = f"00-{'1' * 32}-{'2' * 16}-01"
    params = {"name": "refund_order", "arguments": {"order": "o1"}}
    headers = modern_headers("tools/call", "refund_order", traceparent=GOOD, tracestate="a=b")
    reply = endpoint.message(head(**headers), body("tools/call", params))
    assert isinstance(reply, Call) and reply.http.call.trace == TraceParent(TRACE, SPAN)
    assert reply.http.call.tracestate == "a=b"
    own = endpoint.message(head(**headers), body("tools/call", {**params,
                                                                "_meta": {"traceparent": other}}))
    assert own.http.call.trace == parse_traceparent(other)
    bad = endpoint.message(head(**modern_headers("tools/call", "refund_order", traceparent="00-zz")),
                           body("tools/call", params))
    assert isinstance(bad, Call) and bad.http.call.trace is None  # a new trace, not an error


# -- the messages carry ids and typed fields, never values --------------------------


def test_the_run_message_and_run_spans_round_trip_and_refuse_a_bad_span_id():
    run = Run(run="a" * 32, tool="t", journal="j", inputs="i", traceparent=GOOD)
    assert unpack(pack(run)) == run
    spans = RunSpans(run="a" * 32, traceparent=GOOD, span_id="1" * 16, tool="t", outcome="done",
                     start_ns=1, end_ns=2, pid=3, actions=(ActionSpan(
                         span_id="2" * 16, op=1, cap="net.http.get", action="get", param="web",
                         outcome="ok", start_ns=1, end_ns=2),))
    assert unpack(pack(spans)) == spans
    data = orjson.loads(pack(spans))
    data["actions"][0]["span_id"] = "not-hex"
    with pytest.raises(RecordError, match=r"actions\[0\]\.span_id"):
        unpack(orjson.dumps(data))
    data["actions"][0]["span_id"] = "2" * 16
    data["actions"][0]["url"] = "https://example.com/?q=secret"
    with pytest.raises(RecordError, match="url"):
        unpack(orjson.dumps(data))


# -- configuration ---------------------------------------------------------------


def test_server_traces_is_checked_with_errors_naming_the_key_path(tmp_path):
    write_programs(tmp_path)

    def with_traces(value):
        return lambda data: data["server"].__setitem__("traces", value)

    assert broken(tmp_path, with_traces({"otlp_endpoint": "ftp://collector/v1/traces"}))[0] \
        .startswith("server.traces.otlp_endpoint:")
    assert broken(tmp_path, with_traces({"otlp_endpoint": "http://u:p@collector:4318/v1/traces"}))[0] \
        .startswith("server.traces.otlp_endpoint:")
    assert broken(tmp_path, with_traces({"service_name": ""}))[0] \
        .startswith("server.traces.service_name:")
    assert broken(tmp_path, with_traces({"endpoint": "http://collector:4318"}))[0] \
        .startswith("server.traces.endpoint:")
    assert broken(tmp_path, with_traces("http://collector:4318"))[0].startswith("server.traces:")
    data = seed_example()
    data["server"]["traces"] = {"otlp_endpoint": "http://collector:4318/v1/traces",
                                "service_name": "refunds"}
    manifest = check(data, tmp_path / "manifest.json")
    assert manifest.server.traces.otlp_endpoint == "http://collector:4318/v1/traces"
    assert manifest.server.traces.service_name == "refunds"
    assert check(seed_example(), tmp_path / "manifest.json").server.traces is None


def test_nothing_is_exported_unless_an_endpoint_is_configured():
    assert export_plan(None, {}) is None
    assert export_plan(None, {"OTEL_SERVICE_NAME": "x"}) is None


def test_the_manifest_endpoint_wins_over_the_variables_and_sdk_disabled_wins_over_both():
    config = TracesConfig(otlp_endpoint="http://m:4318/v1/traces", service_name="from-manifest")
    env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:4318/v1/traces",
           "OTEL_EXPORTER_OTLP_ENDPOINT": "http://b:4318", "OTEL_SERVICE_NAME": "from-env"}
    assert export_plan(config, env) == ExportPlan("http://m:4318/v1/traces", "from-manifest")
    assert export_plan(None, env) == ExportPlan("http://t:4318/v1/traces", "from-env")
    assert export_plan(None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://b:4318/"}) == \
        ExportPlan("http://b:4318/v1/traces", "staal")
    assert export_plan(TracesConfig(service_name="named"), env) == \
        ExportPlan("http://t:4318/v1/traces", "named")
    assert export_plan(None, {**env, "OTEL_TRACES_EXPORTER": "none"}) is None
    assert export_plan(config, {**env, "OTEL_SDK_DISABLED": "TRUE"}) is None
