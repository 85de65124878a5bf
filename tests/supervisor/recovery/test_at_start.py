"""Recovery at start and after a worker's death (seed 000 section 7,
DESIGN.md sections 6 and 9): one rule per case, before anything is answered."""

from __future__ import annotations

import json
import subprocess
import sys

import psutil

from staal.journal.reader import read_journal
from staal.journal.records import JOURNAL, End, Header, Intent
from staal.records.messages import StoppedMsg
from staal.records.outcomes import Usage
from staal.runtime.clock import SYSTEM_CLOCK
from staal.runtime.ids import new_run_id
from staal.supervisor.calls.outcomes import give_up
from staal.supervisor.store.file_ledger import FileLedger
from staal.supervisor.store.files import RunFiles
from staal.supervisor.store.ledger import read_ledger
from tests.helpers.recorder import WAIT
from tests.helpers.serving import server_env, start, tool, write_manifest

LOOKUP = """
from staal.caps import HttpGet

def main(order: str, get: HttpGet) -> dict:
    return {"status": get.get(BASE + "/v1/orders/" + order).status_code}
"""


def lookup_manifest(tmp_path, service, **server):
    (tmp_path / "lookup.py").write_text(f"BASE = {service.base!r}\n" + LOOKUP)
    service.route("GET", "/v1/orders/o1", 200, {"id": "o1"})
    grants = {"get": {"cap": "net.http.get", "only": [service.base + "/v1/orders/*"]}}
    return write_manifest(tmp_path, [tool("lookup", "lookup.py", grants)], **server)


def interrupted(tmp_path, service):
    """A run killed with its server while the service holds its request."""
    manifest = lookup_manifest(tmp_path, service)
    interrupt(manifest, service)
    (entry,) = read_ledger(tmp_path / "journals" / "server.ledger").unsettled()
    return manifest, entry.run


def interrupt(manifest, service, env=None):
    """Kill the server of `manifest` with its run's request held by the service."""
    hold = service.hold("/v1/orders/o1")
    served = start(manifest, env)
    served.send({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
                 "params": {"name": "lookup", "arguments": {"order": "o1"}}})
    assert hold.arrived.wait(WAIT), served.stderr()
    family = psutil.Process(served.process.pid).children(recursive=True)
    served.kill()
    # Its zygote and worker die with it, but not at the same instant: the
    # service answers only once they are gone, or the worker could still
    # journal the read's outcome.
    psutil.wait_procs(family, timeout=WAIT)
    assert not [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    hold.release.set()
    with service.lock:
        del service.holds["/v1/orders/o1"]


def serve_once(manifest, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "serve", str(manifest)],
                          input=b"", capture_output=True, timeout=60, env=env or server_env(),
                          cwd=manifest.parent, check=False)


def test_an_interrupted_run_is_resumed_at_start_and_settled(tmp_path, service):
    manifest, run = interrupted(tmp_path, service)
    files = RunFiles(tmp_path / "journals", "lookup", run)
    assert read_journal(files.journal).end is None
    assert files.inputs.exists()  # kept while the run may need resuming
    with start(manifest) as served:
        assert [e["rule"] for e in served.events("recovered")] == ["resuming", "resumed"]
        status = served.call("staal_run_status", {"run": run})
        assert status["structuredContent"]["status"] == "done"
        assert served.close() == 0
    assert len(service.seen("GET")) == 2  # a read in doubt is sent again
    entry = read_ledger(tmp_path / "journals" / "server.ledger").run(run)
    assert entry.state == "settled" and entry.outcome == "done"
    assert not files.inputs.exists()
    events = [json.loads(line)["event"] for line in files.log.read_text().splitlines()]
    assert events[0] == "started" and events[-1] == "ended"  # the run's log beside its journal


def test_an_unfinished_run_whose_program_changed_stops_the_server_naming_it(tmp_path, service):
    manifest, run = interrupted(tmp_path, service)
    program = tmp_path / "lookup.py"
    source = program.read_text()
    program.write_text(source + "\n# changed while the run was unfinished\n")
    done = serve_once(manifest)
    assert done.returncode == 2
    assert done.stdout == b""
    assert run.encode() in done.stderr
    assert (f"run {run} of tool 'lookup' is unfinished and cannot be resumed: its program "
            f"{program} changed since it began. Run the previous version").encode() in done.stderr
    assert len(service.seen("GET")) == 1
    program.write_text(source)
    again = serve_once(manifest)
    assert again.returncode == 0, again.stderr.decode()
    assert read_ledger(tmp_path / "journals" / "server.ledger").run(run).state == "settled"


def test_a_journal_with_no_reservation_stops_the_server_naming_it(tmp_path, service):
    manifest = lookup_manifest(tmp_path, service)
    run = new_run_id()
    files = RunFiles(tmp_path / "journals", "lookup", run)
    files.folder.mkdir(parents=True)
    header = Header(run=run, tool="lookup", program=str(tmp_path / "lookup.py"),
                    program_sha256="0" * 64, config_sha256="0" * 64, inputs_sha256="0" * 64,
                    runtime="staal 0.1.0", time=1)
    files.journal.write_bytes(json.dumps(JOURNAL.encode(header)).encode() + b"\n")
    done = serve_once(manifest)
    assert done.returncode == 2
    assert done.stdout == b""
    assert str(files.journal).encode() in done.stderr
    assert service.seen() == []


def test_a_run_that_ended_but_was_not_settled_is_settled_from_its_end(tmp_path, service):
    manifest = lookup_manifest(tmp_path, service)
    journals = tmp_path / "journals"
    ledger = FileLedger.open(journals / "server.ledger", SYSTEM_CLOCK)
    reserved = ledger.reserve_call("lookup", None, 1, (), None)
    ledger.close()
    files = RunFiles(journals, "lookup", reserved.run)
    files.folder.mkdir(parents=True)
    header = Header(run=reserved.run, tool="lookup", program=str(tmp_path / "lookup.py"),
                    program_sha256="0" * 64, config_sha256="0" * 64, inputs_sha256="0" * 64,
                    runtime="staal 0.1.0", time=1)
    end = End(outcome="done", time=2, result={"status": 200}, usage={"get": Usage(actions=1)})
    files.journal.write_bytes(b"".join(json.dumps(JOURNAL.encode(r)).encode() + b"\n"
                                       for r in (header, end)))
    files.inputs.write_text('{"order": "o1"}')
    done = serve_once(manifest)
    assert done.returncode == 0, done.stderr.decode()
    entry = read_ledger(journals / "server.ledger").run(reserved.run)
    assert entry.state == "settled" and entry.outcome == "done"
    assert not files.inputs.exists()
    assert service.seen() == []  # settled from its end, not run again


def test_a_worker_that_keeps_dying_is_resumed_three_times_then_fails_as_internal(tmp_path):
    (tmp_path / "crash.py").write_text(
        "from staal.caps import Ffi\n\ndef main(libc: Ffi) -> dict:\n    libc.abort()\n    return {}\n")
    manifest = write_manifest(tmp_path, [tool("crash", "crash.py",
                                              {"libc": {"cap": "ffi.c", "library": "libc.so.6"}})])
    with start(manifest) as served:
        result = served.call("crash", {})
        assert result["isError"] is True
        lost = served.events("worker_lost")
        assert len(lost) == 4 and all("SIGABRT" in e["how"] for e in lost)
        assert served.close() == 0
    (entry,) = read_ledger(tmp_path / "journals" / "server.ledger").runs()
    assert entry.run in result["content"][0]["text"]
    assert entry.state == "settled" and entry.outcome == "failed"
    end = read_journal(RunFiles(tmp_path / "journals", "crash", entry.run).journal).end
    assert end.failure.kind == "internal"


def test_giving_up_on_a_run_with_an_op_in_doubt_makes_it_wait_for_an_operator(tmp_path):
    files = RunFiles(tmp_path, "pay", new_run_id())
    files.folder.mkdir(parents=True)
    header = Header(run=files.run, tool="pay", program="/p.py", program_sha256="0" * 64,
                    config_sha256="0" * 64, inputs_sha256="0" * 64, runtime="staal 0.1.0", time=1)
    intent = Intent(op=1, param="post", cap="net.http.post", action="post",
                    args_sha256="0" * 64, time=2)
    files.journal.write_bytes(b"".join(json.dumps(JOURNAL.encode(r)).encode() + b"\n"
                                       for r in (header, intent)))
    final = give_up(files, ("post",), 4, "was killed by SIGSEGV")
    assert isinstance(final, StoppedMsg) and final.op == 1
    assert "staal resolve" in final.message
    journal = read_journal(files.journal)
    assert journal.stopped is not None and journal.stopped.op == 1 and journal.end is None


def test_a_zygote_that_dies_at_start_stops_the_server_at_once(tmp_path):
    (tmp_path / "dies.py").write_text("import os\nos._exit(3)\n\ndef main() -> dict:\n    return {}\n")
    manifest = write_manifest(tmp_path, [tool("dies", "dies.py")])
    done = serve_once(manifest)
    assert done.returncode == 2
    assert done.stdout == b""
    assert b"zygote" in done.stderr


def test_a_zygote_killed_while_serving_is_started_again(tmp_path):
    import os
    import signal

    import psutil

    (tmp_path / "noop.py").write_text("def main(n: int) -> int:\n    return n\n")
    manifest = write_manifest(tmp_path, [tool("noop", "noop.py")])
    with start(manifest) as served:
        assert served.call("noop", {"n": 1})["structuredContent"] == {"result": 1}
        (zygote,) = [p for p in psutil.Process(served.process.pid).children()
                     if "staal.worker.processes.zygote" in " ".join(p.cmdline())]
        os.kill(zygote.pid, signal.SIGKILL)
        assert served.call("noop", {"n": 2})["structuredContent"] == {"result": 2}
        assert served.events("zygote_exited")
        assert served.close() == 0


# -- a journal cut during its creation ------------------------------------------------------


def reserved_with_journal(tmp_path, service, journal: bytes):
    """A reserved run with its arguments kept and a journal file holding
    `journal`, as a crash during the journal's creation leaves them."""
    manifest = lookup_manifest(tmp_path, service)
    journals = tmp_path / "journals"
    ledger = FileLedger.open(journals / "server.ledger", SYSTEM_CLOCK)
    reserved = ledger.reserve_call("lookup", None, 1, (), None)
    ledger.close()
    files = RunFiles(journals, "lookup", reserved.run)
    files.folder.mkdir(parents=True)
    files.inputs.write_text('{"order": "o1"}')
    files.journal.write_bytes(journal)
    return manifest, files


def header_line(run: str, tmp_path) -> bytes:
    header = Header(run=run, tool="lookup", program=str(tmp_path / "lookup.py"),
                    program_sha256="0" * 64, config_sha256="0" * 64, inputs_sha256="0" * 64,
                    runtime="staal 0.1.0", time=1)
    return json.dumps(JOURNAL.encode(header)).encode() + b"\n"


def test_a_journal_cut_before_its_header_is_a_run_that_never_started_and_is_released(
        tmp_path, service):
    for case, cut in (("empty", lambda line: b""), ("torn", lambda line: line[:40])):
        root = tmp_path / case
        root.mkdir()
        manifest, files = reserved_with_journal(root, service, b"")
        files.journal.write_bytes(cut(header_line(files.run, root)))
        done = serve_once(manifest)
        assert done.returncode == 0, done.stderr.decode()
        [released] = [json.loads(line) for line in done.stderr.splitlines()
                      if b'"recovered"' in line]
        assert released["rule"] == "released: it never started" and released["run"] == files.run
        assert released["removed"] == "its journal, cut before its header was durable"
        # Released, then dropped by the start's compaction: it holds nothing.
        assert read_ledger(root / "journals" / "server.ledger").run(files.run) is None
        assert not files.journal.exists() and not files.inputs.exists()
    assert service.seen() == []  # the runs never started, so nothing was sent


def test_a_journal_whose_first_line_is_not_a_header_still_stops_the_server(tmp_path, service):
    manifest, files = reserved_with_journal(tmp_path, service, b"")
    intent = Intent(op=1, param="get", cap="net.http.get", action="get", args_sha256="0" * 64,
                    time=2)
    files.journal.write_bytes(json.dumps(JOURNAL.encode(intent)).encode() + b"\n")
    done = serve_once(manifest)
    assert done.returncode == 2 and done.stdout == b""
    assert b"its journal is damaged" in done.stderr and b"line 1" in done.stderr
    assert files.journal.exists() and files.inputs.exists()  # nothing removed
    assert read_ledger(tmp_path / "journals" / "server.ledger").run(files.run).state == "unsettled"


def test_a_server_killed_after_its_worker_died_creating_the_journal_releases_the_run_at_start(
        tmp_path, service):
    import os
    import signal

    from tests.helpers.servers import RawServer, Site

    site = Site(tmp_path)
    service.route("GET", "/v1/orders/o1", 200, {"id": "o1"})
    site.program("lookup.py", f"BASE = {service.base!r}\n" + LOOKUP)
    site.write([{"name": "lookup", "program": "lookup.py",
                 "grants": {"get": {"cap": "net.http.get", "only": [service.base + "/v1/orders/*"]}}}])
    kill = {"STAAL_TEST_KILL_POINTS": "1", "STAAL_KILL_AT": "worker:journal_file"}
    with RawServer(site, kill) as server:
        server.initialize()
        server.request("tools/call", {"name": "lookup", "arguments": {"order": "o1"}})
        server.stderr.wait_event("worker_lost")  # its worker died creating the journal
        os.kill(server.process.pid, signal.SIGKILL)  # and then the server
        server.process.wait(WAIT)
    (entry,) = read_ledger(site.ledger_path).unsettled()
    files = RunFiles(site.journals, "lookup", entry.run)
    with RawServer(site) as again:
        again.initialize()
        result = again.call_tool("lookup", {"order": "o1"})
        again.close_stdin()
        assert again.wait_exit() == 0
    assert [(e["rule"], e["run"]) for e in again.stderr.events("recovered")] == [
        ("released: it never started", entry.run)]
    assert result["structuredContent"] == {"result": {"status": 200}}
    assert read_ledger(site.ledger_path).run(entry.run) is None  # released, then compacted away
    assert not files.journal.exists() and not files.inputs.exists()
    assert len(service.seen("GET")) == 1  # the new call's: the killed run never sent one
