"""A run pays only for its own I/O: what a capability needs whatever the run
(modules, the SSL context and CA bundle, httpx's client, psycopg's parts)
is made once in the zygote and inherited by every fork (DESIGN.md section
6; issue 12). Each test's program counts, around its actions, the modules
imported and the SSL contexts made in its worker, through the real server."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.helpers.fake_model import running_fake_model
from tests.helpers.servers import RawServer, Site, stripe_refund_grant

# Wraps the program's actions: every module imported and SSL context made
# while they run is counted, and returned beside what they returned.
MEASURE = '''
import ssl
import sys


def measured(act):
    made = []
    new = ssl.SSLContext.__new__

    def counting(cls, *args, **kwargs):
        made.append(cls.__name__)
        return new(cls, *args, **kwargs)

    ssl.SSLContext.__new__ = counting
    before = set(sys.modules)
    try:
        value = act()
    finally:
        ssl.SSLContext.__new__ = new
    return {"value": value, "imported": sorted(set(sys.modules) - before), "ssl": len(made)}
'''

NOTHING_MADE = {"imported": [], "ssl": 0}


def serve_one_call(tmp_path: Path, source: str, grants: dict, arguments: dict,
                   env: dict[str, str] | None = None, **tool) -> dict:
    site = Site(tmp_path)
    site.program("prog.py", MEASURE + textwrap.dedent(source))
    site.write([{"name": "t", "program": "prog.py", "grants": grants, **tool}])
    with RawServer(site, env) as server:
        server.initialize()
        result = server.call_tool("t", arguments)
        server.close_stdin()
        assert server.wait_exit() == 0
    assert result["isError"] is False, result
    return result["structuredContent"]["result"]


def made_nothing(measured: dict) -> None:
    assert {k: measured[k] for k in NOTHING_MADE} == NOTHING_MADE, measured


def test_an_http_get_run_imports_nothing_and_makes_no_ssl_context(tmp_path, service):
    got = serve_one_call(tmp_path, """
        from staal.caps import HttpGet

        def main(url: str, get: HttpGet) -> dict:
            return measured(lambda: get.get(url).status_code)
        """, {"get": {"cap": "net.http.get", "only": [service.base + "/**"]}},
        {"url": service.base + "/v1/x"})
    made_nothing(got)
    assert got["value"] == 404 and len(service.seen("GET")) == 1


def test_an_http_post_run_imports_nothing_and_makes_no_ssl_context(tmp_path, service):
    got = serve_one_call(tmp_path, """
        from staal.caps import HttpPost

        def main(url: str, post: HttpPost) -> dict:
            return measured(lambda: post.post(url, json={"n": 1}).status_code)
        """, {"post": {"cap": "net.http.post", "only": [service.base + "/**"]}},
        {"url": service.base + "/v1/x"})
    made_nothing(got)
    assert len(service.seen("POST")) == 1


def test_a_refund_run_imports_nothing_and_makes_no_ssl_context(tmp_path, payments):
    order = payments.intent(amount=5000)["id"]
    got = serve_one_call(tmp_path, """
        from staal import Money
        from staal.caps import StripeRefund

        def main(order: str, pay: StripeRefund) -> dict:
            def refund():
                pay.payment_intent(order)
                return pay.refund(order, Money("20", "USD"), "requested_by_customer")["status"]
            return measured(refund)
        """, {"pay": stripe_refund_grant(payments.base)}, {"order": order},
        env={"STRIPE_SECRET_KEY": payments.key})
    made_nothing(got)
    assert got["value"] == "succeeded" and len(payments.refunds()) == 1


def test_a_model_run_imports_nothing_and_makes_no_ssl_context(tmp_path):
    key = "sk-ant-prepared-test"
    with running_fake_model(key) as model:
        site_model = {"provider": "anthropic", "model": "claude-test", "api_key": {"env": "MODEL_KEY"},
                      "timeout_ms": 10000, "retries": 0, "base_url": model.base}
        site = Site(tmp_path)
        site.program("prog.py", MEASURE + textwrap.dedent("""
            from staal.caps import Model

            def main(prompt: str, model: Model) -> dict:
                return measured(lambda: model.complete(prompt, max_tokens=16))
            """))
        path = site.write([{"name": "t", "program": "prog.py",
                            "grants": {"model": {"cap": "model.complete"}}}])
        import json

        data = json.loads(path.read_text())
        data["model"] = site_model
        path.write_text(json.dumps(data))
        with RawServer(site, {"MODEL_KEY": key}) as server:
            server.initialize()
            result = server.call_tool("t", {"prompt": "hello"})
            server.close_stdin()
            assert server.wait_exit() == 0
        assert len(model.requests()) == 1
    assert result["isError"] is False, result
    made_nothing(result["structuredContent"]["result"])


@pytest.mark.parametrize("cap", ["db.sqlite.read", "db.postgres.read"])
def test_a_database_run_imports_nothing(tmp_path, postgres_dsn, cap):
    import sqlite3

    if cap == "db.sqlite.read":
        sqlite3.connect(tmp_path / "shop.db").close()
        grant = {"cap": cap, "path": "shop.db"}
        env = None
    else:
        grant = {"cap": cap, "dsn": {"env": "SHOP_DSN"}}
        env = {"SHOP_DSN": postgres_dsn}
    class_name = "SqliteRead" if cap.startswith("db.sqlite") else "PostgresRead"
    sql = "SELECT 1 + ?" if cap.startswith("db.sqlite") else "SELECT 1 + %s"
    got = serve_one_call(tmp_path, f"""
        from staal.caps import {class_name}

        def main(n: int, db: {class_name}) -> dict:
            return measured(lambda: db.query({sql!r}, [n]))
        """, {"db": grant}, {"n": 1}, env=env)
    assert got["imported"] == [], got
    assert list(got["value"][0].values()) == [2]
