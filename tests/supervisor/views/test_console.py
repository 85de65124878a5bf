"""`staal-supervisor console`, tested as a person would use it: a real server
leaves a done, a failed, a waiting and an answered run in its journal
directory; the console serves it; headless Chromium opens the pages, and
the tests read the DOM it built and the screenshots it took (issue 17,
items 3 and 4)."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

from staal.manifest.check import load_manifest
from staal.supervisor.store.files import RunFiles
from staal.supervisor.store.ledger import read_ledger
from staal.supervisor.views.console import Console, ListenRefused, parse_listen
from tests.helpers.chromium import chromium, dump_dom, png_pixels, screenshot
from tests.helpers.dom import elements, having
from tests.helpers.recorder import Recorder
from tests.helpers.serving import start, tool, write_manifest

# Distinctive values that must never reach a page: an argument, and what a
# service answered (the program returns it as its result).
ARGUMENT = "order-ARGVALUE-5521"
SERVICE_SECRET = "tok-SERVICESECRET-8830"
PRINTED = "<script>document.title='pwned'</script> refunding now"
READY_S = 30

REFUND = """
from staal.caps import HttpPost

def main(order: str, post: HttpPost) -> dict:
    first = post.post(BASE + "/v1/refunds", json={"order": order})
    print(PRINTED)
    second = post.post(BASE + "/v1/refunds", json={"order": order, "again": True})
    return {"order": order, "token": first.json()["token"], "second": second.status_code}
"""
BROKEN = "def main(order: str) -> int:\n    raise ValueError('the shop is closed')\n"
TICKET = """
from staal.caps import HttpPost

def main(order: str, post: HttpPost) -> dict:
    return {"status": post.post(BASE + "/v1/tickets", json={"order": order}).status_code}
"""


@dataclass
class Runs:
    manifest: Path
    journals: Path
    done: str
    failed: str
    waiting: str
    answered: str
    before: dict[str, bytes]
    url: str
    browser: Path
    doms: dict[str, str]

    def dom(self, path: str = "") -> str:
        """The DOM Chromium built for the console's `path`, loaded once per
        module: the pages do not change while the tests read them."""
        if path not in self.doms:
            self.doms[path] = dump_dom(self.browser, self.url + path)
        return self.doms[path]


def _files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*"))
            if p.is_file()}


def _make_runs(tmp: Path, service: Recorder) -> tuple[Path, dict[str, str]]:
    base = f"BASE = {service.base!r}\nPRINTED = {PRINTED!r}\n"
    (tmp / "refund.py").write_text(base + REFUND)
    (tmp / "broken.py").write_text(BROKEN)
    (tmp / "ticket.py").write_text(base + TICKET)
    service.route("POST", "/v1/refunds", 200, {"token": SERVICE_SECRET})
    service.hold("/v1/tickets")
    refunds = {"post": {"cap": "net.http.post", "only": [service.base + "/v1/refunds"]}}
    tickets = {"post": {"cap": "net.http.post", "only": [service.base + "/v1/tickets"]}}
    ticket = tool("ticket", "ticket.py", tickets)
    ticket["net"] = {"timeout_ms": 300, "connect_timeout_ms": 1000}
    manifest = write_manifest(tmp, [
        tool("refund", "refund.py", refunds, quota={"window": "1h", "calls": 5}),
        tool("broken", "broken.py"), ticket])
    with start(manifest) as served:
        for tool_name in ("refund", "broken", "ticket", "ticket"):
            served.call(tool_name, {"order": ARGUMENT})
        assert served.close() == 0
    # Done and failed answers carry no run id: the ledger has them, in the order called.
    ids = [entry.run for entry in read_ledger(tmp / "journals" / "server.ledger").runs()]
    runs = dict(zip(("done", "failed", "answered", "waiting"), ids, strict=True))
    journal = RunFiles(tmp / "journals", "ticket", runs["answered"]).journal
    resolved = subprocess.run(
        [sys.executable, "-m", "staal.worker.commands.cli", "resolve", "--journal", str(journal), "--op", "1",
         "--happened", "yes", "--result", json.dumps({"status": 201, "text": "{}"})],
        capture_output=True, text=True, timeout=60, check=False)
    assert resolved.returncode == 0, resolved.stderr
    with start(manifest) as served:  # resumes the answered run to its end; the other stops again
        status = served.call("staal_run_status", {"run": runs["answered"]})
        assert status["structuredContent"]["status"] == "done"
        assert served.close() == 0
    return manifest, runs


def _start_console(manifest: Path) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "staal.supervisor.app.main", "console", str(manifest), "--listen",
         "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The console prints its address once its socket accepts connections.
    ready, _, _ = select.select([process.stdout], [], [], READY_S)
    if not ready:
        process.kill()
        pytest.fail(f"the console said nothing in {READY_S} s: {process.communicate()[1]}")
    line = process.stdout.readline()
    assert line.startswith("console: http://127.0.0.1:"), line + process.stderr.read()
    return process, line.split()[1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Iterator[Runs]:
    browser = chromium()
    tmp = tmp_path_factory.mktemp("console")
    service = Recorder().start()
    try:
        manifest, ids = _make_runs(tmp, service)
    finally:
        service.stop()
    journals = tmp / "journals"
    before = _files(journals)
    process, url = _start_console(manifest)
    try:
        yield Runs(manifest, journals, ids["done"], ids["failed"], ids["waiting"], ids["answered"],
                   before, url, browser, {})
    finally:
        process.terminate()
        process.wait(timeout=READY_S)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=READY_S) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_the_overview_lists_the_done_failed_and_waiting_runs_and_the_exact_resolve_command(runs):
    page = runs.dom()
    states = {row.attrs["data-run"]: row.attrs["data-state"] for row in having(page, "data-run", "tr")}
    assert states == {runs.done: "done", runs.failed: "failed", runs.answered: "done",
                      runs.waiting: "waiting_for_operator"}
    (waiting,) = having(page, "data-waiting-run")
    assert waiting.attrs["data-waiting-run"] == runs.waiting
    journal = RunFiles(runs.journals, "ticket", runs.waiting).journal
    (command,) = having(page, "data-resolve")
    assert command.text == (f"staal resolve --journal {journal} --op 1 --happened yes --result JSON"
                            "   (or: --happened no)")
    (doubt,) = having(page, "data-in-doubt")
    assert doubt.text.startswith("op 1 (net.http.post post through 'post') may or may not have happened")


def test_a_runs_timeline_shows_its_ops_in_order_with_their_outcomes_the_prints_and_the_end(runs):
    page = runs.dom(f"runs/{runs.done}")
    rows = having(page, "data-event", "tr")
    assert [(r.attrs["data-kind"], r.attrs.get("data-op"), r.attrs.get("data-ok")) for r in rows] == [
        ("op", "1", "yes"), ("print", None, None), ("op", "2", "yes"), ("end", None, "yes")]
    assert rows[1].text.endswith(PRINTED)  # the printed <script> is text
    bars = having(page, "data-event", "g")
    assert [b.attrs["data-kind"] for b in bars] == ["op", "print", "op", "end"]


def test_an_answered_runs_timeline_shows_the_stop_the_operators_answer_and_the_end(runs):
    page = runs.dom(f"runs/{runs.answered}")
    rows = having(page, "data-event", "tr")
    assert [r.attrs["data-kind"] for r in rows] == ["op", "stop", "answer", "end"]
    assert rows[0].attrs["data-ok"] == "yes" and "answered: it happened" in rows[0].text
    assert "may or may not have happened" in rows[1].text
    assert "it happened" in rows[2].text and rows[3].attrs["data-ok"] == "yes"


def test_a_failed_runs_page_shows_where_the_program_failed(runs):
    status, page = _get(f"{runs.url}runs/{runs.failed}")
    assert status == 200
    (end,) = [r for r in having(page, "data-event", "tr") if r.attrs["data-kind"] == "end"]
    assert end.attrs["data-ok"] == "no" and "the shop is closed" in end.text
    (frames,) = having(page, "data-traceback")
    assert "raise ValueError('the shop is closed')" in frames.text


def test_a_waiting_runs_page_shows_the_op_in_doubt_and_its_resolve_command(runs):
    status, page = _get(f"{runs.url}runs/{runs.waiting}")
    assert status == 200
    rows = having(page, "data-event", "tr")
    # Stopped when called, and again when the next start resumed it.
    assert [r.attrs["data-kind"] for r in rows] == ["op", "stop", "stop"]
    assert rows[0].text.startswith("in doubt") and "no outcome yet" in rows[0].text
    (command,) = having(page, "data-resolve")
    assert command.text.startswith("staal resolve --journal ")


def test_the_quota_chart_shows_the_calls_the_ledger_counts_in_the_window(runs):
    page = runs.dom()
    (figure,) = having(page, "data-quota")
    state = read_ledger(runs.journals / "server.ledger")
    quota = load_manifest(runs.manifest).tool("refund").quota
    use = state.quota_use("refund", quota, state.last_ms)
    assert (figure.attrs["data-quota"], int(figure.attrs["data-calls"])) == ("refund", use.calls)
    buckets = [int(b.attrs["data-calls"]) for b in having(page, "data-bucket", "rect")]
    assert len(buckets) == 12 and sum(buckets) == use.calls == 1
    (limit,) = having(page, "data-limit", "line")
    assert limit.attrs["data-limit"] == "5"


def test_search_narrows_the_runs_and_a_bad_search_is_refused_with_its_reason(runs):
    status, page = _get(f"{runs.url}?q=TICK")
    assert status == 200
    assert {r.attrs["data-run"] for r in having(page, "data-run", "tr")} == {runs.waiting, runs.answered}
    _, page = _get(f"{runs.url}?q={quote('waiting_for')}")
    assert [r.attrs["data-run"] for r in having(page, "data-run", "tr")] == [runs.waiting]
    status, page = _get(f"{runs.url}?q={'x' * 201}")
    assert status == 400 and "at most 200 characters" in having(page, "data-error")[0].text


def test_an_unknown_run_or_page_is_a_404_and_a_post_is_refused(runs):
    status, page = _get(f"{runs.url}runs/r-no-such-run")
    assert status == 404
    assert having(page, "data-error")[0].text.startswith("no run 'r-no-such-run' in the ledger")
    assert _get(f"{runs.url}nowhere")[0] == 404
    request = urllib.request.Request(runs.url, data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=READY_S)
    assert refused.value.code == 405


def test_no_page_shows_an_argument_value_or_a_result_and_printed_html_is_only_text(runs):
    urls = [runs.url] + [f"{runs.url}runs/{run}" for run in
                         (runs.done, runs.failed, runs.waiting, runs.answered)]
    for url in urls:
        # What the browser built and what the server sent: neither may hold them.
        for page in (runs.dom(url.removeprefix(runs.url)), _get(url)[1]):
            assert ARGUMENT not in page and SERVICE_SECRET not in page, url
            assert not [e for e in elements(page) if e.tag == "script"], url
            title = next(e for e in elements(page) if e.tag == "title")  # the document's
            assert "pwned" not in title.text, url


def test_screenshots_are_pngs_of_the_window_size_with_something_drawn(runs, tmp_path):
    for name, url in (("overview", runs.url), ("run", f"{runs.url}runs/{runs.answered}")):
        shot = screenshot(runs.browser, url, tmp_path / f"{name}.png", (900, 860))
        width, height, colours = png_pixels(shot, enough=6)
        assert (width, height) == (900, 860)
        assert len(colours) > 5, f"the {name} screenshot is blank: {colours}"
        if name == "overview" and os.environ.get("STAAL_UPDATE_SCREENSHOT"):
            shutil.copy(shot, Path(__file__).resolve().parents[3] / "docs" / "console.png")


def test_browsing_every_page_changes_no_file_in_the_journal_directory(runs):
    for run in (runs.done, runs.failed, runs.waiting, runs.answered):
        assert _get(f"{runs.url}runs/{run}")[0] == 200
    assert _get(f"{runs.url}?q=done")[0] == 200
    assert _files(runs.journals) == runs.before


def test_a_listen_address_that_is_not_loopback_is_refused_unless_allowed(tmp_path):
    (tmp_path / "noop.py").write_text("def main(n: int) -> int:\n    return n\n")
    manifest = write_manifest(tmp_path, [tool("noop", "noop.py")])
    done = subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "console", str(manifest),
                           "--listen", "0.0.0.0:8090"], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 2 and "not a loopback address" in done.stderr
    assert "--allow-remote" in done.stderr
    assert parse_listen("0.0.0.0:8090", allow_remote=True) == ("0.0.0.0", 8090)
    assert parse_listen("[::1]:8090", allow_remote=False) == ("::1", 8090)
    with pytest.raises(ListenRefused, match="expected HOST:PORT"):
        parse_listen("8090", allow_remote=False)


def test_beside_a_running_server_the_console_takes_no_lock_and_shows_the_server_running(tmp_path):
    (tmp_path / "noop.py").write_text("def main(n: int) -> int:\n    return n\n")
    manifest = write_manifest(tmp_path, [tool("noop", "noop.py", quota={"window": "10m", "calls": 9})])
    with start(manifest) as served:
        assert served.call("noop", {"n": 1})["isError"] is False
        lock = (tmp_path / "journals" / "server.lock").read_bytes()
        process, url = _start_console(manifest)
        try:
            status, page = _get(url)
            assert status == 200
            assert f"server running, pid {served.process.pid}" in page
            (figure,) = having(page, "data-quota")
            assert figure.attrs["data-calls"] == "1"
            assert served.call("noop", {"n": 2})["isError"] is False  # the server goes on serving
            assert having(_get(url)[1], "data-quota")[0].attrs["data-calls"] == "2"  # read afresh
        finally:
            process.terminate()
            process.wait(timeout=READY_S)
        assert (tmp_path / "journals" / "server.lock").read_bytes() == lock
        assert served.close() == 0


def test_a_damaged_ledger_is_a_page_that_names_the_line_and_a_run_page_says_so_too(tmp_path):
    (tmp_path / "noop.py").write_text("def main(n: int) -> int:\n    return n\n")
    manifest = load_manifest(write_manifest(tmp_path, [tool("noop", "noop.py")]))
    (tmp_path / "journals").mkdir()
    (tmp_path / "journals" / "server.ledger").write_text('{"not": "an event"}\n{}\n')
    console = Console(manifest)
    for path in ("/", "/runs/0123456789abcdef0123456789abcdef"):
        status, page = console.route(path, "")
        assert status == 500
        (error,) = having(page, "data-error")
        assert error.text.startswith("cannot read the journal directory: ")
        assert "server.ledger line 1" in error.text
