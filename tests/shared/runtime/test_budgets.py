"""The run's resource limits as both processes agree on them: memory sizes
as the manifest writes them (the tool keys are in test_manifest.py and
test_runconfig.py), how a worker's death is read (its own limit, or a
crash), and the journal's end for a run its limit ended."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from staal.errors import SizeError
from staal.journal.reader import read_journal
from staal.journal.records import JOURNAL, Header, Intent, OutcomeRecord
from staal.journal.writer import close_unfinished
from staal.manifest.sizes import Size
from staal.runtime.budgets import (
    MEMORY_EXIT_CODE,
    cpu_message,
    memory_message,
    message_of,
    own_limit,
)
from staal.runtime.ids import new_run_id

SHA = "0" * 64


# -- sizes -------------------------------------------------------------------------


@pytest.mark.parametrize("text, mib", [("256MiB", 256), ("1GiB", 1024), ("32MiB", 32)])
def test_a_whole_number_and_mib_or_gib_is_a_size(text, mib):
    assert Size.parse(text, 32, 10**6) == Size(mib, text)


@pytest.mark.parametrize("text", ["512", "512MB", "1G", "1.5GiB", " 1GiB", "1gib", "", "-1MiB", 512, None])
def test_anything_else_is_refused_as_a_size_saying_what_is_expected(text):
    with pytest.raises(SizeError) as refused:
        Size.parse(text, 32, 10**6)
    assert 'a whole number followed by MiB or GiB, e.g. "512MiB"' in refused.value.message


# -- how a worker died -------------------------------------------------------------------------


def status_of(code: str) -> int:
    """The wait status of a real child process running `code`."""
    child = subprocess.Popen([sys.executable, "-c", code])
    _, status = os.waitpid(child.pid, 0)
    child.returncode = 0  # reaped here
    return status


def test_a_worker_ended_by_sigxcpu_failed_its_cpu_limit():
    assert own_limit(status_of("import os, signal; os.kill(os.getpid(), signal.SIGXCPU)")) == "cpu"


def test_a_worker_that_exited_with_the_memory_code_failed_its_memory_limit():
    assert own_limit(status_of(f"import os; os._exit({MEMORY_EXIT_CODE})")) == "memory"


@pytest.mark.parametrize("code", [
    "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
    "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)",
    "import os; os._exit(1)",
    "pass",
])
def test_a_kill_from_outside_a_crash_or_an_exit_is_no_limit(code):
    assert own_limit(status_of(code)) is None
    assert own_limit(None) is None


def test_a_sigkill_the_supervisor_sent_to_a_runaway_is_its_limit_and_no_other_end_is():
    killed = status_of("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert own_limit(killed, runaway=True) == "runaway"
    # Marked a runaway, but it died some other way before the kill landed:
    # that end is read as itself.
    assert own_limit(status_of("import os; os._exit(1)"), runaway=True) is None
    assert own_limit(status_of("import os, signal; os.kill(os.getpid(), signal.SIGXCPU)"),
                     runaway=True) == "cpu"
    assert own_limit(None, runaway=True) is None


def test_the_limits_messages_name_the_limit():
    assert cpu_message(2000) == "the run used more than 2 s of CPU time"
    assert memory_message(1024) == "the run needed more than 1GiB of memory, its limit"
    assert message_of("runaway", 60_000, 512, 15.0) == (
        "the run computed for more than 15 s inside code that never let the interpreter run "
        "(C code holding it), and was ended as a runaway computation")


# -- the journal's end -----------------------------------------------------------------------


def journal(tmp_path: Path, *records) -> Path:
    path = tmp_path / f"{new_run_id()}.journal"
    header = Header(run=path.stem, tool="t", program="/p.py", program_sha256=SHA,
                    config_sha256=SHA, inputs_sha256=SHA, runtime="staal 0.1.0", time=1)
    path.write_bytes(b"".join(json.dumps(JOURNAL.encode(r)).encode() + b"\n" for r in (header, *records)))
    return path


def get(op: int) -> Intent:
    return Intent(op=op, param="web", cap="net.http.get", action="get", args_sha256=SHA, time=2)


def test_a_run_its_limit_ended_is_closed_with_an_end_failed_as_budget_and_its_usage(tmp_path):
    path = journal(tmp_path, get(1), OutcomeRecord(op=1, ok=True, time=3, result={}))
    end = close_unfinished(path, ("web",), cpu_message(2000), kind="budget")
    assert (end.failure.kind, end.failure.message) == ("budget", "the run used more than 2 s of CPU time")
    assert end.usage["web"].actions == 1
    assert read_journal(path).end == end


def test_a_run_its_limit_ended_with_an_op_in_doubt_waits_for_an_operator(tmp_path):
    path = journal(tmp_path, get(1))
    stop = close_unfinished(path, ("web",), cpu_message(2000), kind="budget")
    assert stop.op == 1 and "may or may not have happened" in stop.message
    state = read_journal(path)
    assert state.end is None and state.stopped == stop

