"""An operator can debug a program: where an exception that ended a run
passed through the program (file, line, function, source line) is in the
journal's end, the run's log, the server's log, `staal run`'s standard
error and `staal journal show`; the client gets only the failure's kind and
message, and no secret's value is anywhere in it."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from staal.journal.reader import read_journal
from staal.records.outcomes import Frame, format_frames
from staal.worker.runs.tracebacks import MAX_FRAMES, program_frames
from tests.helpers.runs import Workspace
from tests.helpers.servers import RawServer, Site, stripe_refund_grant

SECRET = "sk_test_tracebacksecret42"

# Line 5 adds a string to a number; the string is the tool's secret (as an
# operator might paste a key into a program), which must never be shown.
PROGRAM = f'''\
from staal.caps import StripeRefund


def total(prices: list) -> int:
    return sum(prices) + "{SECRET}"


def main(prices: list[int], pay: StripeRefund) -> dict:
    return {{"total": total(prices)}}
'''
GRANTS = {"pay": stripe_refund_grant("http://127.0.0.1:9")}
ENV = {"STRIPE_SECRET_KEY": SECRET}


def raised_in(tmp_path: Path, source: str, call: str = "main()") -> BaseException:
    path = tmp_path / "prog.py"
    path.write_text(textwrap.dedent(source))
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    try:
        eval(call, namespace)
    except Exception as exc:  # noqa: BLE001 - the exception is what is under test
        return exc
    raise AssertionError("the program did not raise")


# -- the frames ---------------------------------------------------------------------------


def test_the_frames_are_the_programs_own_most_recent_last_with_their_source_lines(tmp_path):
    error = raised_in(tmp_path, """\
        import json

        def inner():
            return json.loads("{")

        def main():
            return inner()
        """)
    frames = program_frames(error, tmp_path)
    path = str((tmp_path / "prog.py").resolve())
    # json's own frames are left out: the program's call into it is its last frame.
    assert frames == (Frame(path, 7, "main", "return inner()"),
                      Frame(path, 4, "inner", 'return json.loads("{")'))


def test_frames_outside_the_programs_folder_are_left_out(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    error = raised_in(tmp_path, "def main():\n    raise ValueError('no')\n")
    assert program_frames(error, tmp_path / "elsewhere") == ()


def test_a_deep_recursion_keeps_only_the_innermost_frames(tmp_path):
    error = raised_in(tmp_path, "def main(n=0):\n    return main(n + 1)\n")
    assert isinstance(error, RecursionError)
    frames = program_frames(error, tmp_path)
    assert len(frames) == MAX_FRAMES and all(f.function == "main" for f in frames)


def test_a_secret_in_a_source_line_is_redacted(tmp_path):
    error = raised_in(tmp_path, f"def main():\n    raise ValueError({SECRET!r})\n")
    frames = program_frames(error, tmp_path, lambda text: text.replace(SECRET, "[redacted]"))
    assert frames[-1].source == "raise ValueError('[redacted]')"


def test_frames_are_printed_as_python_prints_a_traceback():
    frames = (Frame("/srv/p.py", 3, "main", "x = 1 / 0"),)
    assert format_frames(frames) == [
        "Traceback (the program's frames, most recent call last):",
        '  File "/srv/p.py", line 3, in main',
        "    x = 1 / 0"]
    assert format_frames(()) == []


# -- staal run and journal show -----------------------------------------------------------


def test_staal_run_prints_the_traceback_on_stderr_and_journal_show_shows_it(tmp_path):
    ws = Workspace(tmp_path)
    ws.program(PROGRAM)
    ws.config(grants=GRANTS, inputs={"prices": [1, 2]},
              net={"timeout_ms": 1000, "connect_timeout_ms": 1000})
    done = ws.run(env=ENV)
    assert done.code == 1
    failure = done.outcome["failure"]
    assert failure == {"kind": "value",
                       "message": "TypeError: unsupported operand type(s) for +: 'int' and 'str'"}
    path = str((tmp_path / "prog.py").resolve())
    expected = [f'  File "{path}", line 9, in main',
                '    return {"total": total(prices)}',
                f'  File "{path}", line 5, in total',
                '    return sum(prices) + "[redacted]"']
    assert all(line in done.stderr.splitlines() for line in expected), done.stderr
    (end,) = ws.records("end")
    assert [(f["line"], f["function"]) for f in end["failure"]["traceback"]] == [
        (9, "main"), (5, "total")]
    shown = ws.staal("journal", "show", "run.journal")
    assert shown.code == 0
    assert "END" in shown.stdout and "Traceback (the program's frames" in shown.stdout
    assert f'    File "{path}", line 5, in total' in shown.stdout.splitlines()
    for place in (done.stdout, done.stderr, shown.stdout, (tmp_path / "run.journal").read_text()):
        assert SECRET not in place


# -- the server ---------------------------------------------------------------------------


def test_the_server_logs_where_the_program_failed_and_the_client_gets_only_kind_and_message(
        tmp_path):
    site = Site(tmp_path)
    site.program("prog.py", PROGRAM)
    site.write([{"name": "total", "program": "prog.py", "grants": GRANTS}])
    with RawServer(site, ENV) as server:
        server.initialize()
        result = server.call_tool("total", {"prices": [1, 2]})
        server.close_stdin()
        assert server.wait_exit() == 0
        stderr = server.stderr.wait_closed()
    text = result["content"][0]["text"]
    assert result["isError"] is True
    assert "TypeError: unsupported operand type(s)" in text
    assert "prog.py" not in json.dumps(result) and "line" not in text
    (failed,) = server.stderr.events("program_failed")
    frames = failed["traceback"]
    assert [(f["function"], f["line"]) for f in frames] == [("main", 9), ("total", 5)]
    assert frames[-1]["source"] == 'return sum(prices) + "[redacted]"'
    run = failed["run"]
    folder = site.journals / "total" / run[:2]
    (ended,) = [json.loads(line) for line in (folder / f"{run}.log.jsonl").read_text().splitlines()
                if json.loads(line)["event"] == "ended"]
    assert ended["traceback"] == frames and ended["kind"] == "value"
    assert read_journal(folder / f"{run}.journal").end.failure.traceback[-1].line == 5
    for place in [stderr, json.dumps(server.messages())] + [
            p.read_text(errors="replace") for p in site.files_under_journals()]:
        assert SECRET not in place
