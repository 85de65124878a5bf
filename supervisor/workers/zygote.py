"""Starting the zygote, as early as the server can: its interpreter and
imports (about a third of a second) then overlap the supervisor's own
start-up instead of following it. Kept free of heavy imports for that
reason."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from staal.manifest.model import Manifest

# The crash tests' switches: kill points, and the file-system recording
# (staal.records.fsio) the power-loss enumeration replays.
KILL_VARIABLES = ("STAAL_TEST_KILL_POINTS", "STAAL_KILL_AT", "STAAL_KILL_ONCE", "STAAL_TEST_FS_RECORD")
# The signals that stop the server (Ctrl-C, `kill`, `docker stop`). They are
# the supervisor's alone: a terminal sends Ctrl-C to its whole process group,
# zygote included, and the supervisor stops its children itself once every
# call in flight is answered.
STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})


@dataclass
class Spawned:
    process: subprocess.Popen[bytes]
    report_fd: int
    endpoint: str
    runtime_dir: Path


def secret_names(manifest: Manifest) -> dict[str, tuple[str, ...]]:
    """Each run config's secrets: the variables its grants (and its model)
    name; by `config_key`: a tool's own, and each of its grant sets'."""
    from staal.records.runconfig import config_key, from_tool

    return {config_key(tool.name, grants): tuple(from_tool(manifest, tool, grants).secret_names())
            for tool in manifest.tools for grants in (None, *tool.profiles)}


def worker_environment(manifest: Manifest) -> dict[str, str]:
    """The zygote's environment, which every worker inherits: PATH, the
    crash-kill switches and PYTHONPATH, and never a secret, not even one a
    grant names. A process's first environment stays in its memory for good
    (unsetting a variable does not wipe it) and a fork copies it, so a
    secret given here would be readable by every tool's worker; each run is
    handed its own in its run message instead (`run_secrets`)."""
    secret = {name for names in secret_names(manifest).values() for name in names}
    names = {"PATH", "PYTHONPATH", *KILL_VARIABLES} - secret
    return {name: os.environ[name] for name in sorted(names) if name in os.environ}


def run_secrets(names: Iterable[str]) -> dict[str, str]:
    """The values of one run's secrets, from the supervisor's own
    environment. A name that is not set is left out: the capability that
    needs it refuses the action, saying so."""
    return {name: os.environ[name] for name in names if name in os.environ}


def runtime_dir() -> Path:
    """A 0700 directory for the workers' ZeroMQ endpoint."""
    return Path(tempfile.mkdtemp(prefix="staal-"))


@contextlib.contextmanager
def stop_signals_blocked() -> Iterator[None]:
    """The stop signals blocked in this thread while a child is started: the
    child inherits the mask through its exec and keeps them pending until it
    ignores them (worker/processes/zygote.py's `ignore_stop_signals`); here they are
    delivered once the mask is restored."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def spawn(manifest: Path, endpoint: str, env: dict[str, str]) -> Spawned:
    """The zygote, started with no inherited descriptors but its report pipe,
    and with the stop signals blocked (a signal mask survives the exec) until
    it ignores them, first thing (worker/processes/zygote.py's `ignore_stop_signals`):
    a Ctrl-C during its interpreter's start stays pending, then is dropped."""
    report_r, report_w = os.pipe()
    with stop_signals_blocked():
        process = subprocess.Popen(
            [sys.executable, "-m", "staal.worker.processes.zygote", "--manifest", str(manifest),
             "--endpoint", endpoint, "--report-fd", str(report_w)],
            stdin=subprocess.PIPE, stdout=sys.stderr.fileno(), env=env,
            pass_fds=(report_w,), close_fds=True,
        )
    os.close(report_w)
    return Spawned(process, report_r, endpoint, Path(endpoint.removeprefix("ipc://")).parent)


def spawn_early(manifest: Manifest) -> Spawned:
    directory = runtime_dir()
    return spawn(manifest.path, f"ipc://{directory / 'workers'}", worker_environment(manifest))
