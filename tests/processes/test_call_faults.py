"""An unexpected error in a call (here a real one: the disk refuses a write
after the reservation, or the clean-up after the answer) is an internal
failure naming the run, logged with its traceback: never "busy, try again
later", which a client would retry and so repeat the action of a tool
without `once`. Nothing escapes the call's task: the server serves on."""

from __future__ import annotations

import shutil
from pathlib import Path

from staal.supervisor.store.ledger import read_ledger
from tests.helpers.servers import RawServer, Site

LOOKUP = """
from staal.caps import HttpGet

def main(url: str, get: HttpGet) -> dict:
    return {"status": get.get(url).status_code}
"""


def lookup_site(tmp_path: Path, base: str) -> Site:
    site = Site(tmp_path)
    site.program("lookup.py", LOOKUP)
    site.write([{"name": "lookup", "program": "lookup.py",
                 "grants": {"get": {"cap": "net.http.get", "only": [base + "/*"]}}}])
    return site


def break_run_folders(site: Site) -> list[Path]:
    """Every `<tool>/<xx>` folder a run id can name, replaced by a file: the
    run's arguments file can no longer be written."""
    folders = sorted((site.journals / "lookup").iterdir())
    for folder in folders:
        folder.rmdir()
        folder.write_text("not a folder")
    return folders


def test_a_fault_after_the_reservation_is_an_internal_failure_naming_the_run(tmp_path, service):
    site = lookup_site(tmp_path, service.base)
    with RawServer(site) as server:
        server.initialize()
        folders = break_run_folders(site)
        result = server.call_tool("lookup", {"url": service.base + "/o1"})
        after = server.call_tool("lookup", {"url": service.base + "/o2"})
        server.close_stdin()
        assert server.wait_exit() == 0
    runs = list(read_ledger(site.ledger_path).runs())
    assert len(runs) == 2 and all(r.state == "unsettled" for r in runs)
    text = result["content"][0]["text"]
    assert result["isError"] is True and "busy" not in text and "try again" not in text
    assert text == (f"An internal error happened in run {runs[0].run}. The details are in the "
                    "server's log, for the operator.")
    assert after["isError"] is True and runs[1].run in after["content"][0]["text"]
    failed = server.stderr.events("call_failed")
    assert [e["run"] for e in failed] == [r.run for r in runs]
    assert "NotADirectoryError" in failed[0]["traceback"] and "write_inputs" in failed[0]["traceback"]
    assert "Task exception" not in server.stderr.text
    # Nothing ran: the service saw nothing, and no journal exists.
    assert service.seen() == [] and site.journal_files() == []

    # At the next start each reservation with no journal is released.
    for folder in folders:
        folder.unlink()
    with RawServer(site) as server:
        server.initialize()
        server.close_stdin()
        assert server.wait_exit() == 0
    released = server.stderr.events("recovered", rule="released: it never started")
    assert sorted(e["run"] for e in released) == sorted(r.run for r in runs)
    assert all(r.state == "released" for r in read_ledger(site.ledger_path).runs())


def test_a_fault_in_the_clean_up_after_the_settle_is_logged_and_the_call_gets_its_outcome(
        tmp_path, service):
    site = lookup_site(tmp_path, service.base)
    held = service.hold("/slow")
    with RawServer(site) as server:
        server.initialize()
        request = server.request("tools/call", {"name": "lookup",
                                                "arguments": {"url": service.base + "/slow"}})
        assert held.arrived.wait(30)
        started = server.stderr.wait_event("run_started")
        inputs = site.journal("lookup", started["run"]).with_suffix(".inputs.json")
        inputs.unlink()
        inputs.mkdir()  # the clean-up after the settle cannot remove it
        held.release.set()
        answer = server.answer(request)
        assert answer["result"]["structuredContent"] == {"result": {"status": 404}}
        failed = server.stderr.wait_event("clean_up_failed", run=started["run"])
        assert failed["tool"] == "lookup" and "IsADirectoryError" in failed["error"]
        [entry] = read_ledger(site.ledger_path).runs()
        assert (entry.state, entry.outcome) == ("settled", "done")
        again = server.call_tool("lookup", {"url": service.base + "/o2"})
        assert again["structuredContent"] == {"result": {"status": 404}}
        server.close_stdin()
        assert server.wait_exit() == 0
    # One answer for the call, the one its run earned (the recorder has no route: 404).
    assert [m for m in server.messages() if m.get("id") == request] == [answer]
    stderr = server.stderr.text
    assert "IllegalTransition" not in stderr and "Task exception" not in stderr
    shutil.rmtree(inputs)
