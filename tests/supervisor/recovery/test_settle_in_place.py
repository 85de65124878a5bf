"""An instance settles its own runs in place once PostgreSQL answers again
(issue 15 item 5: "the instances recover without a restart of their own").

Each test serves one `serve --http` instance on a database of its own in the
tests' private cluster (`tests/helpers/pg_cluster.py`, which they may stop and
start), with a short lease, so the instance looks for runs left unsettled
after each renewal, every second. The store fails at the moment that
matters: a trigger refuses the settle's row (or the first journal row), or
the whole server is stopped while the run's action is out. Once the store
answers again, the same process, never restarted, settles (or releases,
or resumes) the run by the rules of recovery at start, logging
`recovered`; the ledger holds one reserve and one settle (or release), the
service saw the action once, and the repeated `once` call is answered from
the run's end.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg

from tests.deployment import test_fleet_shared
from tests.deployment.test_fleet_takeover import REFUND
from tests.helpers.flood import ledger_holds, refunded_exactly_once, store_events
from tests.helpers.http_servers import HttpServer
from tests.helpers.payments import Payments
from tests.helpers.pg_cluster import PgCluster
from tests.helpers.recorder import WAIT, Recorder
from tests.helpers.servers import Site, stripe_refund_grant
from tests.helpers.serving import server_env

ENV = test_fleet_shared.ENV
# The shortest lease a manifest may set: renewed, and runs looked for, every second.
LEASE_S = 3
STORE = {"postgres": {"dsn": {"env": ENV}, "lease_s": LEASE_S}}
cluster = test_fleet_shared.cluster
dsn = test_fleet_shared.dsn
FETCH = """
from staal.caps import HttpGet

def main(n: int, url: str, get: HttpGet) -> dict:
    return {"n": n, "status": get.get(url).status_code}
"""
# A bound on each wait for the instance: a few renewals and a run, on a
# loaded machine.
BOUND = WAIT * 3


def rows(dsn: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        return conn.execute(sql, params).fetchall()


def execute(dsn: str, sql: str) -> None:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        conn.execute(sql)


def refuse_inserts(dsn: str, table: str) -> None:
    """From now on the store refuses every row written into `table` (an
    error of PostgreSQL's own, as a failing server gives), until `allow`."""
    execute(dsn, "CREATE OR REPLACE FUNCTION staal_test_refuse() RETURNS trigger "
                 "LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$")
    execute(dsn, f"CREATE TRIGGER staal_test_refuse BEFORE INSERT ON {table} "
                 "FOR EACH ROW EXECUTE FUNCTION staal_test_refuse()")


def allow_inserts(dsn: str, table: str) -> None:
    execute(dsn, f"DROP TRIGGER staal_test_refuse ON {table}")


def fetch_site(root: Path, service: Recorder) -> Site:
    root.mkdir()
    site = Site(root)
    site.program("fetch.py", FETCH)
    site.write([{"name": "fetch", "program": "fetch.py", "once": {"by": ["n"], "keep": "1h"},
                 "grants": {"get": {"cap": "net.http.get", "only": [service.base + "/*"]}}}],
               store=STORE)
    return site


def fetch(server: HttpServer, service: Recorder, n: int) -> dict[str, Any]:
    answer = server.modern("tools/call", {"name": "fetch", "arguments": {
        "n": n, "url": service.base + "/item"}}, timeout=BOUND)
    assert answer.status_code == 200, answer.text
    return answer.json()["result"]


def never_restarted(server: HttpServer, pid: int) -> bool:
    return (server.process.poll() is None and server.process.pid == pid
            and len(server.stderr.events("serving")) == 1)


@contextlib.contextmanager
def refused_call(root: Path, service: Recorder, dsn: str,
                 table: str) -> Iterator[tuple[HttpServer, int, dict[str, Any], str]]:
    """An instance serving, and its first call made while the store refuses
    rows of `table`: the server, its pid, the call's answer and its run."""
    service.route("GET", "/item", 200, {"ok": True})
    with HttpServer(fetch_site(root, service), {ENV: dsn}).started() as server:
        refuse_inserts(dsn, table)
        first = fetch(server, service, 1)
        ((run,),) = rows(dsn, "SELECT run FROM staal_runs")
        yield server, server.process.pid, first, run


def test_a_run_whose_settle_the_store_refused_is_settled_in_place_once_it_answers_again(
        tmp_path: Path, service: Recorder, dsn: str) -> None:
    with refused_call(tmp_path / "i1", service, dsn, "staal_ends") as (server, pid, first, run):
        failed = server.stderr.wait_event("call_failed", BOUND, run=run)
        # While the store refuses, the run stays unsettled: each renewal's
        # attempt to settle it fails, and nothing is settled.
        server.stderr.wait_event("settle_in_place_failed", BOUND)
        assert rows(dsn, "SELECT count(*) FROM staal_ends") == [(0,)]
        allow_inserts(dsn, "staal_ends")
        server.stderr.wait_event("recovered", BOUND, run=run, rule="settled from its end")
        again = fetch(server, service, 1)
        alive = never_restarted(server, pid)
    assert first["isError"] is True and run in first["content"][0]["text"]
    assert "refused by the test" in failed["error"]
    assert again.get("isError") is not True, again
    assert again["structuredContent"]["result"] == {"n": 1, "status": 200}
    assert len(service.seen("GET", "/item")) == 1  # the action ran once
    assert ledger_holds(store_events(dsn)) == {run: ["reserve", "settle"]}
    assert rows(dsn, "SELECT count(*) FROM staal_inputs") == [(0,)]
    assert alive


def test_a_run_whose_first_journal_record_the_store_refused_is_released_in_place(
        tmp_path: Path, service: Recorder, dsn: str) -> None:
    with refused_call(tmp_path / "i1", service, dsn, "staal_journal") as (server, pid, first, run):
        allow_inserts(dsn, "staal_journal")
        released = server.stderr.wait_event("recovered", BOUND, run=run)
        # The run never started: its once key is free, and the call runs now.
        again = fetch(server, service, 1)
        alive = never_restarted(server, pid)
    assert first["isError"] is True and run in first["content"][0]["text"]
    assert released["rule"] == "released: it never started"
    assert again["structuredContent"]["result"] == {"n": 1, "status": 200}
    assert len(service.seen("GET", "/item")) == 1  # only the second run acted
    holds = ledger_holds(store_events(dsn))
    assert holds.pop(run) == ["reserve", "release"]
    assert list(holds.values()) == [["reserve", "settle"]]
    # Released, it ended as any run: no kept arguments left, a log that says so.
    assert rows(dsn, "SELECT count(*) FROM staal_inputs") == [(0,)]
    ended = [entry for (entry,) in rows(dsn, "SELECT entry FROM staal_logs WHERE run = %s AND "
                                             "entry->>'event' = 'ended' ORDER BY line", (run,))]
    assert ended[-1]["recovered"] == "released: it never started", ended
    assert alive


def refund_site(root: Path, payments: Payments) -> Site:
    root.mkdir()
    site = Site(root)
    site.program("refund.py", REFUND)
    site.write([{"name": "refund", "program": "refund.py", "once": {"by": ["order"], "keep": "1h"},
                 "grants": {"pay": stripe_refund_grant(payments.base)},
                 "net": {"timeout_ms": 120_000, "connect_timeout_ms": 10_000}}], store=STORE)
    return site


def refund(server: HttpServer, order: str) -> dict[str, Any]:
    answer = server.modern("tools/call", {"name": "refund", "arguments": {"order": order}},
                           timeout=BOUND * 2)
    assert answer.status_code == 200, answer.text
    return answer.json()["result"]


def test_a_run_cut_off_by_postgresql_stopping_mid_action_is_resumed_in_place_once_it_is_back(
        tmp_path: Path, payments: Payments, cluster: PgCluster, dsn: str) -> None:
    intent = payments.intent(amount=5000)["id"]
    payments.fault("/v1/refunds", "hang", times=1, hold_ms=120_000)
    env = {ENV: dsn, "STRIPE_SECRET_KEY": payments.key}
    answers: list[dict[str, Any]] = []
    with HttpServer(refund_site(tmp_path / "i1", payments), env).started() as server:
        pid = server.process.pid
        calling = threading.Thread(target=lambda: answers.append(refund(server, intent)),
                                   daemon=True)
        calling.start()
        try:
            # The refund is out at the service when the database stops: its
            # outcome cannot be journaled, so the call is cut off.
            payments.wait("/v1/refunds", held=1, timeout=BOUND)
            ((run,),) = rows(dsn, "SELECT run FROM staal_runs")
            cluster.stop("immediate")
            payments.release()
            calling.join(BOUND * 2)
        finally:
            payments.release()
            if not cluster.running():
                cluster.start()  # pg_ctl -w: back and accepting connections
        server.stderr.wait_event("recovered", BOUND, run=run, rule="resuming")
        resumed = server.stderr.wait_event("recovered", BOUND, run=run, rule="resumed")
        again = refund(server, intent)
        alive = never_restarted(server, pid)
    (first,) = answers
    assert first["isError"] is True and run in first["content"][0]["text"]
    assert resumed["outcome"] == "done"
    # The resumed run sent its refund again under its run's key: the service
    # answered it from the first, and refunded once.
    refunds = refunded_exactly_once(payments, [intent])
    assert again["structuredContent"]["result"] == {"refund": refunds[intent]["id"]}
    keys = {r["headers"]["idempotency-key"] for r in payments.requests("POST", "/v1/refunds")}
    assert len(keys) == 1 and keys.pop().startswith(run + "-")
    assert ledger_holds(store_events(dsn)) == {run: ["reserve", "settle"]}
    assert alive


TICKET = """
from staal.caps import HttpPost

def main(order: str, url: str, post: HttpPost) -> dict:
    return {"status": post.post(url, json={"order": order}).status_code}
"""


def test_a_waiting_run_is_left_waiting_and_a_run_in_flight_is_not_touched(
        tmp_path: Path, service: Recorder, dsn: str) -> None:
    """While a run waits for an operator and another is in flight (its read
    held at the service), the instance renews its lease, and looks for runs
    left unsettled, three times: it touches neither."""
    service.route("GET", "/item", 200, {"ok": True})
    service.hold("/v1/tickets")  # never answered in time: the unkeyed POST is in doubt
    site = fetch_site(tmp_path / "i1", service)
    site.program("ticket.py", TICKET)
    manifest = json.loads(site.manifest.read_text())
    manifest["tools"].append({"name": "ticket", "program": "ticket.py", "description": "Tickets.",
                              "grants": {"post": {"cap": "net.http.post",
                                                  "only": [service.base + "/v1/tickets"]}},
                              "net": {"timeout_ms": 300, "connect_timeout_ms": 1000}})
    site.manifest.write_text(json.dumps(manifest))
    hold = service.hold("/item")
    answers: list[dict[str, Any]] = []
    with HttpServer(site, {ENV: dsn}).started() as server:
        stopped = server.modern("tools/call", {"name": "ticket", "arguments": {
            "order": "o1", "url": service.base + "/v1/tickets"}}, timeout=BOUND).json()["result"]
        ((waiting,),) = rows(dsn, "SELECT run FROM staal_runs")
        calling = threading.Thread(target=lambda: answers.append(fetch(server, service, 1)),
                                   daemon=True)
        calling.start()
        try:
            assert hold.arrived.wait(BOUND)
            (flying,) = [run for (run,) in rows(dsn, "SELECT run FROM staal_runs")
                         if run != waiting]
            with renewals(dsn) as renewed:
                for _ in range(3):
                    renewed()
        finally:
            hold.release.set()
        calling.join(BOUND)
        touched = server.stderr.events("recovered")
        status = server.modern("tools/call", {"name": "staal_run_status", "arguments": {
            "run": waiting}}).json()["result"]["structuredContent"]
    (answer,) = answers
    assert answer["structuredContent"]["result"] == {"n": 1, "status": 200}
    assert not touched, touched
    assert waiting in json.dumps(stopped) and "may or may not have happened" in json.dumps(stopped)
    assert status["status"] == "waiting_for_operator"
    assert len(service.seen("POST", "/v1/tickets")) == 1  # never sent again
    assert ledger_holds(store_events(dsn)) == {waiting: ["reserve"], flying: ["reserve", "settle"]}


@contextlib.contextmanager
def renewals(dsn: str) -> Iterator[Callable[[], None]]:
    """A wait (bounded) for the instance's next renewal of its lease: a
    trigger on the lease row notifies this connection of each."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        conn.execute("CREATE OR REPLACE FUNCTION staal_test_renewed() RETURNS trigger "
                     "LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_notify('staal_test_renewed', ''); "
                     "RETURN NEW; END $$")
        conn.execute("CREATE TRIGGER staal_test_renewed AFTER UPDATE ON staal_instances "
                     "FOR EACH ROW EXECUTE FUNCTION staal_test_renewed()")
        conn.execute("LISTEN staal_test_renewed")

        def next_renewal() -> None:
            if not list(conn.notifies(timeout=BOUND, stop_after=1)):
                raise AssertionError(f"no renewal of the lease within {BOUND} s")

        yield next_renewal


def test_a_waiting_run_an_operator_answered_in_the_store_is_resumed_in_place_by_its_owner(
        tmp_path: Path, service: Recorder, dsn: str) -> None:
    """`staal-supervisor resolve` from another machine removes the run's
    waiting record and journals the answer; its owner, serving all along,
    resumes it after its next renewal, never sending the action again."""
    service.hold("/v1/tickets")  # never answered in time: the unkeyed POST is in doubt
    root = tmp_path / "i1"
    root.mkdir()
    site = Site(root)
    site.program("ticket.py", TICKET)
    site.write([{"name": "ticket", "program": "ticket.py", "once": {"by": ["order"], "keep": "1h"},
                 "grants": {"post": {"cap": "net.http.post",
                                     "only": [service.base + "/v1/tickets"]}},
                 "net": {"timeout_ms": 300, "connect_timeout_ms": 1000}}], store=STORE)
    arguments = {"order": "o1", "url": service.base + "/v1/tickets"}
    with HttpServer(site, {ENV: dsn}).started() as server:
        pid = server.process.pid
        stopped = server.modern("tools/call", {"name": "ticket", "arguments": arguments},
                                timeout=BOUND).json()["result"]
        ((run,),) = rows(dsn, "SELECT run FROM staal_runs")
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        other = json.loads(site.manifest.read_text())
        other["server"]["journals"] = str(elsewhere / "journals")
        other["tools"][0]["program"] = str(root / "ticket.py")
        (elsewhere / "manifest.json").write_text(json.dumps(other))
        answered = subprocess.run(
            [sys.executable, "-m", "staal.supervisor.app.main", "resolve", str(elsewhere / "manifest.json"),
             "--run", run, "--op", "1", "--happened", "yes", "--result",
             json.dumps({"status": 201, "text": "{}"})],
            capture_output=True, text=True, timeout=BOUND, check=False, env=server_env(**{ENV: dsn}))
        resumed = server.stderr.wait_event("recovered", BOUND, run=run, rule="resumed")
        again = server.modern("tools/call", {"name": "ticket", "arguments": arguments},
                              timeout=BOUND).json()["result"]
        alive = never_restarted(server, pid)
    assert "may or may not have happened" in json.dumps(stopped)
    assert answered.returncode == 0, answered.stderr
    assert resumed["outcome"] == "done"
    assert again["structuredContent"]["result"] == {"status": 201}
    assert len(service.seen("POST", "/v1/tickets")) == 1  # never sent again
    assert ledger_holds(store_events(dsn)) == {run: ["reserve", "settle"]}
    assert rows(dsn, "SELECT count(*) FROM staal_waiting") == [(0,)]
    assert alive
