"""The zygote: started once by the supervisor with an environment that
holds no secret, it installs the tripwire, imports the engine and every
tool's program, and then forks workers on request (DESIGN.md
section 6). A worker is handed its own run's secrets in its run message, so
no worker's memory holds another tool's secret (worker/processes/serve.py).

A fork of this warm process costs about a millisecond; an interpreter start
costs hundreds. Fork requests arrive on standard input as lines
("fork N"), never through a ZeroMQ socket (ZeroMQ contexts do not survive a
fork: each worker opens its own). On the report descriptor the zygote says
when it is ready ("ready", its programs loaded), each fork ("forked PID", or
"unforked ERRNO" when the kernel refused one), and each exit of a child it
reaped ("exit PID STATUS"), so the supervisor accounts for every fork it
asked for and knows how a worker ended: normally, killed, or by a signal
such as SIGSEGV.
"""

from __future__ import annotations

import argparse
import gc
import os
import select
import signal
import sys
from pathlib import Path

from staal.manifest.check import load_manifest
from staal.records.runconfig import RunConfig, config_key, from_tool
from staal.runtime.private_memory import keep_memory_private
from staal.worker.confinement import confine
from staal.worker.processes.binding import flush_c_stdio
from staal.worker.runs.actions import RunOutcome
from staal.worker.runs.run import Prepared, load, note_violation, uses_ffi

Preloaded = tuple[dict[str, RunConfig], dict[str, Prepared | RunOutcome], dict[str, int]]


def preload(manifest_path: Path) -> Preloaded:
    """Every tool's run config and program, loaded once under confinement,
    and how many runs a worker of each grant set may serve."""
    manifest = load_manifest(manifest_path)
    sets = [(tool, grants) for tool in manifest.tools for grants in (None, *tool.profiles)]
    configs = {config_key(tool.name, grants): from_tool(manifest, tool, grants)
               for tool, grants in sets}
    reuse = {config_key(tool.name, grants): manifest.runs_per_worker(tool.name)
             for tool, grants in sets}
    confine.scrub_environment(())
    confine.install_tripwire(allow_ffi=any(uses_ffi(c) for c in configs.values()),
                             on_violation=note_violation)
    # Loaded without secrets: checking a program never needs one.
    prepared = {name: load(config, {}) for name, config in configs.items()}
    warm(configs)
    return configs, prepared, reuse


def warm(configs: dict[str, RunConfig]) -> None:
    """Do once here what every worker would otherwise do first: imports, the
    step counter's decision for every file imported so far, the grants' URL
    patterns compiled, and the record encoders' per-type plans. A fork
    inherits all of it."""
    import zmq  # noqa: F401

    from staal.worker.capabilities import implementation

    # What each capability the tools use needs, whatever the run (httpx's
    # client and SSL context, psycopg's parts): made once, here, only for
    # the capabilities some tool can use.
    caps = {g.cap for c in configs.values() for gr in c.grants.values() for g in gr.walk()}
    for cap in sorted(caps):
        with confine.broker_section():
            implementation(cap).prepare()

    import staal.worker.processes.serve  # noqa: F401
    from staal.journal.records import JOURNAL
    from staal.records.messages import MESSAGES
    from staal.records.record import prepare_encoding
    from staal.worker.confinement.steps import StepCounter
    from staal.worker.runs.urls import prepare_patterns

    imported = [f for m in list(sys.modules.values()) if isinstance(f := getattr(m, "__file__", None), str)]
    for config in configs.values():
        StepCounter(config.limits.max_steps, config.program.parent).decide_ahead(imported)
        for grant in config.grants.values():
            for inner in grant.walk():
                if inner.only:
                    prepare_patterns(tuple(inner.only))
    prepare_encoding(JOURNAL.types + MESSAGES.types)


class Zygote:
    def __init__(self, endpoint: str, report_fd: int, preloaded: Preloaded) -> None:
        self.endpoint = endpoint
        self.report = report_fd
        self.configs, self.prepared, self.reuse = preloaded
        self.children: set[int] = set()
        self.pid = os.getpid()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)

    def report_line(self, text: str) -> None:
        try:
            os.write(self.report, (text + "\n").encode())
        except OSError:
            pass  # the supervisor is gone; it will not ask for more

    def serve(self) -> None:
        signal.signal(signal.SIGCHLD, lambda *_: self._wake())
        self.report_line("ready")
        pending = b""
        while True:
            ready, _, _ = select.select([0, self.wake_r], [], [])
            if self.wake_r in ready:
                os.read(self.wake_r, 4096)
                self.reap()
            if 0 in ready:
                data = os.read(0, 4096)
                if not data:
                    self.kill_workers()  # the supervisor is gone, or shutting down
                    return
                pending += data
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    self.handle(line.decode().strip())

    def kill_workers(self) -> None:
        for pid in list(self.children):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                # Forked, but not yet in a group of its own (its first act):
                # killed by pid, or it would outlive this zygote.
                _kill(pid)
            except PermissionError:
                pass
        self.reap()

    def _wake(self) -> None:
        try:
            os.write(self.wake_w, b"x")
        except BlockingIOError:
            pass

    def handle(self, line: str) -> None:
        verb, _, count = line.partition(" ")
        if verb == "fork":
            for _ in range(max(1, int(count or 1))):
                self.fork_worker()

    def fork_worker(self) -> None:
        with confine.broker_section():
            try:
                pid = os.fork()
            except OSError as exc:  # out of processes or memory: the pool tries again later
                self.report_line(f"unforked {exc.errno}")
                return
        if pid == 0:
            self.become_worker()
        self.children.add(pid)
        self.report_line(f"forked {pid}")

    def become_worker(self) -> None:
        code = 70
        try:
            os.setpgid(0, 0)  # its own group, so a stuck worker is killed whole
            with confine.broker_section():
                die_with_parent()
            if os.getppid() != self.pid:
                return  # the zygote died before that took hold: no run will ever come
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in (self.report, self.wake_r, self.wake_w):
                os.close(fd)
            confine.refuse_stdin()
            from staal.worker.processes.serve import serve

            code = serve(self.endpoint, self.configs, self.prepared, self.reuse)
        finally:
            flush_c_stdio()
            os._exit(code)

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.children.discard(pid)
            self.report_line(f"exit {pid} {status}")


PR_SET_PDEATHSIG = 1


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def die_with_parent() -> None:
    """Linux: be killed when the parent dies, so a supervisor killed outright
    takes its zygote, and a zygote its workers, with it; a restarted server
    then never finds an old worker still writing a journal it resumes."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the zygote still kills its workers when its stdin closes


def ignore_stop_signals() -> None:
    """SIGINT and SIGTERM are the supervisor's (supervisor/workers/zygote.py's
    STOP_SIGNALS): a terminal's Ctrl-C and a SIGTERM to the server's process
    group (or to its whole cgroup) reach its children too, and each must
    outlive them until the supervisor, once every call in flight is
    answered, stops it: the zygote by closing its standard input, the
    verifier by killing it. Ignored, then unblocked (the supervisor started
    the process with them blocked), so one that came during the start is
    dropped; every worker inherits the ignoring from the zygote, so a run is
    never cut short by them either."""
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def main(argv: list[str] | None = None) -> None:
    ignore_stop_signals()
    parser = argparse.ArgumentParser(prog="staal-zygote")
    parser.add_argument("--manifest", required=True, type=Path)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--report-fd", required=True, type=int)
    args = parser.parse_args(argv)
    die_with_parent()
    keep_memory_private()  # for every worker it forks: each holds its run's secrets
    preloaded = preload(args.manifest)
    # Everything loaded so far lives as long as the zygote: move it out of
    # the collector's view, so a worker's collections never walk (and so
    # never copy) the pages it shares with the zygote.
    gc.collect()
    gc.freeze()
    Zygote(args.endpoint, args.report_fd, preloaded).serve()


if __name__ == "__main__":
    main()
