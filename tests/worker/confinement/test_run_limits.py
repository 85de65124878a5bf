"""A run's resource limits are outcomes, not crashes, against the real server
(DESIGN.md section 4, "Limits"; seed 000 section 3, "How long a call can
take"; issue 11 items 4 to 6).

- Memory is bounded: a tool's `max_memory` (default 512MiB) is what a run may
  allocate beyond its worker's own; past it the run fails as `budget`,
  whether Python raised MemoryError or C code crashed at the limit.
- A worker ended by its own CPU or memory limit has failed for good: the run
  fails as `budget` at once, its journal says so, and it is not resumed.
- C code that loops holding the interpreter silences its worker's
  heartbeats while it burns CPU: a runaway, killed once and failed as
  `budget`, not resumed (issue 24 item 6); a worker silent and idle
  (stopped) is still a crash, and its run is resumed.
- No wait without end: a program waiting outside any capability (a sleep
  loop, an event nobody sets) fails as `deadline` at its deadline, or at its
  `max_wait` without one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from staal.supervisor.store.files import RunFiles
from staal.supervisor.workers.silence import SILENT_S
from tests.helpers.servers import WAIT, RawServer, Site

FFI = {"libc": {"cap": "ffi.c", "library": "libc.so.6"}}

GROW = """
def main() -> int:
    hoard = []
    while True:
        hoard.append(bytearray(1 << 20))
"""

C_GROW = """
import ctypes
from staal.caps import Ffi

def main(libc: Ffi) -> int:
    libc.malloc.restype = ctypes.c_void_p
    while True:
        block = libc.malloc(1 << 20)  # NULL at the limit, and memset crashes on it
        libc.memset(ctypes.c_void_p(block), 1, 1 << 20)
"""

SPIN = """
from staal.caps import Ffi

def main(spin: Ffi) -> int:
    spin.spin()  # an endless loop inside C: no line to count, no signal handler runs
    return 0
"""

C_LOOP = """
import collections
import itertools

def main() -> int:
    collections.deque(itertools.count(), maxlen=0)  # loops inside C, holding the interpreter
    return 0
"""

# Idle until its worker is stopped; resumed (its clock read replayed, so at
# least the watchdog's bound later), it returns at once.
STOPPABLE = """
import threading
import time
from staal.caps import Clock

def main(clock: Clock) -> str:
    began = clock.now() / 1000
    if time.time() - began > 10:
        return "resumed"
    print("waiting to be stopped")
    threading.Event().wait()  # nobody sets it: idle, neither computing nor heartbeating once stopped
    return "woke"
"""

# A run silenced by its worker's stop or loop is killed SILENT_S after its
# last heartbeat: its answer may take that long, and a resume as long again.
SILENCE_WAIT = WAIT + 2 * SILENT_S

SMALL = """
def main(n: int) -> int:
    return n + 1
"""


def failure_text(answer: dict[str, Any]) -> str:
    assert answer["isError"] is True, answer
    return answer["content"][0]["text"]


def fail_once(site: Site, tool: str, timeout: float = WAIT,
              then_small: bool = False) -> tuple[str, str, RawServer]:
    """Serve `site`, call `tool` once (it must fail within `timeout`), then,
    if asked, its tool `small`, and let the server exit: the failure's text,
    the run, and the server (its stderr)."""
    with RawServer(site) as server:
        server.initialize()
        text = failure_text(server.call_tool(tool, {}, timeout=timeout))
        run = server.stderr.wait_event("run_started", tool=tool)["run"]
        if then_small:
            # Nothing else is affected: the next call runs as ever.
            assert server.call_tool("small", {"n": 1})["structuredContent"] == {"result": 2}
        server.close_stdin()
        assert server.wait_exit() == 0
    return text, run, server


def not_resumed(server: RawServer, run: str) -> dict[str, Any]:
    """The run had one worker, ended by its own limit (the event), none lost."""
    assert len(server.stderr.events("run_started", run=run)) == 1
    assert server.stderr.events("worker_lost") == []
    (over,) = server.stderr.events("worker_over_limit", run=run)
    return over


def end_of(site: Site, tool: str, run: str) -> dict[str, Any]:
    (end,) = [r for r in site.journal_records(tool, run) if r["type"] == "end"]
    return end


def settled(site: Site, run: str) -> list[dict[str, Any]]:
    return [e for e in site.ledger_events() if e["event"] == "settle" and e["run"] == run]


@pytest.fixture
def spin_library(tmp_path: Path) -> Path:
    """A C library whose `spin()` loops for ever, built with the compiler
    staal's own extensions are built with."""
    source = tmp_path / "spin.c"
    source.write_text("void spin(void) { for (volatile unsigned long i = 0;; i++) {} }\n")
    library = tmp_path / "libspin.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O0", "-o", str(library), str(source)], check=True)
    return library


# -- memory -----------------------------------------------------------------------


def test_a_program_that_allocates_without_end_fails_as_budget_naming_its_memory_limit(tmp_path):
    site = Site(tmp_path)
    site.program("grow.py", GROW)
    site.program("small.py", SMALL)
    site.write([{"name": "grow", "program": "grow.py", "max_memory": "64MiB"},
                {"name": "small", "program": "small.py"}])
    text, run, server = fail_once(site, "grow", then_small=True)
    assert text == "budget: the run needed more than 64MiB of memory, its limit"
    assert end_of(site, "grow", run)["failure"]["kind"] == "budget"
    assert len(server.stderr.events("run_started", run=run)) == 1
    assert server.stderr.events("worker_lost") == []


def test_c_code_that_crashes_at_its_memory_limit_fails_the_run_as_budget_and_is_not_resumed(tmp_path):
    site = Site(tmp_path)
    site.program("cgrow.py", C_GROW)
    site.write([{"name": "cgrow", "program": "cgrow.py", "grants": FFI, "max_memory": "64MiB"}])
    text, run, server = fail_once(site, "cgrow")
    over = not_resumed(server, run)
    assert text == "budget: the run needed more than 64MiB of memory, its limit"
    assert (over["limit"], over["how"]) == ("memory", "exited with code 86")
    end = end_of(site, "cgrow", run)
    assert (end["failure"]["kind"], end["failure"]["message"]) == ("budget", text.removeprefix("budget: "))
    assert [e["outcome"] for e in settled(site, run)] == ["failed"]


# -- CPU ---------------------------------------------------------------------------


def test_an_endless_loop_inside_c_code_fails_as_budget_at_its_cpu_limit_and_is_not_resumed(
        tmp_path, spin_library):
    site = Site(tmp_path)
    site.program("spin.py", SPIN)
    site.write([{"name": "spin", "program": "spin.py", "max_cpu": "2s",
                 "grants": {"spin": {"cap": "ffi.c", "library": str(spin_library)}}}])
    text, run, server = fail_once(site, "spin")
    over = not_resumed(server, run)
    assert text == "budget: the run used more than 2 s of CPU time"
    assert (over["limit"], over["how"]) == ("cpu", "was killed by SIGXCPU")
    assert end_of(site, "spin", run)["failure"]["kind"] == "budget"
    assert [e["outcome"] for e in settled(site, run)] == ["failed"]


def started_lines(site: Site, tool: str, run: str) -> list[dict[str, Any]]:
    """The run's log lines saying a worker started it (one per attempt)."""
    lines = RunFiles(site.journals, tool, run).log.read_text().splitlines()
    return [line for line in map(json.loads, lines) if line["event"] == "started"]


def test_c_code_looping_while_holding_the_interpreter_ends_as_budget_at_the_first_kill_never_resumed(
        tmp_path):
    site = Site(tmp_path)
    site.program("loop.py", C_LOOP)
    site.program("small.py", SMALL)
    site.write([{"name": "loop", "program": "loop.py", "deadline": "3s"},
                {"name": "small", "program": "small.py"}])
    text, run, server = fail_once(site, "loop", timeout=SILENCE_WAIT, then_small=True)
    assert text == (f"budget: the run computed for more than {SILENT_S:g} s inside code that never "
                    "let the interpreter run (C code holding it), and was ended as a runaway "
                    "computation")
    # Killed once, by the watchdog, as a runaway; failed at that kill, never resumed.
    (stuck,) = server.stderr.events("worker_stuck", run=run)
    assert (stuck["silence"], stuck["runaway"], stuck["state"]) == ("runaway", True, "running")
    over = not_resumed(server, run)
    assert (over["limit"], over["how"], over["pid"]) == ("runaway", "was killed by SIGKILL",
                                                        stuck["pid"])
    assert [line["pid"] for line in started_lines(site, "loop", run)] == [stuck["pid"]]
    end = end_of(site, "loop", run)
    assert (end["failure"]["kind"], end["failure"]["message"]) == ("budget", text.removeprefix("budget: "))
    assert [e["outcome"] for e in settled(site, run)] == ["failed"]


def test_a_worker_stopped_mid_run_is_silent_and_idle_a_crash_and_its_run_is_resumed(tmp_path):
    site = Site(tmp_path)
    site.program("stoppable.py", STOPPABLE)
    site.write([{"name": "stoppable", "program": "stoppable.py",
                 "grants": {"clock": {"cap": "clock.now"}}}])
    with RawServer(site) as server:
        server.initialize()
        call = server.request("tools/call", {"name": "stoppable", "arguments": {}})
        first = server.stderr.wait_event("run_started", tool="stoppable")
        server.stderr.wait_event("print", run=first["run"], text="waiting to be stopped")
        os.kill(first["pid"], signal.SIGSTOP)
        answer = server.answer(call, timeout=SILENCE_WAIT)["result"]
        server.close_stdin()
        assert server.wait_exit() == 0
    assert answer["structuredContent"] == {"result": "resumed"}, answer
    run = first["run"]
    (stuck,) = server.stderr.events("worker_stuck", run=run)
    assert (stuck["pid"], stuck["silence"], stuck["runaway"]) == (first["pid"], "idle", False)
    (lost,) = server.stderr.events("worker_lost", run=run)
    assert lost["pid"] == first["pid"] and server.stderr.events("worker_over_limit") == []
    attempts = server.stderr.events("run_started", run=run)
    assert [a.get("resume") for a in attempts] == [None, True]
    assert [e["outcome"] for e in settled(site, run)] == ["done"]


# -- waiting outside any capability -----------------------------------------------------


def test_a_sleep_loop_fails_as_deadline_at_the_tools_deadline(tmp_path):
    site = Site(tmp_path)
    site.program("nap.py", """
        import time

        def main() -> str:
            while True:
                time.sleep(0.5)
        """)
    site.write([{"name": "nap", "program": "nap.py", "deadline": "2s"}])
    text, run, _ = fail_once(site, "nap")
    assert text == ("deadline: the run's deadline (2000 ms from its start) passed while it was "
                    "outside any action, waiting or computing")
    assert end_of(site, "nap", run)["failure"]["kind"] == "deadline"


def test_a_wait_on_an_event_nobody_sets_fails_as_deadline_at_max_wait_without_a_deadline(tmp_path):
    site = Site(tmp_path)
    site.program("idle.py", """
        import threading

        def main() -> str:
            try:
                threading.Event().wait()  # nobody sets it
            except BaseException:
                pass  # caught: the run fails as deadline all the same
            return "woke"
        """)
    site.write([{"name": "idle", "program": "idle.py", "max_wait": "2s"}])
    text, run, _ = fail_once(site, "idle")
    assert text == ("deadline: the run spent more than 2 s outside its actions, waiting or computing "
                    "(max_wait)")
    assert end_of(site, "idle", run)["failure"]["kind"] == "deadline"
