"""staal.worker.runs.program in this process: a program is read once (the
hash the journal records is of the bytes that were compiled), and a run can
take its entry from a fresh module of the program, whose module body runs
again while the modules it imports stay loaded (issue 26, item 1).

Runs go through staal.worker.runs.run.start with the program prepared as the
zygote prepares it (`load`, no secrets); the confinement tripwire is never
installed here.
"""

from __future__ import annotations

import hashlib
import sys
import textwrap
import traceback
from pathlib import Path

import pytest

from staal.journal.reader import read_journal
from staal.journal.records import Print
from staal.records.runconfig import Limits, RunConfig
from staal.worker.runs.actions import RunOutcome
from staal.worker.runs.program import fresh_entry, inspect_program, module_name
from staal.worker.runs.run import Prepared, RunRequest, load, start

COUNTER = """
count = 0


def main() -> int:
    global count
    count += 1
    return count
"""


@pytest.fixture(autouse=True)
def own_modules_and_path(monkeypatch):
    """Each test's programs and their siblings leave sys.modules and
    sys.path as they were."""
    monkeypatch.delenv("STAAL_TEST_KILL_POINTS", raising=False)
    monkeypatch.delenv("STAAL_KILL_AT", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


def program(folder: Path, source: str, name: str = "prog.py") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(source))
    return path


def prepared(path: Path, limits: Limits = Limits()) -> tuple[RunConfig, Prepared]:
    config = RunConfig(tool="t", program=path, entry="main", limits=limits)
    loaded = load(config, {})
    assert isinstance(loaded, Prepared), loaded
    return config, loaded


def runs(folder: Path, path: Path, count: int, fresh: bool,
         limits: Limits = Limits()) -> list[RunOutcome]:
    config, loaded = prepared(path, limits)
    return [start(RunRequest(config=config, arguments={}, journal=folder / f"run{n}.journal",
                             prepared=loaded, fresh=fresh))
            for n in range(count)]


def test_each_run_from_a_fresh_entry_sees_a_module_counter_start_from_its_module_body(tmp_path):
    outcomes = runs(tmp_path, program(tmp_path, COUNTER), 5, fresh=True)

    assert [(o.outcome, o.result) for o in outcomes] == [("done", 1)] * 5


def test_runs_without_a_fresh_entry_share_the_program_module_and_its_counter(tmp_path):
    outcomes = runs(tmp_path, program(tmp_path, COUNTER), 3, fresh=False)

    assert [(o.outcome, o.result) for o in outcomes] == [("done", 1), ("done", 2), ("done", 3)]


def test_a_sibling_module_stays_loaded_while_the_program_module_body_runs_again(tmp_path):
    program(tmp_path, "bodies = 0\n", "sibling_of_fresh.py")
    path = program(tmp_path, """
        import sibling_of_fresh

        sibling_of_fresh.bodies += 1


        def main() -> int:
            return sibling_of_fresh.bodies
    """)
    config, loaded = prepared(path)
    sibling, first = sys.modules["sibling_of_fresh"], sys.modules[module_name(path.resolve())]

    outcomes = [start(RunRequest(config=config, arguments={}, journal=tmp_path / f"run{n}.journal",
                                 prepared=loaded, fresh=True))
                for n in range(3)]

    # The load ran the program's body once; each fresh run once more, each
    # time counting in the same sibling module, never executed again.
    assert [o.result for o in outcomes] == [2, 3, 4]
    assert sys.modules["sibling_of_fresh"] is sibling
    assert sys.modules[module_name(path.resolve())] is not first


def test_the_journal_records_the_hash_of_the_bytes_compiled_even_if_the_file_changes_after(tmp_path):
    path = program(tmp_path, "def main() -> str:\n    return 'first'\n")
    compiled = hashlib.sha256(path.read_bytes()).hexdigest()
    config, loaded = prepared(path)
    path.write_text("def main() -> str:\n    return 'second'\n")

    outcome = start(RunRequest(config=config, arguments={}, journal=tmp_path / "run.journal",
                               prepared=loaded, fresh=True))

    assert (outcome.outcome, outcome.result) == ("done", "first")
    assert loaded.program_sha256 == compiled
    assert read_journal(tmp_path / "run.journal").header.program_sha256 == compiled


def test_a_fresh_module_body_prints_nothing_into_the_journal_and_its_lines_are_not_counted(tmp_path):
    path = program(tmp_path, """
        for _ in range(500):
            pass
        print("from the module body")


        def main() -> int:
            print("from main")
            return 1
    """)

    outcome, = runs(tmp_path, path, 1, fresh=True, limits=Limits(max_steps=100))

    assert (outcome.outcome, outcome.result) == ("done", 1)
    history = read_journal(tmp_path / "run0.journal").history
    printed = [r.text for r in history if isinstance(r, Print)]
    assert printed == ["from main"]


def test_a_module_body_that_raises_in_a_fresh_run_fails_the_run_as_value_at_its_line(tmp_path):
    program(tmp_path, "bodies = 0\n", "sibling_of_failing.py")
    path = program(tmp_path, """
        import sibling_of_failing

        sibling_of_failing.bodies += 1
        if sibling_of_failing.bodies > 1:
            raise ValueError("the body fails from its second time on")


        def main() -> int:
            return 1
    """)

    outcome, = runs(tmp_path, path, 1, fresh=True)

    assert outcome.outcome == "failed" and outcome.failure is not None
    assert outcome.failure.kind == "value"
    assert "the body fails from its second time on" in outcome.failure.message
    assert [(f.file, f.line, f.function) for f in outcome.failure.traceback] == [
        (str(path.resolve()), 6, "<module>")]


def test_fresh_entry_raises_what_the_module_body_raised_and_keeps_the_module_it_had(tmp_path):
    program(tmp_path, "bodies = 0\n", "sibling_of_raising.py")
    path = program(tmp_path, """
        import sibling_of_raising

        sibling_of_raising.bodies += 1
        if sibling_of_raising.bodies > 1:
            raise LookupError("not this time")


        def main() -> int:
            return 1
    """)
    info = inspect_program(path, "main")
    name = module_name(path.resolve())
    module = sys.modules[name]

    with pytest.raises(LookupError, match="not this time") as raised:
        fresh_entry(info)

    files = [frame.filename for frame in traceback.extract_tb(raised.value.__traceback__)]
    assert str(path.resolve()) in files
    assert sys.modules[name] is module
