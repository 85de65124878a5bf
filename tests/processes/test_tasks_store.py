"""Tasks on the PostgreSQL store (issue 28 items 3 and 5): a task is its run,
read from the shared store, so a task created through one instance is
followed and fetched through another, which never ran it; and cancelled
through another: the cancel is recorded in the store, and the instance
that runs the run learns it after its next renewal and stops the run
before its next action; one whose instance is dead is resumed cancelled by
the instance that takes the run over."""

from __future__ import annotations

import contextlib
from pathlib import Path

import psutil

from staal.protocol.mcp.revisions import CLIENT_CAPABILITIES_KEY
from staal.protocol.mcp.tasks import TASKS_EXTENSION
from tests.helpers.http_servers import HttpServer
from tests.helpers.payments import Payments
from tests.helpers.pg_store import PgStore
from tests.helpers.recorder import WAIT
from tests.helpers.servers import Site, stripe_refund_grant
from tests.processes.test_tasks_cancel import READ_WAIT_REFUND, USD20

ENV = "STAAL_STORE_DSN"
STORE = {"postgres": {"dsn": {"env": ENV}}}
COUNT = """
def main(n: int) -> dict:
    return {"n": n}
"""
WITH_TASKS = {CLIENT_CAPABILITIES_KEY: {"extensions": {TASKS_EXTENSION: {}}}}


def task_site(root: Path) -> Site:
    root.mkdir()
    site = Site(root)
    site.program("count.py", COUNT)
    site.write([{"name": "count", "program": "count.py", "task": "required"}], store=STORE)
    return site


def test_a_task_created_through_one_instance_is_followed_through_another(
        tmp_path: Path, pg_store: PgStore) -> None:
    env = {ENV: pg_store.dsn}
    with HttpServer(task_site(tmp_path / "a"), env) as a, \
            HttpServer(task_site(tmp_path / "b"), env) as b:
        created = a.modern("tools/call", {"name": "count", "arguments": {"n": 7}}, **WITH_TASKS)
        assert created.status_code == 200, created.text
        task_id = created.json()["result"]["taskId"]
        # b never ran it: tasks/result waits on the store until the run's end is there.
        result = b.legacy("tasks/result", {"taskId": task_id}).json()["result"]
        assert result["structuredContent"] == {"result": {"n": 7}}
        got = b.modern("tasks/get", {"taskId": task_id}, **WITH_TASKS).json()["result"]
        assert got["status"] == "completed" and got["result"]["structuredContent"] == {"result": {"n": 7}}
        assert "run_started" not in b.stderr.text
    assert [row[0] for row in pg_store.rows("SELECT run FROM staal_runs")] == [task_id]


def cancel_sites(root: Path, payments: Payments) -> list[Site]:
    """Two instances' sites serving `read_wait_refund` on the store, with a
    short lease: renewed every second, so a renewal (or a takeover) comes soon."""
    program = root / "read_wait_refund.py"  # one program: a run resumes only where it began
    program.write_text(READ_WAIT_REFUND)
    sites = []
    for name in ("a", "b"):
        (root / name).mkdir()
        site = Site(root / name)
        site.write([{"name": "read_wait_refund", "program": str(program),
                     "task": "optional", "max_wait": "10m",
                     "grants": {"pay": stripe_refund_grant(payments.base)}}],
                   store={"postgres": {"dsn": {"env": ENV}, "lease_s": 3}})
        sites.append(site)
    return sites


def waiting_task(server: HttpServer, payments: Payments) -> str:
    """A task whose run has made its read and waits outside its actions; its id."""
    order = payments.intent(amount=5000)["id"]
    created = server.modern("tools/call", {"name": "read_wait_refund",
                                           "arguments": {"order": order, "amount": USD20}},
                            **WITH_TASKS)
    task_id = created.json()["result"]["taskId"]
    server.stderr.wait_event("print", run=task_id)
    return task_id


def test_a_task_cancelled_through_another_instance_stops_before_its_next_action_where_it_runs(
        tmp_path: Path, pg_store: PgStore, payments: Payments) -> None:
    env = {ENV: pg_store.dsn, "STRIPE_SECRET_KEY": payments.key}
    sites = cancel_sites(tmp_path, payments)
    with HttpServer(sites[0], env) as a, HttpServer(sites[1], env) as b:
        task_id = waiting_task(a, payments)
        ack = b.modern("tasks/cancel", {"taskId": task_id}, **WITH_TASKS)
        assert ack.status_code == 200 and "result" in ack.json(), ack.text
        assert pg_store.rows("SELECT run FROM staal_cancels") == [(task_id,)]  # before the ack
        a.stderr.wait_event("run_cancel_learned", run=task_id)  # at a renewal
        a.stderr.wait_event("run_ended", run=task_id)
        got = b.modern("tasks/get", {"taskId": task_id}, **WITH_TASKS).json()["result"]
        assert got["status"] == "cancelled", got
        assert "run_started" not in b.stderr.text and "run_cancel_learned" not in b.stderr.text
    assert payments.requests("POST") == []  # the refund after the wait never started


def test_a_task_cancelled_while_its_instance_is_dead_is_resumed_cancelled_by_the_takeover(
        tmp_path: Path, pg_store: PgStore, payments: Payments) -> None:
    env = {ENV: pg_store.dsn, "STRIPE_SECRET_KEY": payments.key}
    sites = cancel_sites(tmp_path, payments)
    with HttpServer(sites[1], env) as b:
        a = HttpServer(sites[0], env).started()
        try:
            task_id = waiting_task(a, payments)
            family = psutil.Process(a.process.pid).children(recursive=True)
            a.process.kill()
            for process in family:
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.kill()
            a.process.wait(WAIT)
        finally:
            a.stop()
        # Recorded by b for a run no live instance runs; b takes it over once
        # a's lease runs out and resumes it cancelled: its read replays, its
        # wait is cut, its refund never starts.
        b.modern("tasks/cancel", {"taskId": task_id}, **WITH_TASKS)
        b.stderr.wait_event("taken_over", run=task_id)
        b.stderr.wait_event("run_ended", run=task_id)
        got = b.modern("tasks/get", {"taskId": task_id}, **WITH_TASKS).json()["result"]
        assert got["status"] == "cancelled", got
    assert len(payments.requests("GET")) == 1 and payments.requests("POST") == []
