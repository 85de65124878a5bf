"""Issue 27 item 6, with real processes on PostgreSQL: an instance restarted
with more runs to resume than fit in its lease keeps every one, while
another instance is up and would take over the runs of any instance whose
lease ran out (supervisor/recovery/lease_keeper.py: the lease is renewed
from its registration on, through recovery at start).

The instances hold a lease of 3 s (renewed every second). Instance A is
killed with three runs in flight (their reads held at the service); it is
restarted, instance B is started once A registered its new lease, and A's
recovery resumes the runs one after another: the first resumed read is
held at the service until B, serving, has renewed its own lease twice
after the lease A registered ran out, so B's takeover has looked at A's
runs while A was still starting. Nothing waits on time: the test is told of each renewal by
a trigger on the store's instances table (LISTEN/NOTIFY), each wait bounded.
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg

from staal.supervisor.recovery.lease import LeaseTiming
from staal.supervisor.store.postgres.instances import instance_name
from tests.helpers.http_servers import HttpServer
from tests.helpers.pg_store import PgStore
from tests.helpers.recorder import WAIT, Hold
from tests.helpers.servers import START_WAIT, Site
from tests.processes.test_store_serving import ENV
from tests.supervisor.store.test_journals import LOOKUP, kill_family

LEASE = LeaseTiming(3000)  # the shortest a manifest may give: renewed every second
STORE = {"postgres": {"dsn": {"env": ENV}, "lease_s": LEASE.lease_ms / 1000}}
ORDERS = ("o1", "o2", "o3")
# Told of every change of an instance's lease: "<instance> <lease_until_ms>".
NOTIFY_RENEWALS = """
CREATE FUNCTION staal_test_renewed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('staal_test_leases',
                    NEW.instance || ' ' || coalesce(NEW.lease_until_ms::text, 'released'));
  RETURN NEW;
END $$;
CREATE TRIGGER staal_test_renewed AFTER UPDATE ON staal_instances
  FOR EACH ROW EXECUTE FUNCTION staal_test_renewed();
"""


def site_of(root: Path, program: Path, service: Any) -> Site:
    root.mkdir()
    site = Site(root)
    grants = {"get": {"cap": "net.http.get", "only": [service.base + "/v1/orders/*"]}}
    site.write([{"name": "lookup", "program": str(program), "grants": grants}], store=STORE)
    return site


def hold_every_read(service: Any) -> Hold:
    """One hold for every order's read: the first to arrive is held, and
    so is every one after it until the test releases them all."""
    hold = Hold()
    with service.lock:
        for order in ORDERS:
            service.holds[f"/v1/orders/{order}"] = hold
    return hold


def let_reads_through(service: Any, hold: Hold) -> None:
    hold.release.set()
    with service.lock:
        for order in ORDERS:
            service.holds.pop(f"/v1/orders/{order}", None)


def calls_in_flight(server: HttpServer, service: Any) -> list[threading.Thread]:
    """One call per order, each held at the service with its run reserved."""
    def call(order: str) -> None:
        with contextlib.suppress(httpx.HTTPError):  # the server dies before it answers
            server.modern("tools/call", {"name": "lookup", "arguments": {"order": order}})

    callers = [threading.Thread(target=call, args=(order,), daemon=True) for order in ORDERS]
    for caller in callers:
        caller.start()
    with service.arrived:
        assert service.arrived.wait_for(lambda: len(service.requests) >= len(ORDERS), WAIT), \
            server.stderr.text
    return callers


def until_renewed_twice_after(listening: psycopg.Connection[Any], instance: str,
                              after_ms: int) -> None:
    """Until serving `instance` has renewed its lease twice at moments after
    `after_ms`: the takeover that follows the first of those renewals is
    over by the second (LeaseKeeper.keep awaits it before sleeping again)."""
    late = 0
    for note in listening.notifies(timeout=START_WAIT + LEASE.takeover_bound_s * 3):
        who, until = note.payload.rsplit(" ", 1)
        if who == instance and until.isdigit() and int(until) - LEASE.lease_ms > after_ms:
            late += 1
            if late == 2:
                return
    raise AssertionError(f"{instance} did not renew its lease twice after {after_ms}")


def test_an_instance_restarted_with_more_runs_to_resume_than_fit_in_its_lease_keeps_every_one(
        tmp_path: Path, service: Any, pg_store: PgStore) -> None:
    for order in ORDERS:
        service.route("GET", f"/v1/orders/{order}", 200, {"id": order})
    program = tmp_path / "lookup.py"
    program.write_text(f"BASE = {service.base!r}\n" + LOOKUP)
    a_site = site_of(tmp_path / "a", program, service)
    b_site = site_of(tmp_path / "b", program, service)
    env = {ENV: pg_store.dsn}
    a, b = instance_name(a_site.journals), instance_name(b_site.journals)

    held = hold_every_read(service)
    with HttpServer(a_site, env) as first:
        callers = calls_in_flight(first.started(), service)
        kill_family(first)
    let_reads_through(service, held)
    for caller in callers:
        caller.join(WAIT)
    runs = sorted(run for (run,) in pg_store.rows("SELECT run FROM staal_runs"))
    assert len(runs) == len(ORDERS)
    pg_store.execute(NOTIFY_RENEWALS)

    resumed = hold_every_read(service)
    with contextlib.ExitStack() as stack:
        listening = stack.enter_context(psycopg.connect(pg_store.dsn, autocommit=True))
        listening.execute("LISTEN staal_test_leases")
        again = HttpServer(a_site, env)  # A restarts: not ready until its recovery is done
        stack.callback(again.stop)
        # A registers a new lease (B, started only then, finds no lease run
        # out), and recovery resumes its first run: its read is held, and
        # start-up goes on no further.
        next(listening.notifies(timeout=START_WAIT, stop_after=1))
        other = HttpServer(b_site, env)
        stack.callback(other.stop)
        assert resumed.arrived.wait(START_WAIT), again.stderr.text
        ((started_ms,),) = pg_store.rows(
            "SELECT started_ms FROM staal_instances WHERE instance = %s", (a,))
        other.started()
        serving_ms = time.time_ns() // 1_000_000
        until_renewed_twice_after(listening, b, max(started_ms + LEASE.lease_ms, serving_ms))
        # A, still starting, kept its lease: renewed past the one it registered.
        ((until,),) = pg_store.rows(
            "SELECT lease_until_ms FROM staal_instances WHERE instance = %s", (a,))
        let_reads_through(service, resumed)
        again.started()  # every run resumed, then serving
        status = [again.modern("tools/call", {"name": "staal_run_status",
                                              "arguments": {"run": run}}) for run in runs]
        taken = other.stderr.events("taken_over")
        a_log = again.stderr.records()
    assert taken == []
    assert pg_store.rows("SELECT DISTINCT owner FROM staal_runs") == [(a,)]
    assert pg_store.rows("SELECT run, kind FROM staal_ends ORDER BY run") == [
        (run, "settle") for run in runs]
    assert [s.json()["result"]["structuredContent"]["status"] for s in status] == ["done"] * 3
    assert sorted(r["run"] for r in a_log
                  if r.get("event") == "recovered" and r.get("rule") == "resumed") == runs
    assert not [r for r in a_log if r.get("kind") == "fenced" or r.get("level") == "error"]
    assert until > started_ms + LEASE.lease_ms
