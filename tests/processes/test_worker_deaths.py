"""When a run's workers keep dying, the server gives up on it the way the
journal says: an op that may have happened waits for an operator (seed 000
invariant 5); only a run with nothing in doubt fails as internal. Both
processes read the journal with the one reader in `staal.journal.reader`, so the
supervisor sees an op in doubt exactly where the worker does, including an
op an operator answered "did not happen" and that is now being attempted
again under its new key."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from staal.journal.reader import read_journal
from staal.journal.records import JOURNAL, Header, Intent, Resolved, Stopped, Value
from staal.money import Money
from staal.records.messages import Ended, StoppedMsg
from staal.runtime.ids import new_run_id
from staal.supervisor.calls.outcomes import give_up
from staal.supervisor.store.files import RunFiles
from staal.supervisor.store.ledger import read_ledger
from tests.helpers.payments import Payments
from tests.helpers.runs import staal_command
from tests.helpers.servers import RawServer, Site, stripe_refund_grant

ROOT = Path(__file__).resolve().parents[2]
SHA = "0" * 64
USD20 = {"amount": "20.00", "currency": "USD"}


def journal_of(tmp_path: Path, *records) -> RunFiles:
    files = RunFiles(tmp_path, "pay", new_run_id())
    files.folder.mkdir(parents=True)
    header = Header(run=files.run, tool="pay", program="/p.py", program_sha256=SHA,
                    config_sha256=SHA, inputs_sha256=SHA, runtime="staal 0.1.0", time=1)
    files.journal.write_bytes(b"".join(json.dumps(JOURNAL.encode(r)).encode() + b"\n"
                                       for r in (header, *records)))
    return files


def post(op: int, time: int, key: str | None = None) -> Intent:
    return Intent(op=op, param="pay", cap="net.http.post", action="post", args_sha256=SHA,
                  time=time, idempotency_key=key)


def test_giving_up_during_a_new_attempt_after_did_not_happen_makes_the_run_wait(tmp_path):
    files = journal_of(tmp_path, post(1, 2, "k-1"), Stopped(op=1, message="in doubt", time=3),
                       Resolved(op=1, happened=False, time=4), post(1, 5, "k-1-2"))
    final = give_up(files, ("pay",), 4, "was killed by SIGKILL")
    assert isinstance(final, StoppedMsg) and final.op == 1
    journal = read_journal(files.journal)
    assert journal.end is None and journal.stopped.op == 1 and journal.in_doubt() == [1]


def test_giving_up_with_nothing_in_doubt_ends_the_run_as_internal_with_the_journals_usage(tmp_path):
    from staal.journal.records import OutcomeRecord

    charged = (Money("20.00", "USD"),)
    files = journal_of(tmp_path, post(1, 2, "k-1"),
                       OutcomeRecord(op=1, ok=True, time=3, result={}, charged=charged),
                       Value(op=2, cap="clock.now", value=7, time=4, param="clock"))
    final = give_up(files, ("pay", "clock", "unused"), 4, "was killed by SIGKILL")
    assert isinstance(final, Ended) and final.failure.kind == "internal"
    assert {name: (u.actions, u.charged) for name, u in final.usage.items()} == {
        "pay": (1, charged), "clock": (1, ()), "unused": (0, ())}
    assert read_journal(files.journal).end.usage == final.usage


def test_giving_up_on_a_read_with_no_outcome_fails_the_run_as_internal_and_never_waits(tmp_path):
    # A GET that every worker died during may have reached the service, but it
    # is safe to send again: it is not in doubt, and no operator is asked.
    get = Intent(op=1, param="pay", cap="net.http.get", action="get", args_sha256=SHA, time=2,
                 read=True)
    files = journal_of(tmp_path, get)
    final = give_up(files, ("pay",), 4, "was killed by SIGKILL")
    assert isinstance(final, Ended) and final.failure.kind == "internal"
    journal = read_journal(files.journal)
    assert journal.in_doubt() == [] and journal.stopped is None
    assert final.usage["pay"].actions == 1


def test_an_action_written_before_reads_were_marked_is_still_in_doubt(tmp_path):
    files = journal_of(tmp_path, Intent(op=1, param="pay", cap="net.http.get", action="get",
                                        args_sha256=SHA, time=2))
    final = give_up(files, ("pay",), 4, "was killed by SIGKILL")
    assert isinstance(final, StoppedMsg) and final.op == 1


# -- end to end: the real server, its workers killed during the new attempt ----------------


def refund_site(tmp_path: Path, payments: Payments) -> Site:
    site = Site(tmp_path)
    shutil.copy(ROOT / "examples" / "refund.py", tmp_path / "refund.py")
    site.write([{"name": "refund_order", "program": "refund.py",
                 "grants": {"pay": stripe_refund_grant(payments.base)}}])
    return site


def kill_nth_worker(server: RawServer, payments: Payments, run: str, n: int) -> None:
    """Once the n-th worker of `run` is inside the refund (a gateway in
    front of the service holds its POST), kill it. It is stopped first and
    the gateway then drops the request unanswered, nothing done, so the key
    is free again when the next worker sends it (no 409 "key in use")."""
    payments.wait("/v1/refunds", held=1)
    server.stderr.wait_for(lambda _: len(server.stderr.events("run_started", run=run)) >= n,
                           what=f"the run's worker number {n}")
    pid = server.stderr.events("run_started", run=run)[n - 1]["pid"]
    os.kill(pid, signal.SIGSTOP)
    payments.release()
    os.kill(pid, signal.SIGKILL)


def test_workers_killed_during_the_new_attempt_leave_the_run_waiting_and_status_names_the_op(
        tmp_path, payments):
    site = refund_site(tmp_path, payments)
    env = {"STRIPE_SECRET_KEY": payments.key}
    order = payments.intent(amount=5000)["id"]
    payments.fault("/v1/refunds", "fail_saved")  # Stripe keeps the 500 under the first key
    with RawServer(site, env) as server:
        server.initialize()
        first = server.call_tool("refund_order", {"order": order, "amount": USD20})
        run = first["structuredContent"]["run"]
        assert first["structuredContent"]["status"] == "waiting_for_operator"
        server.close_stdin()
        assert server.wait_exit() == 0
    journal = site.journal("refund_order", run)
    said = subprocess.run(staal_command("resolve", "--journal", journal, "--op", "2",
                                        "--happened", "no"), capture_output=True, text=True, check=False)
    assert said.returncode == 0, said.stderr

    # The new attempt goes out under its own key; each worker that sends it dies.
    payments.fault("/v1/refunds", "hang_close", times=4)
    with RawServer(site, env) as server:
        for n in range(1, 5):
            kill_nth_worker(server, payments, run, n)
        server.stderr.wait_event("recovered", rule="resumed", run=run)
        status = subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "status",
                                 str(site.manifest), "--json"], capture_output=True, text=True, check=False)
        server.close_stdin()
        assert server.wait_exit() == 0
    assert len(server.stderr.events("worker_lost", run=run)) == 4

    # Op 2 may have happened: the run waits, holding its reservation; nothing settled it.
    (entry,) = read_ledger(site.ledger_path).runs()
    assert entry.state == "unsettled"
    state = read_journal(journal)
    assert state.end is None and state.stopped.op == 2 and state.in_doubt() == [2]
    assert [r.idempotency_key for r in state.history if isinstance(r, Intent) and r.op == 2] == [
        f"{run}-2", f"{run}-2-2"]
    assert json.loads(site.waiting_record(run).read_text())["op"] == 2
    assert status.returncode == 0, status.stderr
    (listed,) = json.loads(status.stdout)["runs"]
    assert (listed["run"], listed["state"], listed["op"]) == (run, "waiting_for_operator", 2)
    assert f"--journal {journal} --op 2" in listed["resolve"]
    # The service saw the first attempt get its saved 500 (resent inside the
    # run), then only the new attempt under its own key: four dropped,
    # perhaps a "key in use" between; and it refunded nothing.
    keys = [p["headers"]["idempotency-key"] for p in payments.requests("POST")]
    first = keys.index(f"{run}-2-2")
    assert first >= 1 and set(keys[:first]) == {f"{run}-2"}
    assert set(keys[first:]) == {f"{run}-2-2"} and len(keys[first:]) >= 4
    assert payments.refunds() == []


# -- the engine failed after the journal had its say ----------------------------------------


class Sent:
    """What a worker's channel would have sent the supervisor."""

    def __init__(self) -> None:
        self.messages: list = []

    def send(self, message) -> None:
        self.messages.append(message)


def failing_after(monkeypatch, records) -> None:
    """The engine writes `records` to the run's journal, then raises."""
    import staal.worker.processes.serve as serve

    def execute(message, binding, channel, spans=None):
        from staal.journal.writer import JournalWriter

        with JournalWriter.reopen(message.journal) as writer:
            for record in records:
                writer.write(record)
        raise RuntimeError("a bug after the journal was written")

    monkeypatch.setattr(serve, "execute", execute)


def serve_run_of(tmp_path, monkeypatch, *records):
    from types import SimpleNamespace

    import staal.worker.processes.serve as serve
    from staal.records.messages import Run
    from staal.worker.processes.binding import Binding

    files = journal_of(tmp_path, post(1, 2, "k-1"), *records[:-1])
    failing_after(monkeypatch, records[-1:])
    channel = Sent()
    configs = {"pay": SimpleNamespace(grants={"pay": None})}
    serve.serve_run(channel, Run(run=files.run, tool="pay", journal=str(files.journal),
                                 inputs=str(files.inputs), resume=False), configs,
                    Binding(configs, {}, {}))
    return files, channel.messages[-1]


def test_an_engine_failure_after_the_end_is_durable_reports_the_journals_end(tmp_path, monkeypatch):
    from staal.journal.records import End, OutcomeRecord
    from staal.records.outcomes import Usage

    charged = (Money("20.00", "USD"),)
    end = End(outcome="done", time=9, result={"refund": "re_1"},
              usage={"pay": Usage(actions=1, charged=charged)})
    files, reported = serve_run_of(
        tmp_path, monkeypatch, OutcomeRecord(op=1, ok=True, time=3, result={}, charged=charged), end)
    # The run did finish: the supervisor is told the journal's end, not "internal".
    assert isinstance(reported, Ended)
    assert (reported.outcome, reported.result, reported.usage) == ("done", end.result, end.usage)
    assert read_journal(files.journal).end == end  # and nothing was written after it


def test_an_engine_failure_with_an_op_in_doubt_makes_the_run_wait(tmp_path, monkeypatch):
    from staal.journal.records import Print

    files, reported = serve_run_of(tmp_path, monkeypatch, Print(seq=1, text="sent", time=3))
    assert isinstance(reported, StoppedMsg) and reported.op == 1
    assert "the worker failed: RuntimeError: a bug after the journal was written" in reported.message
    state = read_journal(files.journal)
    assert state.end is None and state.stopped.op == 1


def test_giving_up_on_a_journal_that_ended_reports_its_end_and_writes_nothing(tmp_path):
    from staal.journal.records import End, OutcomeRecord

    end = End(outcome="done", time=9, result=1)
    files = journal_of(tmp_path, post(1, 2), OutcomeRecord(op=1, ok=True, time=3), end)
    before = files.journal.read_bytes()
    final = give_up(files, ("pay",), 4, "was killed by SIGKILL")
    assert isinstance(final, Ended) and final.outcome == "done" and final.result == 1
    assert files.journal.read_bytes() == before
