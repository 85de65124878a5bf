"""Starting the zygote, as early as the server can: its interpreter and
imports (about a third of a second) then overlap the supervisor's own
start-up instead of following it. Kept free of heavy imports for that
reason."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from staal.manifest import Manifest

KILL_VARIABLES = ("STAAL_TEST_KILL_POINTS", "STAAL_KILL_AT", "STAAL_KILL_ONCE")


@dataclass
class Spawned:
    process: subprocess.Popen
    report_fd: int
    endpoint: str
    runtime_dir: Path


def worker_environment(manifest: Manifest) -> dict[str, str]:
    """Workers get only the variables their grants name (and PATH)."""
    from staal.runconfig import from_tool

    names = {"PATH", *KILL_VARIABLES}
    for tool in manifest.tools:
        names.update(from_tool(manifest, tool).secret_names())
    if "PYTHONPATH" in os.environ:
        names.add("PYTHONPATH")
    return {name: os.environ[name] for name in sorted(names) if name in os.environ}


def runtime_dir() -> Path:
    """A 0700 directory for the workers' ZeroMQ endpoint."""
    return Path(tempfile.mkdtemp(prefix="staal-"))


def spawn(manifest: Path, endpoint: str, env: dict[str, str]) -> Spawned:
    """The zygote, started with no inherited descriptors but its report pipe."""
    report_r, report_w = os.pipe()
    process = subprocess.Popen(
        [sys.executable, "-m", "staal.worker.zygote", "--manifest", str(manifest),
         "--endpoint", endpoint, "--report-fd", str(report_w)],
        stdin=subprocess.PIPE, stdout=sys.stderr.fileno(), env=env,
        pass_fds=(report_w,), close_fds=True,
    )
    os.close(report_w)
    return Spawned(process, report_r, endpoint, Path(endpoint.removeprefix("ipc://")).parent)


def spawn_early(manifest: Manifest) -> Spawned:
    directory = runtime_dir()
    return spawn(manifest.path, f"ipc://{directory / 'workers'}", worker_environment(manifest))
