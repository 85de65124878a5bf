"""Timestamps across staal's processes, for `benchmarks/server.py --profile`.

`benchmarks/server.py --profile` writes a `sitecustomize.py` into a
temporary directory and puts that directory on the PYTHONPATH of the
supervisor it starts; the supervisor hands PYTHONPATH on to the zygote, and
the zygote's workers are its forks, so every staal process imports this
module at interpreter start and calls `install(path)`. Nothing in staal is
edited: an import hook wraps, as each module finishes executing, the
functions named in `SPANS` so that each marks its entry (`name>`) and exit
(`name<`), and `os.fsync`/`os.fdatasync` are wrapped everywhere (named by
their callers). Marks are `CLOCK_MONOTONIC` nanoseconds, one clock for every
process, kept in memory and written to the trace file (opened before any
confinement; `O_APPEND`, so processes do not overwrite each other) when the
buffer fills, at exit and before `os._exit`.

`summarize` reads the trace back: per sequential call (between the client's
`call>` and `call<`), where the time goes by phase, the fsyncs, and the
median time of every event from the client's send.

The same hook can also, without tracing, apply `_defer_exits` (the
benchmark's `--exit-race-workaround`) and try `_defer_forks` (its
`--experiment defer-fork`); `--experiment preimport-http` has the zygote
import what httpx imports only when its first client is made (httpcore, h11,
certifi), so that no worker imports it again.
"""

from __future__ import annotations

import atexit
import functools
import importlib.abc
import inspect
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import folds
import pairs

_fd: int | None = None
_buffer: list[tuple[int, str, str, int]] = []
_role = "cli"
_FLUSH_AT = 4096
_tracing = False
_fix_exit_race = False
_experiments: tuple[str, ...] = ()
_wanted: set[str] = set()

# module -> names to wrap, in that module's namespace ("Class.method" or a
# module-level function, possibly one imported from elsewhere by name).
SPANS: dict[str, tuple[str, ...]] = {
    # supervisor
    "staal.supervisor.app.cli": ("load_or_exit",),
    "staal.supervisor.transport.stdio": ("LineWriter.send", "protect_descriptors"),
    "staal.protocol.mcp.connection": ("Connection.receive_data", "Connection.answer_call"),
    "staal.supervisor.app.server": ("Server.start", "Server.outcome_of", "Server.recover",
                                "Server.keep_files", "plan_recovery"),
    "staal.supervisor.transport.stdio_serving": ("StdioServing.dispatch", "StdioServing.run_call",
                                       "StdioServing.answer"),
    "staal.supervisor.calls.pipeline": ("Calls.call_tool", "Calls.reserve_and_run", "Calls.execute",
                               "Calls.conclude", "check_arguments", "write_inputs", "append_log",
                               "remove_inputs", "outcome_of_message", "arguments_to_json"),
    "staal.supervisor.store.ledger": ("FileLedger.open", "FileLedger.reserve_call", "FileLedger.settle"),
    "staal.supervisor.store.group_commit": ("GroupCommit.wait",),
    "staal.supervisor.store.lockfile": ("ServerLock.acquire",),
    "staal.supervisor.recovery.waiting": ("Waiting.remove",),
    "staal.supervisor.telemetry.log": ("Log.__call__",),
    "staal.supervisor.workers.pool": ("Pool.start", "Pool.check", "Pool.checkout", "Pool.run", "Pool.fork",
                              "unpack", "pack"),
    # zygote and workers
    "staal.worker.processes.zygote": ("preload", "warm", "Zygote.fork_worker", "Zygote.become_worker"),
    "staal.worker.processes.serve": ("serve_one", "serve_run", "execute", "checked", "Channel.__init__",
                           "Channel.send", "Channel.finish", "unpack", "pack", "cpu_backstop"),
    "staal.worker.runs.run": ("start", "_execute", "_bind", "check_arguments", "arguments_hash"),
    "staal.journal.reader": ("JournalWriter.create", "JournalWriter.write", "JournalWriter.close"),
    "staal.worker.runs.engine": ("RunContext.finish",),
    "staal.worker.confinement.confine": ("narrow_tripwire",),
    "staal.worker.confinement.steps": ("StepCounter.start", "StepCounter.stop"),
    "staal.worker.capabilities.http": ("HttpClient.close",),
}
# Marked once, with the message's type, so a heartbeat is told from a run's
# end: name -> (verb, index of the message argument, or -1: the result).
_TYPED = {"pack": ("send", 0), "unpack": ("recv", -1), "Channel.send": ("queue", 1)}


def mark(name: str) -> None:
    _buffer.append((os.getpid(), _role, name, time.monotonic_ns()))
    if len(_buffer) >= _FLUSH_AT:
        flush()


def flush() -> None:
    global _buffer
    if _fd is None or not _buffer:
        return
    pending, _buffer = _buffer, []
    data = "".join(f"{pid} {role} {name} {t}\n" for pid, role, name, t in pending).encode()
    try:
        os.write(_fd, data)
    except OSError:
        pass


def _after_fork_in_child() -> None:
    global _role
    _buffer.clear()  # the parent's marks are the parent's to write
    if _role == "zyg":
        _role = "wrk"


def _wrap(fn: Callable, name: str) -> Callable:
    if name in _TYPED:
        # A single mark naming the message: `send.Run`, `recv.Ended`, `queue.Ended`.
        verb, index = _TYPED[name]
        if index < 0:
            @functools.wraps(fn)
            def received(*args: Any, **kwargs: Any) -> Any:
                result = fn(*args, **kwargs)
                mark(f"{verb}.{type(result).__name__}")
                return result
            return received

        @functools.wraps(fn)
        def sent(*args: Any, **kwargs: Any) -> Any:
            mark(f"{verb}.{type(args[index]).__name__}")
            return fn(*args, **kwargs)
        return sent
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def awrapper(*args: Any, **kwargs: Any) -> Any:
            mark(name + ">")
            try:
                return await fn(*args, **kwargs)
            finally:
                mark(name + "<")
        return awrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        mark(name + ">")
        try:
            return fn(*args, **kwargs)
        finally:
            mark(name + "<")
    return wrapper


def _patch(module: Any) -> None:
    folds.patch(module, _experiments)  # first, so that a traced run wraps what a fold put in
    pairs.patch(module, _experiments)
    if _tracing:
        for target in SPANS.get(module.__name__, ()):
            _patch_one(module, target)
        if module.__name__ == "staal.supervisor.transport.stdio" and hasattr(module, "read_chunks"):
            module.read_chunks = _marking_reader(module.read_chunks)
    if _fix_exit_race and module.__name__ == "staal.supervisor.workers.pool":
        _defer_exits(module)
    if "defer-fork" in _experiments and module.__name__ == "staal.supervisor.workers.pool":
        _defer_forks(module)
    if "no-rehearsal" in _experiments and module.__name__ == "staal.worker.processes.serve":
        # An idle worker rehearses nothing: less CPU per worker, and the
        # first touches of the engine's pages on the run's path instead.
        module.rehearse = lambda configs, prepared: None


def _patch_one(module: Any, target: str) -> None:
    owner_name, _, attr = target.rpartition(".")
    owner = getattr(module, owner_name, None) if owner_name else module
    if owner is None:
        return
    raw = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
    if raw is None:
        return
    if isinstance(raw, classmethod):
        setattr(owner, attr, classmethod(_wrap(raw.__func__, target)))
    elif isinstance(raw, staticmethod):
        setattr(owner, attr, staticmethod(_wrap(raw.__func__, target)))
    elif callable(raw):
        setattr(owner, attr, _wrap(raw, target))


def _marking_reader(read_chunks: Callable) -> Callable:
    """The supervisor's stdin thread: mark each chunk as it is read."""
    @functools.wraps(read_chunks)
    def wrapped(fd: int, deliver: Callable, *args: Any, **kwargs: Any) -> Any:
        def delivering(data: Any) -> None:
            mark("stdin_read")
            deliver(data)
        return read_chunks(fd, delivering, *args, **kwargs)
    return wrapped


def _defer_forks(module: Any) -> None:
    """An experiment (--experiment defer-fork), not a fix: `Pool.checkout`
    asks the zygote for a replacement at once, so the fork and the new
    worker's start-up compete for the CPUs with the run just handed out.
    Here the replacement is asked for when that run has ended, unless no
    ready worker is left (then at once, as before)."""
    import contextvars

    pool = getattr(module, "Pool", None)
    if pool is None or not all(hasattr(pool, n) for n in ("checkout", "run", "fork")):
        return
    checkout, run, fork = pool.checkout, pool.run, pool.fork
    owing: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("owing", default=None)

    def fork_(self: Any, count: int = 1) -> None:
        owed = owing.get()
        if owed is None:
            fork(self, count)
        else:
            owed.append(count)

    async def checkout_(self: Any) -> Any:
        owed: list[int] = []
        token = owing.set(owed)  # this task's forks only
        try:
            worker = await checkout(self)
        finally:
            owing.reset(token)
        if owed and self.idle.empty():
            fork(self, sum(owed))
        elif owed:
            worker.bench_owed_fork = sum(owed)
        return worker

    async def run_(self: Any, worker: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await run(self, worker, *args, **kwargs)
        finally:
            owed = getattr(worker, "bench_owed_fork", 0)
            if owed:
                worker.bench_owed_fork = 0
                fork(self, owed)

    pool.fork = fork_
    pool.checkout = checkout_
    pool.run = run_


def _defer_exits(module: Any) -> None:
    """The benchmark's workaround for a race in `Pool` (see benchmarks/HISTORY.md):
    the zygote's report that a worker exited can be handled before that
    worker's last ZeroMQ message (its run's end), and `_exited` then forgets
    the worker, so `_receive` drops the end and the call never returns. Here a
    clean exit of a worker whose run has not ended yet is applied once its
    end arrives. It changes what is done when, not what anything costs."""
    pool = getattr(module, "Pool", None)
    if pool is None or not hasattr(pool, "_exited") or not hasattr(pool, "run"):
        return
    if "ended" in getattr(getattr(module, "Worker", None), "__dataclass_fields__", {}):
        return  # the pool keeps a worker that exited until its end arrives: fixed there
    exited, run = pool._exited, pool.run

    def _exited(self: Any, pid: int, status: int) -> None:
        worker = self.workers.get(f"w{pid}".encode())
        if (worker is not None and worker.run is not None and status == 0
                and not getattr(worker, "bench_ended", False)):
            worker.bench_exit = (pid, status)
            return
        exited(self, pid, status)

    async def run_(self: Any, worker: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await run(self, worker, *args, **kwargs)
        finally:
            worker.bench_ended = True
            pending = getattr(worker, "bench_exit", None)
            if pending is not None:
                exited(self, *pending)

    pool._exited = _exited
    pool.run = run_


class _Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in _wanted:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: Any) -> None:
            original(module)
            _patch(module)

        loader.exec_module = exec_module
        return spec


def _caller_chain() -> str:
    frame = sys._getframe(2)
    names = []
    while frame is not None and len(names) < 3:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return "<".join(names)


def _wrap_sync(fn: Callable) -> Callable:
    def synced(fd: int) -> None:
        label = f"{fn.__name__}[{_caller_chain()}]"
        mark(label + ">")
        try:
            fn(fd)
        finally:
            mark(label + "<")
    return synced


def _exit(code: int) -> None:
    flush()
    _real_exit(code)


_real_exit = os._exit


def start(path: str) -> None:
    """Open the trace file (the client's side uses this alone)."""
    global _fd
    _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    atexit.register(flush)


def install(path: str | None, fix_exit_race: bool = False,
            experiments: tuple[str, ...] = (), scratch: str | None = None) -> None:
    """In a staal process: trace to `path` (None: no tracing), with
    `fix_exit_race` apply the workaround in `_defer_exits`, and try the
    named `experiments` ("defer-fork": `_defer_forks`; "preimport-http":
    the zygote imports httpx's lazy imports; "no-rehearsal": idle workers
    do not rehearse the engine's path; the folds of folds.py, whose spares
    go to `scratch`)."""
    global _role, _tracing, _fix_exit_race, _wanted, _experiments
    argv = " ".join(sys.orig_argv)
    _role = ("zyg" if "staal.worker.processes.zygote" in argv
             else "sup" if "staal-supervisor" in argv or "staal.supervisor" in argv else "other")
    _tracing = path is not None
    _fix_exit_race = fix_exit_race
    _experiments = tuple(experiments)
    _wanted = set(SPANS) if _tracing else set()
    if "preimport-http" in _experiments and _role == "zyg":
        import certifi  # noqa: F401
        import h11  # noqa: F401
        import httpcore  # noqa: F401
    if fix_exit_race or "defer-fork" in _experiments:
        _wanted.add("staal.supervisor.workers.pool")
    if "no-rehearsal" in _experiments:
        _wanted.add("staal.worker.processes.serve")
    _wanted |= folds.install(_experiments, _role, scratch)
    _wanted |= pairs.install(_experiments, _role)
    if _wanted:
        sys.meta_path.insert(0, _Hook())
    if not _tracing:
        return
    start(path)
    os.register_at_fork(after_in_child=_after_fork_in_child)
    os.fsync = _wrap_sync(os.fsync)
    os.fdatasync = _wrap_sync(os.fdatasync)
    os._exit = _exit
    mark("interpreter_up")


# -- reading a trace back ----------------------------------------------------------------------


def read(path: str) -> list[tuple[int, str, str, int]]:
    events = []
    with open(path) as f:
        for line in f:
            pid, role, name, t = line.split()
            events.append((int(pid), role, name, int(t)))
    events.sort(key=lambda e: e[3])
    return events


def windows(events: list[tuple[int, str, str, int]], start: str, end: str
            ) -> list[list[tuple[int, str, str, int]]]:
    """The events between each client `start` mark and the `end` after it."""
    out, current = [], None
    for event in events:
        if event[1] == "cli" and event[2] == start:
            current = [event]
        elif current is not None:
            current.append(event)
            if event[1] == "cli" and event[2] == end:
                out.append(current)
                current = None
    return out


def timelines(calls: list[list[tuple[int, str, str, int]]]) -> list[dict[str, int]]:
    """Per call, each event's time (ns) from the call's start; the n-th
    occurrence of a name in a call is `name#n`. Roles: cli (the client),
    sup, zyg, wrk (the worker running this call), next-wrk (another worker,
    forked ahead while this call runs)."""
    lines = []
    for events in calls:
        t0 = events[0][3]
        seen: dict[str, int] = defaultdict(int)
        line = {}
        # The worker that runs this call is the one that receives the run;
        # any other worker's events are a replacement being forked ahead.
        runner = next((pid for pid, role, name, _ in events
                       if role == "wrk" and name == "recv.Run"), None)
        for pid, role, name, t in events:
            if role == "wrk" and pid != runner:
                role = "next-wrk"
            key = f"{role}:{name}"
            seen[key] += 1
            if seen[key] > 1:
                key = f"{key}#{seen[key]}"
            line[key] = t - t0
        lines.append(line)
    return lines


def median_timeline(lines: list[dict[str, int]], share: float = 0.9) -> list[tuple[str, float]]:
    """Events present in at least `share` of the calls, by median time."""
    counts: dict[str, list[int]] = defaultdict(list)
    for line in lines:
        for key, t in line.items():
            counts[key].append(t)
    kept = [(key, statistics.median(ts)) for key, ts in counts.items()
            if len(ts) >= share * len(lines)]
    return sorted(kept, key=lambda kt: kt[1])


def print_timeline(lines: list[dict[str, int]], title: str) -> None:
    order = median_timeline(lines)
    print(f"\n#### {title}: every event, median time from the client's call (µs)\n")
    print("| t | event | gap before it (median per call) |")
    print("|---|---|---|")
    previous = None
    for key, t in order:
        if previous is None:
            gap = 0.0
        else:
            gaps = [line[key] - line[previous] for line in lines if key in line and previous in line]
            gap = statistics.median(gaps) if gaps else float("nan")
        print(f"| {t / 1e3:.0f} | `{key}` | {gap / 1e3:.0f} |")
        previous = key


def spans(lines: list[dict[str, int]]) -> dict[str, list[int]]:
    """Per `name>`/`name<` pair (first occurrences only), each call's duration."""
    out: dict[str, list[int]] = defaultdict(list)
    for line in lines:
        for key, t in line.items():
            if key.endswith(">"):
                end = key[:-1] + "<"
                if end in line:
                    out[key[:-1]].append(line[end] - t)
    return out


def fsyncs(calls: list[list[tuple[int, str, str, int]]]) -> None:
    per_call: dict[str, list[int]] = defaultdict(list)
    counts: dict[str, int] = defaultdict(int)
    totals = []
    for events in calls:
        open_at: dict[tuple[int, str], int] = {}
        total = 0
        for pid, role, name, t in events:
            if not name.startswith(("fsync[", "fdatasync[")):
                continue
            label = f"{role}:{name[:-1]}"
            if name.endswith(">"):
                open_at[(pid, label)] = t
            elif (pid, label) in open_at:
                took = t - open_at.pop((pid, label))
                per_call[label].append(took)
                counts[label] += 1
                total += took
        totals.append(total)
    n = len(calls)
    print("\n#### fsyncs per sequential call\n")
    print("| process:call [caller < its caller < ...] | per call | median | p90 |")
    print("|---|---|---|---|")
    for label, took in sorted(per_call.items(), key=lambda kv: -sum(kv[1])):
        took.sort()
        print(f"| `{label}` | {counts[label] / n:.2f} | {statistics.median(took) / 1e3:.0f} µs | "
              f"{took[int(0.9 * (len(took) - 1))] / 1e3:.0f} µs |")
    print(f"\nfsync time per call, summed: median {statistics.median(totals) / 1e3:.0f} µs; "
          f"{sum(counts.values()) / n:.2f} fsyncs per call")


# Where a sequential call's time goes: (phase, from event, to event).
PHASES = (
    ("client: build and write the request", "cli:call>", "sup:stdin_read"),
    ("supervisor: stdin thread to event loop, parse, dispatch, check arguments",
     "sup:stdin_read", "sup:Calls.reserve_and_run>"),
    ("reserve: thread hop, ledger event, fsync", "sup:Calls.reserve_and_run>",
     "sup:FileLedger.reserve_call<"),
    ("inputs file: thread hop, write, fsync file and directory", "sup:FileLedger.reserve_call<",
     "sup:write_inputs<"),
    ("checkout: fork request to the zygote, log `run_started`", "sup:write_inputs<", "sup:send.Run"),
    ("ZeroMQ, supervisor to worker", "sup:send.Run", "wrk:recv.Run"),
    ("worker: the run received to serve_run", "wrk:recv.Run", "wrk:serve_run>"),
    ("worker: tripwire, CPU backstop, read inputs, check, hash", "wrk:serve_run>",
     "wrk:JournalWriter.create>"),
    ("worker: journal created (header, fsync file and directory)", "wrk:JournalWriter.create>",
     "wrk:JournalWriter.create<"),
    ("worker: bind, step counter, the program itself", "wrk:JournalWriter.create<",
     "wrk:RunContext.finish>"),
    ("worker: end record, fsync", "wrk:RunContext.finish>", "wrk:RunContext.finish<"),
    ("worker: close, send the end", "wrk:RunContext.finish<",
     "wrk:send.Ended"),
    ("ZeroMQ, worker to supervisor", "wrk:send.Ended", "sup:recv.Ended"),
    ("conclude: run log line, settle (thread hop, fsync)", "sup:recv.Ended",
     "sup:FileLedger.settle<"),
    ("conclude: log `run_ended` (the clean-up goes on in the settle's thread)",
     "sup:FileLedger.settle<", "sup:Server.answer>"),
    ("answer: encode the line", "sup:Server.answer>", "sup:LineWriter.send>"),
    ("write the line; client: read, parse, validate, return", "sup:LineWriter.send>", "cli:call<"),
)


def print_phases(lines: list[dict[str, int]]) -> None:
    """Medians show the usual call; means add up to the mean call, so they
    show where the tail's time goes too."""
    totals = [line["cli:call<"] for line in lines]
    median_total, mean_total = statistics.median(totals), statistics.fmean(totals)
    print("\n#### Where a sequential call's time goes\n")
    print("| phase | median | mean | share of the mean call |")
    print("|---|---|---|---|")
    summed = 0.0
    for label, start, end in PHASES:
        took = [line[end] - line[start] for line in lines if start in line and end in line]
        if len(took) < 0.9 * len(lines):
            print(f"| {label} | (not traced) | | |")
            continue
        mean = statistics.fmean(took)
        summed += mean
        print(f"| {label} | {statistics.median(took) / 1e3:.0f} µs | {mean / 1e3:.0f} µs | "
              f"{mean / mean_total:.0%} |")
    print(f"| **the whole call** (phases' means summed: {summed / 1e3:.0f} µs) | "
          f"**{median_total / 1e3:.0f} µs** | **{mean_total / 1e3:.0f} µs** | |")


def summarize(path: str) -> None:
    events = read(path)
    calls = windows(events, "call>", "call<")
    if not calls:
        print("no calls in the trace")
        return
    lines = timelines(calls)
    totals = [line["cli:call<"] for line in lines]
    print(f"\n{len(calls)} sequential calls traced; client-measured latency: median "
          f"{statistics.median(totals) / 1e3:.0f} µs (the tracer adds its own few µs per mark)")
    print_phases(lines)
    fsyncs(calls)
    print_timeline(lines, "One sequential call")
    durations = spans(lines)
    print("\n#### Spans (median per call, first occurrence in the call)\n")
    print("| span | median | p90 |")
    print("|---|---|---|")
    for name, took in sorted(durations.items(), key=lambda kv: -statistics.median(kv[1])):
        if len(took) < 0.9 * len(calls):
            continue
        took.sort()
        print(f"| `{name}` | {statistics.median(took) / 1e3:.0f} µs | "
              f"{took[int(0.9 * (len(took) - 1))] / 1e3:.0f} µs |")


def summarize_cold(path: str) -> None:
    events = read(path)
    starts = windows(events, "spawn", "listed")
    lines = timelines(starts)
    if not lines:
        print("no cold start in the trace")
        return
    print_timeline(lines, f"Cold start ({len(lines)} samples): spawn to the first tools/list answered")
