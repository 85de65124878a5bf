"""Prometheus metrics beside `serve --http` (issue 17, items 2 and 4): a
caller's rate limit counted as a refusal of its own, the metrics on their
own listener and never on the MCP endpoint, and a listener beyond loopback
refused unless the manifest allows it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import httpx
import pytest

from staal.manifest.durations import Duration
from staal.manifest.model import QuotaConfig
from staal.runtime.clock import FixedClock
from staal.supervisor.store.ledger import read_ledger
from staal.supervisor.store.postgres.ledger import PostgresLedger
from staal.supervisor.telemetry.metrics_http import stored
from tests.helpers.http_servers import HttpServer
from tests.helpers.manifests import problems_of, seed_example, write_programs
from tests.helpers.servers import Site
from tests.supervisor.store.test_contract import T0
from tests.supervisor.telemetry.test_metrics import parse, value

ECHO = """
def main(text: str) -> dict:
    return {"echo": text}
"""


@pytest.fixture
def site(tmp_path, authorization) -> Site:
    site = Site(tmp_path)
    site.program("echo.py", ECHO)
    site.write([{"name": "echo", "program": "echo.py"}],
               sections={"auth": {"issuer": authorization.issuer},
                         "callers": [{"name": "desk", "when": {"scope": "desk"},
                                      "tools": {"echo": {}}, "rate": {"calls": 1, "window": "1h"}}]},
               metrics={"listen": "127.0.0.1:0"})
    return site


def test_a_callers_rate_limit_is_counted_as_a_rate_refusal_and_nothing_ran(site, authorization):
    with HttpServer(site) as http:
        metrics = http.stderr.wait_event("serving_metrics")["url"]
        headers = {"authorization": f"Bearer {authorization.token('desk-1', 'desk', http.url)}"}
        for text in ("first", "second"):
            answer = http.modern("tools/call", {"name": "echo", "arguments": {"text": text}},
                                 headers=headers)
            assert answer.status_code == 200, answer.text
        assert "over its rate limit" in answer.json()["result"]["content"][0]["text"]
        scraped = httpx.get(metrics, timeout=30)
        assert scraped.status_code == 200
        samples = parse(scraped.text)
        assert value(samples, "staal_refusals_total", tool="echo", reason="rate") == 1
        assert value(samples, "staal_refusals_total", tool="echo", reason="quota") == 0
        assert value(samples, "staal_calls_total", tool="echo", outcome="done") == 1
        assert value(samples, "staal_calls_total", tool="echo", outcome="refused") == 1
        # The refused call was never reserved: one run only.
        assert len(read_ledger(site.ledger_path).runs()) == 1
        # No label names the caller: only its tool and the reason.
        assert not any("desk-1" in v for (_, labels) in samples for _, v in labels)


def test_the_mcp_endpoint_does_not_serve_metrics(site):
    with HttpServer(site) as http:
        metrics = http.stderr.wait_event("serving_metrics")["url"]
        assert metrics.rsplit(":", 1)[1] != http.base.rsplit(":", 1)[1]  # a port of its own
        on_mcp = httpx.get(http.base + "/metrics", timeout=30)
        assert on_mcp.status_code == 404
        assert "staal_calls_total" not in on_mcp.text
        assert "staal_calls_total" in httpx.get(metrics, timeout=30).text


def _with_metrics(metrics: object) -> dict:
    data = seed_example()
    data["server"]["metrics"] = metrics
    return data


def test_a_metrics_address_beyond_loopback_is_refused_unless_allowed(tmp_path):
    write_programs(tmp_path)
    (problem,) = problems_of(tmp_path, _with_metrics({"listen": "0.0.0.0:9464"}))
    assert problem.startswith('server.metrics.listen: "0.0.0.0:9464" is not a loopback address')
    assert "server.metrics.allow_remote" in problem
    assert problems_of(tmp_path, _with_metrics({"listen": "0.0.0.0:9464", "allow_remote": True})) == []
    assert problems_of(tmp_path, _with_metrics({"listen": "[::1]:9464"})) == []
    assert problems_of(tmp_path, _with_metrics({})) == []  # 127.0.0.1:9464


@pytest.mark.parametrize(("metrics", "expected"), [
    ({"listen": "9464"}, 'server.metrics.listen: expected HOST:PORT, such as "127.0.0.1:9464", '
                         'not "9464"'),
    ({"listen": "127.0.0.1:70000"}, "server.metrics.listen: expected HOST:PORT"),
    ({"allow_remote": "yes"}, "server.metrics.allow_remote: expected true or false"),
    ({"port": 9464}, "server.metrics.port: unknown key"),
    (["127.0.0.1:9464"], "server.metrics: expected an object"),
])
def test_a_bad_metrics_section_is_refused_naming_its_key(tmp_path, metrics, expected):
    write_programs(tmp_path)
    (problem,) = problems_of(tmp_path, _with_metrics(metrics))
    assert problem.startswith(expected), json.dumps(problem)


def test_a_scrape_of_a_postgresql_store_reads_its_unfinished_runs_and_quota_windows_not_every_run(
        pg_store, monkeypatch):
    """Issue 27: what a scrape reads of a shared store is indexed queries (the
    unfinished runs; each quota's window), never the whole ledger."""
    calls = QuotaConfig(window=Duration.parse("1h"), calls=5)
    with PostgresLedger.open(pg_store.dsn, "one", FixedClock(T0), [].append) as ledger:
        waiting = ledger.reserve_call("t", calls, 1, (), None)
        running = ledger.reserve_call("t", calls, 1, (), None)
        ledger.settle(ledger.reserve_call("t", calls, 1, (), None).run, "done", ())
        ledger.reserve_call("u", None, 1, (), None)

        def every_run() -> None:
            raise AssertionError("a scrape read every run")

        monkeypatch.setattr(ledger, "runs", every_run)
        manifest = SimpleNamespace(tools=[SimpleNamespace(name="t", quota=calls),
                                          SimpleNamespace(name="u", quota=None)])
        notes = SimpleNamespace(all_waiting=lambda: {waiting.run: object()})
        families = {f.name: f for f in stored(manifest, ledger, notes)}  # type: ignore[arg-type]
    assert running.run != waiting.run
    assert [(s.labels, s.value) for s in families["staal_runs_waiting"].samples] == \
        [({"tool": "t"}, 1), ({"tool": "u"}, 0)]
    assert [(s.labels, s.value) for s in families["staal_quota_used"].samples] == \
        [({"tool": "t", "quota": "calls"}, 3)]
