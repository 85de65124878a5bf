"""The metrics listener (`server.metrics.listen`): GET /metrics in
Prometheus' text format, written with prometheus_client from what
`Metrics` counted and what the ledger holds at the scrape.

Why uvicorn in the supervisor's loop, not prometheus_client's own server in
a thread: the counts and the runs in progress belong to the loop and are
read there without a lock, one concurrency model serves both listeners, and
SIGTERM or the end of stdio stops it with the server. A scrape reads the
ledger in a thread (its reads wait for durable events), never in the loop.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from staal.manifest.addresses import url_host
from staal.manifest.model import Manifest
from staal.runtime.timings import TIMINGS, Histogram, Tally
from staal.supervisor.telemetry.metrics import Metrics
from staal.supervisor.transport.http_connections import gated_protocol
from staal.supervisor.transport.listeners import InLoopUvicorn

if TYPE_CHECKING:
    from staal.supervisor.calls.tool_runtime import ToolRuntime
    from staal.supervisor.store.ledger import Ledger
    from staal.supervisor.store.notes import RunNotes

Send = Callable[[dict[str, Any]], Awaitable[None]]
# The text format every Prometheus reads (the names here are plain ASCII, so
# the 1.0.0 format's escaping changes nothing).
CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"
SCRAPES_AT_ONCE = 32  # past it a scrape is 503


@dataclass(frozen=True)
class Observed:
    """What a scrape reads of the running server: the tools' runtimes and
    the pool's death counts (held by the loop, read as they are), and the
    store the stored metrics are read from."""

    tools: Mapping[str, ToolRuntime]
    deaths: Mapping[str, int]
    manifest: Manifest
    ledger: Ledger
    notes: RunNotes


def counted(metrics: Metrics, observed: Observed) -> list[Metric]:
    """What the loop holds, read in the loop (no lock needed)."""
    calls = CounterMetricFamily("staal_calls", "Tool calls answered, by tool and outcome.",
                                labels=("tool", "outcome"))
    for (tool, outcome), n in sorted(metrics.calls.items()):
        calls.add_metric((tool, outcome), n)
    refusals = CounterMetricFamily(
        "staal_refusals", "Calls refused for busy (no slot or worker), quota (the tool's or "
        "the caller's) or rate (the caller's rate limit).", labels=("tool", "reason"))
    for (tool, reason), n in sorted(metrics.refusals.items()):
        refusals.add_metric((tool, reason), n)
    running = GaugeMetricFamily("staal_runs_in_progress", "Calls holding a concurrency slot "
                                "now (taking a worker, reserving or running).", labels=("tool",))
    for name, runtime in sorted(observed.tools.items()):
        running.add_metric((name,), runtime.running)
    deaths = CounterMetricFamily(
        "staal_worker_deaths", "Workers that exited other than at the end of their run: "
        "during a run (it is resumed) or before one.", labels=("during",))
    for during, n in sorted(observed.deaths.items()):
        deaths.add_metric((during,), n)
    actions = HistogramMetricFamily("staal_action_duration_seconds", "How long each action "
                                    "took in the worker, by capability.", labels=("capability",))
    for cap, histogram in sorted(metrics.actions.items()):
        _add_histogram(actions, (cap,), histogram)
    fsync = HistogramMetricFamily("staal_fsync_duration_seconds", "How long each fsync took: "
                                  "the supervisor's (ledger, arguments, waiting records) and "
                                  "the workers' (journals).", labels=("process",))
    _add_histogram(fsync, ("supervisor",), TIMINGS.fsync)
    _add_histogram(fsync, ("worker",), metrics.worker_fsync)
    return [calls, refusals, running, deaths, actions, fsync]



def stored(manifest: Manifest, ledger: Ledger, notes: RunNotes) -> list[Metric]:
    """What the ledger and the waiting records hold, read in a thread (on a
    shared store, every instance's waiting runs)."""
    waiting = GaugeMetricFamily("staal_runs_waiting", "Runs waiting for an operator (an op in "
                                "doubt: see staal-supervisor status).", labels=("tool",))
    counts = {tool.name: 0 for tool in manifest.tools}
    records = notes.all_waiting()
    for entry in ledger.unsettled():
        if entry.run in records:
            counts[entry.tool] = counts.get(entry.tool, 0) + 1
    for name, n in sorted(counts.items()):
        waiting.add_metric((name,), n)
    used = GaugeMetricFamily("staal_quota_used", "Each tool's quota use over its window: calls, "
                             "or money held and spent in the quota's currency.",
                             labels=("tool", "quota"))
    limit = GaugeMetricFamily("staal_quota_limit", "Each tool's quota limit, as staal_quota_used.",
                              labels=("tool", "quota"))
    for tool in manifest.tools:
        if tool.quota is None:
            continue
        use = ledger.quota_use(tool.name, tool.quota)
        if use.calls_limit is not None:
            used.add_metric((tool.name, "calls"), use.calls)
            limit.add_metric((tool.name, "calls"), use.calls_limit)
        if use.money is not None and use.money_limit is not None:
            used.add_metric((tool.name, use.money.currency), float(use.money.amount))
            limit.add_metric((tool.name, use.money_limit.currency), float(use.money_limit.amount))
    return [waiting, used, limit]


def _add_histogram(family: HistogramMetricFamily, labels: tuple[str, ...],
                   histogram: Histogram) -> None:
    tally = histogram.tally()  # once: buckets and sum from the same moment
    family.add_metric(list(labels), _cumulative(histogram.bounds, tally),
                      sum_value=tally.sum_ns / 1e9)


def _cumulative(bounds: Iterable[float], tally: Tally) -> list[tuple[str, int]]:
    total, buckets = 0, []
    for bound, n in zip((*(repr(b) for b in bounds), "+Inf"), tally.counts, strict=True):
        total += n
        buckets.append((bound, total))
    return buckets


class _Families:
    """A collector that yields the families one scrape gathered."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def exposition(families: list[Metric]) -> bytes:
    """The families in Prometheus' text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry)


class MetricsApp:
    """The listener's ASGI app: GET /metrics, nothing else."""

    def __init__(self, observed: Observed, metrics: Metrics) -> None:
        self.observed = observed
        self.metrics = metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != "/metrics":
            await _answer(send, 404, b"the metrics are at /metrics\n", b"text/plain; charset=utf-8")
        elif scope["method"] not in ("GET", "HEAD"):
            await _answer(send, 405, b"GET only\n", b"text/plain; charset=utf-8")
        else:
            families = counted(self.metrics, self.observed)
            families += await asyncio.to_thread(stored, self.observed.manifest,
                                                self.observed.ledger, self.observed.notes)
            body = exposition(families)
            await _answer(send, 200, body if scope["method"] == "GET" else b"",
                          CONTENT_TYPE)


async def _answer(send: Send, status: int, body: bytes, content_type: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", content_type), (b"cache-control", b"no-store")]})
    await send({"type": "http.response.body", "body": body})


def metrics_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{url_host(host)}:{port}/metrics"


async def serve_metrics(observed: Observed, metrics: Metrics, sock: socket.socket,
                        done: asyncio.Event) -> None:
    """Serve /metrics on `sock` until `done` is set (the server closing)."""
    import uvicorn

    # Idle sockets wait apart from scrapes (http_connections.py): uvicorn's
    # limit_concurrency would count them, and 32 of them stopped every scrape.
    config = uvicorn.Config(MetricsApp(observed, metrics), loop="none", lifespan="off",
                            log_config=None, access_log=False, server_header=False,
                            proxy_headers=False, timeout_keep_alive=5,
                            http=gated_protocol(SCRAPES_AT_ONCE),
                            timeout_graceful_shutdown=1, limit_concurrency=None)
    uv = InLoopUvicorn(config)

    async def stop_when_done() -> None:
        await done.wait()
        uv.should_exit = True

    stopping = asyncio.ensure_future(stop_when_done())
    try:
        await uv.serve(sockets=[sock])
    finally:
        stopping.cancel()
