"""Tasks against the real server over stdio (MCP 2025-11-25; DESIGN.md
section 8, "Tasks"): a task is its run. A call asked as a task is answered
with a CreateTaskResult once its reserve is durable (the ledger already
holds the run the task id names); tasks/get follows the run while the fake
payment service holds its refund; tasks/result waits for the end and gives
the tool's result; the client is told the end with notifications/tasks/status.
Across a SIGKILL of the server mid-run and a restart, tasks/get keeps
answering, and the run, resumed by recovery, completes with the refund made
once at the service. A run that stops for an operator is a working task
that says what is in doubt, until resolved; then it completes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import psutil

from staal.supervisor.store.ledger import read_ledger
from tests.helpers.payments import Payments
from tests.helpers.runs import staal_command
from tests.helpers.servers import RawServer, Site, stripe_refund_grant

ROOT = Path(__file__).resolve().parents[2]
USD20 = {"amount": "20.00", "currency": "USD"}
RELATED_TASK = "io.modelcontextprotocol/related-task"


def task_site(tmp_path: Path, payments: Payments, task: str = "optional") -> Site:
    site = Site(tmp_path)
    shutil.copy(ROOT / "examples" / "refund.py", tmp_path / "refund.py")
    site.write([{"name": "refund_order", "program": "refund.py", "task": task,
                 "grants": {"pay": stripe_refund_grant(payments.base)}}],
               task_poll_interval="2s")
    return site


def create_task(server: RawServer, order: str) -> dict:
    answer = server.call("tools/call", {"name": "refund_order",
                                        "arguments": {"order": order, "amount": USD20},
                                        "task": {"ttl": 60_000}})
    assert "result" in answer, answer
    return answer["result"]["task"]


def kill_server_and_workers(server: RawServer) -> None:
    """SIGKILL the server and every process under it (zygote, workers)."""
    family = [*psutil.Process(server.process.pid).children(recursive=True)]
    os.kill(server.process.pid, signal.SIGKILL)
    for process in family:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    server.process.wait(30)


def test_a_call_asked_as_a_task_is_its_run_followed_to_its_result(tmp_path, payments):
    site = task_site(tmp_path, payments)
    order = payments.intent(amount=5000)["id"]
    payments.fault("/v1/refunds", "hang")  # the run holds inside its refund
    with RawServer(site, {"STRIPE_SECRET_KEY": payments.key}) as server:
        capabilities = server.initialize()["result"]["capabilities"]
        assert capabilities["tasks"]["requests"] == {"tools": {"call": {}}}
        task = create_task(server, order)
        run = task["taskId"]
        # Created only once durable: the ledger already has the run's reserve.
        assert [e.run for e in read_ledger(site.ledger_path).runs()] == [run]
        assert task["status"] == "working" and task["pollInterval"] == 2000
        assert task["ttl"] == 90 * 86_400_000  # what retention keeps, not the 60 s asked
        payments.wait("/v1/refunds", held=1)
        got = server.call("tasks/get", {"taskId": run})["result"]
        assert got["status"] == "working" and "is running" in got["statusMessage"]
        waiting = server.request("tasks/result", {"taskId": run})
        payments.release()
        result = server.answer(waiting)["result"]
        assert result["isError"] is False and result["_meta"][RELATED_TASK] == {"taskId": run}
        assert result["structuredContent"]["result"]["status"] == "succeeded"
        done = server.call("tasks/get", {"taskId": run})["result"]
        assert done["status"] == "completed" and done["lastUpdatedAt"] >= done["createdAt"]
        listed = server.call("tasks/list")["result"]["tasks"]
        assert [t["taskId"] for t in listed] == [run]
        statuses = [m["params"] for m in server.messages()
                    if isinstance(m, dict) and m.get("method") == "notifications/tasks/status"]
        assert [(s["taskId"], s["status"]) for s in statuses] == [(run, "completed")]
    assert len(payments.refunds()) == 1


def test_a_task_of_a_tool_that_forbids_tasks_is_refused_and_nothing_is_reserved(tmp_path, payments):
    site = task_site(tmp_path, payments, task="forbidden")
    with RawServer(site, {"STRIPE_SECRET_KEY": payments.key}) as server:
        assert "tasks" not in server.initialize()["result"]["capabilities"]
        answer = server.call("tools/call", {"name": "refund_order", "task": {},
                                            "arguments": {"order": "pi_x", "amount": USD20}})
        assert answer["error"]["code"] == -32601
        unknown = server.call("tasks/get", {"taskId": "0" * 32})
        assert unknown["error"]["code"] == -32602
    assert read_ledger(site.ledger_path).runs() == () and payments.requests("POST") == []


def test_a_task_survives_a_sigkill_of_the_server_and_completes_with_one_refund(tmp_path, payments):
    site = task_site(tmp_path, payments)
    env = {"STRIPE_SECRET_KEY": payments.key}
    order = payments.intent(amount=5000)["id"]
    payments.fault("/v1/refunds", "hang")
    server = RawServer(site, env)
    try:
        server.initialize()
        run = create_task(server, order)["taskId"]
        payments.wait("/v1/refunds", held=1)
        kill_server_and_workers(server)
    finally:
        server.stop()
    payments.release()  # the service makes the refund; nobody hears of it
    payments.wait(refunds=1)
    with RawServer(site, env) as again:
        again.initialize()  # answered after recovery has resumed the run to its end
        got = again.call("tasks/get", {"taskId": run})["result"]
        assert got["status"] == "completed", got
        result = again.call("tasks/result", {"taskId": run})["result"]
        assert result["structuredContent"]["result"]["status"] == "succeeded"
    assert len(payments.refunds()) == 1  # the resent refund got the saved answer
    (entry,) = read_ledger(site.ledger_path).runs()
    assert entry.run == run and entry.state == "settled"


def test_a_run_waiting_for_an_operator_is_a_working_task_until_resolved_then_completed(
        tmp_path, payments):
    site = task_site(tmp_path, payments)
    env = {"STRIPE_SECRET_KEY": payments.key}
    order = payments.intent(amount=5000)["id"]
    payments.fault("/v1/refunds", "fail_saved")  # its refund is in doubt: the run stops
    with RawServer(site, env) as server:
        server.initialize()
        run = create_task(server, order)["taskId"]
        server.stderr.wait_event("run_waiting", run=run)
        got = server.call("tasks/get", {"taskId": run})["result"]
        assert got["status"] == "working"
        assert "waiting for an operator" in got["statusMessage"]
        assert "do not call the tool again" in got["statusMessage"]
        notified = [m["params"] for m in server.messages()
                    if isinstance(m, dict) and m.get("method") == "notifications/tasks/status"]
        assert [(n["taskId"], n["status"]) for n in notified] == [(run, "working")]
        server.close_stdin()
        assert server.wait_exit() == 0
    assert payments.refunds() == []
    said = subprocess.run(staal_command("resolve", "--journal", site.journal("refund_order", run),
                                        "--op", "2", "--happened", "no"),
                          capture_output=True, text=True, check=False)
    assert said.returncode == 0, said.stderr
    with RawServer(site, env) as again:  # recovery resumes it: a new attempt, under a new key
        again.initialize()
        got = again.call("tasks/get", {"taskId": run})["result"]
        assert got["status"] == "completed", got
    assert len(payments.refunds()) == 1
