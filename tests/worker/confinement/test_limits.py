"""staal.worker.confinement.limits: max_steps counted in the program's own lines, and the
CPU-time backstop (DESIGN.md section 4, "Limits").

Every StepCounter scenario runs against both implementations, the C trace
function (`staal.worker._steps`) and the Python one it falls back to; the C
one must be there (a broken build must not fall back silently).

Trace functions, signal handlers and rlimits belong to a whole process, so
each scenario runs in a fresh Python process that prints one JSON line. The
"program" is a module written into a temporary folder and imported from
there, as the worker imports an operator's program.
"""

from __future__ import annotations

import importlib
import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

BOUND = 120.0  # seconds a scenario's process may take before the test fails

PROGRAM = """\
import heapq
import sys
import threading


def straight(a):
    b = a + 1
    c = b * 2
    d = [b, c]
    e = {"d": d}
    return e


def loop(n):
    total = 0
    for i in range(n):
        total += i
    return total


def spin():
    n = 0
    while True:
        n += 1


def key(x):
    return -x


def sort_both_ways(data):
    by_sorted = sorted(data, key=key)
    by_heapq = heapq.nsmallest(1, data, key=key)
    return by_sorted, by_heapq


def in_a_thread(n):
    worker = threading.Thread(target=loop, args=(n,))
    worker.start()
    worker.join()
    return n


def wait_then_loop(ready, go, done, n):
    ready.set() or go.wait(120)
    loop(n)
    done.set()


def settrace_again_then_spin():
    sys.settrace(sys.gettrace())
    spin()
"""

# Line events per call, as CPython 3.11 reports them: every line once, and a
# `for` line once more each time the loop jumps back to it.
STRAIGHT_LINES = 5
IN_A_THREAD_LINES = 4


def loop_lines(n: int) -> int:
    # `total = 0`, the `for` line n + 1 times, the body n times, `return`
    return 1 + (n + 1) + n + 1


PRELUDE = """
import json, os, sys
from pathlib import Path
from staal.program import RunFailed
from staal.worker.confinement.limits import cpu_backstop
from staal.worker.confinement.steps import StepCounter

ROOT = Path(sys.argv[1])
IMPL = sys.argv[2] or None
sys.path.insert(0, str(ROOT / "program"))
import program

def report(**values):
    print(json.dumps(values), flush=True)
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "program"
    folder.mkdir()
    (folder / "program.py").write_text(PROGRAM)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "library.py").write_text(
        "def library_loop(n):\n    total = 0\n    for i in range(n):\n        total += i\n"
        "    return total\n"
    )
    return tmp_path


@pytest.fixture(params=["c", "python"])
def impl(request) -> str:
    """The StepCounter implementation a scenario runs against."""
    return request.param


def run(body: str, root: Path, *, impl: str | None = None,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-B", "-c", PRELUDE + textwrap.dedent(body), str(root), impl or ""],
        check=False,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=BOUND,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def result_of(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    lines = proc.stdout.strip().splitlines()
    assert lines, proc.stderr
    return json.loads(lines[-1])


# ---------------------------------------------------------------- StepCounter


def test_a_loop_in_program_code_fails_as_budget_just_past_max_steps(root, impl):
    result = result_of(
        run(
            """
            counter = StepCounter(1000, ROOT / "program", implementation=IMPL)
            counter.start()
            try:
                program.spin()
                outcome = None
            except RunFailed as failed:
                outcome = [failed.kind, failed.message]
            counter.stop()
            report(outcome=outcome, steps=counter.steps, exceeded=counter.exceeded)
            """,
            root,
            impl=impl,
        )
    )
    assert result["outcome"] == ["budget", "the run exceeded max_steps (1000 line events)"]
    assert result["steps"] == 1001
    assert result["exceeded"] is True


@pytest.mark.parametrize("n", [0, 1, 7, 250])
def test_the_count_is_exact_for_straight_line_code_and_for_loops(root, impl, n):
    result = result_of(
        run(
            f"""
            counter = StepCounter(10_000, ROOT / "program", implementation=IMPL)
            counter.start()
            program.straight(1)
            after_straight = counter.steps
            program.loop({n})
            counter.stop()
            report(straight=after_straight, total=counter.steps, exceeded=counter.exceeded)
            """,
            root,
            impl=impl,
        )
    )
    assert result["straight"] == STRAIGHT_LINES
    assert result["total"] == STRAIGHT_LINES + loop_lines(n)
    assert result["exceeded"] is False


def test_exactly_max_steps_lines_run_without_failing(root, impl):
    limit = STRAIGHT_LINES + loop_lines(10)
    result = result_of(
        run(
            f"""
            counter = StepCounter({limit}, ROOT / "program", implementation=IMPL)
            counter.start()
            program.straight(1)
            program.loop(10)
            counter.stop()
            report(steps=counter.steps, exceeded=counter.exceeded)
            """,
            root,
            impl=impl,
        )
    )
    assert result == {"steps": limit, "exceeded": False}


def test_code_outside_the_program_root_is_not_counted(root, impl):
    data = list(range(40))
    result = result_of(
        run(
            f"""
            sys.path.insert(0, str(ROOT / "elsewhere"))
            import json, library
            counter = StepCounter(100_000, ROOT / "program", implementation=IMPL)
            counter.start()
            program.sort_both_ways({data!r})   # sorted() is C, heapq.nsmallest is Python
            json.dumps({{"a": [1, 2, 3]}}, indent=2)  # the stdlib's own lines
            library.library_loop(100)                 # a module outside the root
            counter.stop()
            report(steps=counter.steps)
            """,
            root,
            impl=impl,
        )
    )
    # the three lines of sort_both_ways, and `key` once per element for each
    assert result["steps"] == 3 + 2 * len(data)


def test_a_counter_counts_alike_from_decisions_taken_ahead_and_asks_the_file_system_nothing(root):
    """The zygote decides ahead for every file it imported (worker/processes/zygote.py
    `warm`); a worker's counter then counts as one deciding itself would,
    without a realpath per file."""
    data = list(range(40))
    result = result_of(
        run(
            f"""
            sys.path.insert(0, str(ROOT / "elsewhere"))
            import heapq, library
            files = [m.__file__ for m in list(sys.modules.values())
                     if isinstance(getattr(m, "__file__", None), str)]
            StepCounter(100_000, ROOT / "program", implementation="c").decide_ahead(files)
            counter = StepCounter(100_000, ROOT / "program", implementation="c")
            asked = []
            real = os.path.realpath
            os.path.realpath = lambda path, *a, **k: asked.append(path) or real(path, *a, **k)
            counter.start()
            program.sort_both_ways({data!r})
            library.library_loop(100)
            counter.stop()
            os.path.realpath = real
            report(steps=counter.steps, asked=asked)
            """,
            root,
        )
    )
    assert result["steps"] == 3 + 2 * len(data)  # the program's lines only, as without
    assert result["asked"] == []


def test_threads_started_by_the_program_are_counted(root, impl):
    result = result_of(
        run(
            """
            counter = StepCounter(100_000, ROOT / "program", implementation=IMPL)
            counter.start()
            program.in_a_thread(20)
            counter.stop()
            report(steps=counter.steps)
            """,
            root,
            impl=impl,
        )
    )
    assert result["steps"] == IN_A_THREAD_LINES + loop_lines(20)


def test_a_program_thread_past_the_budget_fails_and_marks_the_counter_exceeded(root, impl):
    result = result_of(
        run(
            """
            import threading
            failures = []
            threading.excepthook = lambda args: failures.append(str(args.exc_value))
            counter = StepCounter(50, ROOT / "program", implementation=IMPL)
            counter.start()
            worker = threading.Thread(target=program.loop, args=(1000,))
            worker.start()
            worker.join(120)
            counter.stop()
            report(failures=failures, exceeded=counter.exceeded, steps=counter.steps)
            """,
            root,
            impl=impl,
        )
    )
    assert result["failures"] == ["budget: the run exceeded max_steps (50 line events)"]
    assert result["exceeded"] is True
    assert result["steps"] == 51


def test_a_program_that_catches_the_budget_failure_still_leaves_the_counter_exceeded(root, impl):
    result = result_of(
        run(
            """
            counter = StepCounter(10, ROOT / "program", implementation=IMPL)
            counter.start()
            try:
                program.loop(100)
            except BaseException:
                pass
            counter.stop()
            report(exceeded=counter.exceeded)
            """,
            root,
            impl=impl,
        )
    )
    assert result["exceeded"] is True


def test_stop_removes_tracing_from_this_thread_new_threads_and_running_ones(root, impl):
    result = result_of(
        run(
            """
            import threading
            previous = lambda frame, event, arg: None
            sys.settrace(previous)
            counter = StepCounter(100_000, ROOT / "program", implementation=IMPL)
            counter.start()
            tracing = sys.gettrace() is not None and threading.gettrace() is not None
            ready, go, done = threading.Event(), threading.Event(), threading.Event()
            running = threading.Thread(target=program.wait_then_loop, args=(ready, go, done, 30))
            running.start()
            ready.wait(120)  # it has run (and been counted for) one line, and waits
            program.straight(1)
            counter.stop()
            at_stop = counter.steps
            restored = sys.gettrace() is previous and threading.gettrace() is None
            sys.settrace(None)
            go.set()
            finished = done.wait(120)
            program.loop(10)
            later = threading.Thread(target=program.loop, args=(10,))
            later.start()
            later.join(120)
            report(tracing=tracing, at_stop=at_stop, restored=restored, finished=finished,
                   steps=counter.steps)
            """,
            root,
            impl=impl,
        )
    )
    assert result["tracing"] is True
    assert result["at_stop"] == STRAIGHT_LINES + 1
    assert result["restored"] is True
    assert result["finished"] is True
    assert result["steps"] == result["at_stop"]


def test_a_counter_started_inside_another_hands_tracing_back_when_it_stops(root, impl):
    result = result_of(
        run(
            """
            import threading
            outer = StepCounter(10_000, ROOT / "program", implementation=IMPL)
            inner = StepCounter(10_000, ROOT / "program", implementation=IMPL)
            outer.start()
            program.straight(1)
            tracers = (sys.gettrace(), threading.gettrace())
            inner.start()
            program.loop(3)
            inner.stop()
            handed_back = (sys.gettrace(), threading.gettrace()) == tracers
            program.straight(1)
            outer.stop()
            report(outer=outer.steps, inner=inner.steps, handed_back=handed_back,
                   cleared=sys.gettrace() is None and threading.gettrace() is None)
            """,
            root,
            impl=impl,
        )
    )
    assert result == {"outer": 2 * STRAIGHT_LINES, "inner": loop_lines(3),
                      "handed_back": True, "cleared": True}


def test_re_setting_the_trace_function_from_program_code_keeps_counting(root, impl):
    # `sys.settrace(sys.gettrace())`, as debuggers and test tools do. With the
    # C counter, sys.gettrace() is the counter itself; called as a Python trace
    # function it installs itself again as the C one (the rest of the line
    # that re-set it goes uncounted, which the budget check below absorbs).
    result = result_of(
        run(
            """
            counter = StepCounter(1000, ROOT / "program", implementation=IMPL)
            counter.start()
            try:
                program.settrace_again_then_spin()
                outcome = None
            except RunFailed as failed:
                outcome = [failed.kind, failed.message]
            counter.stop()
            report(outcome=outcome, steps=counter.steps, tracing=sys.gettrace() is not None)
            """,
            root,
            impl=impl,
        )
    )
    assert result == {"outcome": ["budget", "the run exceeded max_steps (1000 line events)"],
                      "steps": 1001, "tracing": False}


def test_code_compiled_at_run_time_counts_by_its_file_and_is_not_kept_alive(root, impl):
    # The C counter decides per code object; code objects made and freed in
    # turn (their addresses reused) must each get their own file's answer.
    result = result_of(
        run(
            """
            import gc, weakref
            inside = str(ROOT / "program" / "generated.py")
            counter = StepCounter(10_000, ROOT / "program", implementation=IMPL)
            counter.start()
            for i in range(200):
                name = inside if i % 2 else "<outside>"
                exec(compile("x = 1\\n", name, "exec"), {"__file__": name})
            code = compile("y = 2\\n", inside, "exec")
            exec(code, {"__file__": inside})
            counter.stop()
            ref = weakref.ref(code)
            del code
            gc.collect()
            report(steps=counter.steps, alive=ref() is not None)
            """,
            root,
            impl=impl,
        )
    )
    assert result == {"steps": 101, "alive": False}


def test_the_c_step_counter_is_built_and_is_the_default(tmp_path):
    # A failed or skipped build of the optional extension would leave every
    # run on the slower Python tracer; this test is what notices.
    importlib.import_module("staal.worker._steps")
    from staal.worker.confinement import steps
    assert steps.C_STEP_COUNTER is True
    assert steps.StepCounter(10, tmp_path).implementation == "c"
    assert steps.StepCounter(10, tmp_path, implementation="python").implementation == "python"
    with pytest.raises(ValueError, match="implementation"):
        steps.StepCounter(10, tmp_path, implementation="rust")


def test_without_the_extension_the_python_counter_is_used(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-B", "-c", textwrap.dedent(
            """
            import json, sys
            sys.modules["staal.worker._steps"] = None  # as if it was never built
            from staal.worker.confinement import steps
            try:
                steps.StepCounter(10, sys.argv[1], implementation="c")
                refused = None
            except RuntimeError as exc:
                refused = str(exc)
            print(json.dumps({"built": steps.C_STEP_COUNTER, "refused": refused,
                              "default": steps.StepCounter(10, sys.argv[1]).implementation}))
            """), str(tmp_path)],
        check=False, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=BOUND,
    )
    assert proc.returncode == 0, proc.stderr
    result = result_of(proc)
    assert result["built"] is False
    assert result["default"] == "python"
    assert result["refused"].startswith("the C step counter is not available")


# ---------------------------------------------------------------- cpu_backstop


def test_the_cpu_backstop_fails_a_loop_of_c_calls_as_budget(root):
    result = result_of(
        run(
            """
            import hashlib
            cpu_backstop(1)
            block = bytes(1 << 20)
            try:
                while True:
                    hashlib.sha256(block).digest()  # the time goes in C; no lines to count
                outcome = None
            except RunFailed as failed:
                outcome = [failed.kind, failed.message]
            usage = os.times()
            report(outcome=outcome, cpu=usage.user + usage.system)
            """,
            root,
        )
    )
    assert result["outcome"] == ["budget", "the run used more than 1 s of CPU time"]
    # The timer and os.times() read two kernel clocks (the scheduler's runtime
    # and the tick-sampled user/system split scaled to it); on a loaded VM
    # they were seen to differ by up to 7%. What matters is that the backstop
    # waited for about its second, not that the clocks agree to the tick.
    assert result["cpu"] >= 0.8


def test_a_run_stuck_in_one_c_call_past_the_backstop_is_ended_by_sigxcpu_or_fails_as_budget(root):
    proc = run(
        """
        cpu_backstop(1)
        try:
            sum(range(10**14))  # one C call that never checks for signals
            report(outcome="finished")
        except RunFailed as failed:
            report(outcome=[failed.kind, failed.message])
        """,
        root,
        check=False,
    )
    # SIGXCPU, never SIGKILL: the supervisor reads it as the run's own limit.
    if proc.returncode == -signal.SIGXCPU:
        assert proc.stdout == ""
    else:
        assert proc.returncode == 0, proc.stderr
        assert result_of(proc)["outcome"] == ["budget", "the run used more than 1 s of CPU time"]


def test_the_cpu_backstop_times_the_budget_and_ends_the_process_two_seconds_after(root):
    result = result_of(
        run(
            """
            import resource, signal
            def used():
                usage = resource.getrusage(resource.RUSAGE_SELF)
                return usage.ru_utime + usage.ru_stime
            before = used()
            cpu_backstop(5)
            after = used()
            soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
            timer = signal.getitimer(signal.ITIMER_PROF)
            report(soft=soft, hard=hard, before=before, after=after, timer=timer,
                   core=resource.getrlimit(resource.RLIMIT_CORE),
                   sigxcpu=signal.getsignal(signal.SIGXCPU) == signal.SIG_DFL)
            """,
            root,
        )
    )
    # the budget: a CPU timer at 5 s from now, repeating each further second
    assert 4 < result["timer"][0] < 5.1 and result["timer"][1] == 1
    # the kernel's end: the CPU time used when it was set, plus 5 s, up to
    # the next second, plus the grace; SIGKILL a second after, if SIGXCPU is ignored
    assert result["before"] + 7 <= result["soft"] <= result["after"] + 8
    assert result["hard"] == result["soft"] + 1
    assert result["sigxcpu"] and result["core"] == [0, 0]


def test_the_cpu_backstop_never_raises_a_lower_hard_limit(root):
    result = result_of(
        run(
            """
            import resource
            resource.setrlimit(resource.RLIMIT_CPU, (30, 30))
            cpu_backstop(1000)
            report(limits=resource.getrlimit(resource.RLIMIT_CPU))
            """,
            root,
        )
    )
    assert result["limits"] == [30, 30]
