"""What operators see: a waiting run's record, stderr line and notify
command; `staal-supervisor status`; retention (seed 000 section 7)."""

from __future__ import annotations

import json
import os
import select
import stat
import subprocess
import sys

from staal.manifest.check import check
from staal.runtime.clock import FixedClock
from staal.supervisor.recovery.retention import sweep
from staal.supervisor.store.file_ledger import FileLedger
from staal.supervisor.store.files import RunFiles
from staal.supervisor.store.ledger import read_ledger
from tests.helpers.recorder import WAIT
from tests.helpers.serving import server_env, start, tool, write_manifest

POST = """
from staal.caps import HttpPost

def main(order: str, post: HttpPost) -> dict:
    return {"status": post.post(BASE + "/v1/tickets", json={"order": order}).status_code}
"""


def waiting_manifest(tmp_path, service, **server):
    """An unkeyed POST whose answer never comes: the run stops in doubt."""
    (tmp_path / "ticket.py").write_text(f"BASE = {service.base!r}\n" + POST)
    service.hold("/v1/tickets")
    grants = {"post": {"cap": "net.http.post", "only": [service.base + "/v1/tickets"]}}
    t = tool("ticket", "ticket.py", grants)
    t["net"] = {"timeout_ms": 300, "connect_timeout_ms": 1000}
    return write_manifest(tmp_path, [t], **server)


def notifier(tmp_path, failures: int):
    """A notify command that fails `failures` times, then records its
    argument and environment and exits 0."""
    script = tmp_path / "notify.sh"
    script.write_text(f"""#!/bin/sh
count=$(cat {tmp_path}/attempts 2>/dev/null || echo 0)
count=$((count + 1))
echo $count > {tmp_path}/attempts
[ $count -le {failures} ] && exit 1
env > {tmp_path}/notified.env
echo "$1" > {tmp_path}/notified.path
echo done > {tmp_path}/notified.fifo
""")
    os.mkfifo(tmp_path / "notified.fifo")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def wait_for_notify(tmp_path, timeout=WAIT):
    """Block until the notify command succeeded: it writes to a FIFO."""
    fd = os.open(tmp_path / "notified.fifo", os.O_RDONLY | os.O_NONBLOCK)
    try:
        # Linux reports a FIFO readable only once a writer has written or gone.
        ready, _, _ = select.select([fd], [], [], timeout)
        assert ready, "the notify command never succeeded"
        assert os.read(fd, 64) == b"done\n"
    finally:
        os.close(fd)


def test_a_run_that_waits_is_told_to_the_caller_and_to_the_operator(tmp_path, service):
    script = notifier(tmp_path, failures=1)
    manifest = waiting_manifest(tmp_path, service, notify=[str(script)], notify_env=["SHOP_HOOK"])
    env = server_env(SHOP_HOOK="https://hooks.example/1", UNRELATED_SECRET="never-passed-on")
    with start(manifest, env) as served:
        result = served.call("ticket", {"order": "o1"})
        assert result["isError"] is True
        run = result["structuredContent"]["run"]
        assert result["structuredContent"] == {"status": "waiting_for_operator", "run": run}
        record = tmp_path / "journals" / "waiting" / f"{run}.json"
        data = json.loads(record.read_text())
        assert data["op"] == 1 and "staal resolve --journal" in data["resolve"]
        assert served.events("run_waits_for_operator")[0]["run"] == run
        wait_for_notify(tmp_path)
        assert (tmp_path / "notified.path").read_text().strip() == str(record)
        assert (tmp_path / "attempts").read_text().strip() == "2"  # retried until it exited 0
        names = {line.split("=")[0] for line in (tmp_path / "notified.env").read_text().splitlines()}
        assert "SHOP_HOOK" in names and "UNRELATED_SECRET" not in names
        status = served.call("staal_run_status", {"run": run})
        assert status["structuredContent"]["status"] == "waiting_for_operator"
        first = record.read_bytes()
        assert served.close() == 0
    entry = read_ledger(tmp_path / "journals" / "server.ledger").run(run)
    assert entry.state == "unsettled"  # a stopped run keeps its whole reservation
    with start(manifest, env) as again:  # resumed at start, it stops again
        assert again.close() == 0
    assert record.read_bytes() == first  # kept as first written
    assert len(service.seen("POST")) == 1


def test_status_lists_a_waiting_run_with_the_command_that_resolves_it(tmp_path, service):
    manifest = waiting_manifest(tmp_path, service)
    with start(manifest) as served:
        run = served.call("ticket", {"order": "o1"})["structuredContent"]["run"]
        ledger_before = (tmp_path / "journals" / "server.ledger").read_bytes()
        done = subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "status",
                               str(manifest), "--json"], capture_output=True, text=True, timeout=60,
                              check=False)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["server"]["running"] is True
        (waiting,) = report["runs"]
        assert waiting["run"] == run and waiting["state"] == "waiting_for_operator"
        journal = RunFiles(tmp_path / "journals", "ticket", run).journal
        assert waiting["resolve"].startswith(f"staal resolve --journal {journal} --op 1 --happened yes")
        human = subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "status", str(manifest)],
                               capture_output=True, text=True, timeout=60, check=False)
        assert run in human.stdout and "resolve:" in human.stdout
        assert (tmp_path / "journals" / "server.ledger").read_bytes() == ledger_before
        # Status took no lock: the server goes on serving.
        assert served.call("staal_run_status", {"run": run})["isError"] is False
        assert served.close() == 0
    after = json.loads(subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "status",
                                       str(manifest), "--json"], capture_output=True, text=True,
                                      timeout=60, check=False).stdout)
    assert after["server"]["running"] is False
    assert after["runs"][0]["state"] == "waiting_for_operator"


def test_status_gives_each_tools_quota_use(tmp_path, service):
    (tmp_path / "noop.py").write_text("def main(n: int) -> int:\n    return n\n")
    manifest = write_manifest(tmp_path, [tool("noop", "noop.py", quota={"window": "1h", "calls": 5})])
    with start(manifest) as served:
        for n in range(3):
            assert served.call("noop", {"n": n})["isError"] is False
        assert served.close() == 0
    report = json.loads(subprocess.run(
        [sys.executable, "-m", "staal.supervisor.app.main", "status", str(manifest), "--json"],
        capture_output=True, text=True, timeout=60, check=False).stdout)
    (quota,) = report["quotas"]
    assert (quota["tool"], quota["calls"], quota["calls_limit"]) == ("noop", 3, 5)
    assert quota["calls_frees_at"] is not None


def test_retention_deletes_the_log_then_the_journal_of_runs_settled_longer_ago_than_keep(tmp_path):
    (tmp_path / "noop.py").write_text("def main() -> dict:\n    return {}\n")
    data = {"server": {"name": "t", "journals": "journals", "keep": 1},
            "tools": [tool("old", "noop.py"), tool("keyed", "noop.py", once={"by": ["x"], "keep": "1d"})]}
    (tmp_path / "noop2.py").write_text("def main(x: str) -> dict:\n    return {}\n")
    data["tools"][1]["program"] = "noop2.py"
    manifest = check(data, tmp_path / "manifest.json")
    journals = tmp_path / "journals"
    clock = FixedClock(1_000_000_000_000)
    ledger = FileLedger.open(journals / "server.ledger", clock)
    from staal.records.ledger_records import OnceHold

    old = ledger.reserve_call("old", None, 1, (), None).run
    waiting = ledger.reserve_call("old", None, 1, (), None).run
    keyed = ledger.reserve_call("keyed", None, 1, (), OnceHold("a" * 64, "b" * 64, 10 * 86_400_000)).run
    ledger.settle(old, "done", ())
    ledger.settle(keyed, "done", ())
    for tool_name, run in (("old", old), ("old", waiting), ("keyed", keyed)):
        files = RunFiles(journals, tool_name, run)
        files.folder.mkdir(parents=True, exist_ok=True)
        files.journal.write_text("{}\n")
        files.log.write_text("{}\n")
    clock.advance(2 * 86_400_000)
    result = sweep(manifest, ledger)
    assert result.deleted == (old,)
    assert not RunFiles(journals, "old", old).journal.exists()
    assert not RunFiles(journals, "old", old).log.exists()
    assert RunFiles(journals, "old", waiting).journal.exists()  # unsettled: never deleted
    assert RunFiles(journals, "keyed", keyed).journal.exists()  # holds a once key: kept
    assert old in result.compaction.dropped
    ledger.close()
    assert read_ledger(journals / "server.ledger").run(old) is None


def test_run_status_answers_expired_once_the_journal_is_gone_and_unknown_after(tmp_path):
    (tmp_path / "noop.py").write_text("def main(n: int) -> int:\n    return n\n")
    manifest = write_manifest(tmp_path, [tool("noop", "noop.py")])
    with start(manifest) as served:
        served.call("noop", {"n": 1})
        (entry,) = read_ledger(tmp_path / "journals" / "server.ledger").runs()
        os.unlink(RunFiles(tmp_path / "journals", "noop", entry.run).journal)
        assert served.call("staal_run_status", {"run": entry.run})["structuredContent"]["status"] == "expired"
        unknown = served.call("staal_run_status", {"run": "0" * 32})
        assert unknown["structuredContent"]["status"] == "unknown"
        assert served.close() == 0


def test_a_waiting_run_resolved_by_an_operator_is_resumed_and_settled_at_the_next_start(tmp_path, service):
    manifest = waiting_manifest(tmp_path, service)
    with start(manifest) as served:
        run = served.call("ticket", {"order": "o1"})["structuredContent"]["run"]
        assert served.close() == 0
    files = RunFiles(tmp_path / "journals", "ticket", run)
    answer = json.dumps({"status": 201, "text": "{}"})
    resolved = subprocess.run([sys.executable, "-m", "staal.worker.commands.cli", "resolve", "--journal",
                               str(files.journal), "--op", "1", "--happened", "yes", "--result", answer],
                              capture_output=True, text=True, timeout=60, check=False)
    assert resolved.returncode == 0, resolved.stderr
    # A server's journal: the operator is told the server resumes it, not to
    # run `staal resume` beside the server.
    assert resolved.stdout.strip().endswith("the server resumes the run at its next start")
    listed = subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "status", str(manifest),
                             "--json"], capture_output=True, text=True, timeout=60, check=False)
    (answered,) = json.loads(listed.stdout)["runs"]
    assert (answered["run"], answered["state"]) == (run, "answered: resumed at the next start")
    with start(manifest) as served:
        status = served.call("staal_run_status", {"run": run})
        assert status["structuredContent"]["status"] == "done"
        assert status["structuredContent"]["result"] == {"status": 201}
        assert served.close() == 0
    entry = read_ledger(tmp_path / "journals" / "server.ledger").run(run)
    assert entry.state == "settled"
    assert not files.waiting.exists() and not files.inputs.exists()
    assert len(service.seen("POST")) == 1  # it happened once; nothing was sent again


def test_a_notify_command_that_keeps_failing_changes_nothing_else(tmp_path, service):
    script = notifier(tmp_path, failures=10_000)
    manifest = waiting_manifest(tmp_path, service, notify=[str(script)])
    (tmp_path / "noop.py").write_text("def main(n: int) -> int:\n    return n\n")
    data = json.loads(manifest.read_text())
    data["tools"].append(tool("noop", "noop.py"))
    manifest.write_text(json.dumps(data))
    with start(manifest) as served:
        run = served.call("ticket", {"order": "o1"})["structuredContent"]["run"]
        assert (tmp_path / "journals" / "waiting" / f"{run}.json").exists()
        assert served.events("run_waits_for_operator")
        assert served.call("noop", {"n": 7})["structuredContent"] == {"result": 7}
        assert served.close() == 0


def test_a_repeated_once_call_of_a_waiting_run_gets_the_same_stopped_result(tmp_path, service):
    manifest = waiting_manifest(tmp_path, service)
    data = json.loads(manifest.read_text())
    data["tools"][0]["once"] = {"by": ["order"]}
    manifest.write_text(json.dumps(data))
    with start(manifest) as served:
        first = served.call("ticket", {"order": "o1"})
        again = served.call("ticket", {"order": "o1"})
        assert again["isError"] is True
        assert again["structuredContent"] == first["structuredContent"]
        assert again["structuredContent"]["status"] == "waiting_for_operator"
        assert served.close() == 0
    assert len(service.seen("POST")) == 1


def test_with_keep_forever_nothing_is_ever_deleted():
    from staal.supervisor.recovery.retention import expired
    from staal.supervisor.store.entries import RunEntry

    entry = RunEntry(run="a" * 32, tool="t", reserved_ms=0, calls=1, money=(), once=None,
                     state="settled", ended_ms=0, outcome="done", charged=())
    assert expired(entry, 86_400_000, 10 * 86_400_000)
    assert not expired(entry, None, 10**15)


def test_no_outcome_and_no_restart_removes_a_journal(tmp_path, service):
    manifest = waiting_manifest(tmp_path, service)
    (tmp_path / "p.py").write_text(
        "from staal import fail\n\ndef main(n: int) -> int:\n"
        "    if n < 0:\n        fail('validation', 'negative')\n    return n\n")
    data = json.loads(manifest.read_text())
    data["tools"].append(tool("p", "p.py"))
    manifest.write_text(json.dumps(data))
    with start(manifest) as served:
        served.call("p", {"n": 1})            # done
        served.call("p", {"n": -1})           # failed
        served.call("p", {"n": "x"})          # refused before it ran: no journal
        served.call("ticket", {"order": "o"})  # stopped, waiting
        assert served.close() == 0
    runs = read_ledger(tmp_path / "journals" / "server.ledger").runs()
    journals = sorted((tmp_path / "journals").glob("*/*/*.journal"))
    assert len(runs) == len(journals) == 3
    with start(manifest) as served:  # recovery and the retention sweep at start
        assert served.close() == 0
    assert sorted((tmp_path / "journals").glob("*/*/*.journal")) == journals


def test_both_commands_print_their_version():
    import staal

    for module, expected in (("staal.supervisor.app.main",
                              f"staal-supervisor {staal.__version__} (runtime {staal.RUNTIME})"),
                             ("staal.worker.commands.cli", f"staal {staal.__version__}")):
        done = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True,
                              text=True, timeout=60, check=False)
        assert (done.returncode, done.stdout, done.stderr) == (0, expected + "\n", "")
