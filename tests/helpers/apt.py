"""Debian packages the tests need, installed by the test run itself when
missing (apt-get, as root), so the README's test command stays the whole
set-up and no step lives only in CI: Chromium for the console, HAProxy and
PostgreSQL's server binaries for the deployment tests.

Parallel test processes (pytest -n) would race for apt's lock, so one
installs at a time, under a file lock, and each looks again once it holds it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

INSTALL_TIMEOUT_S = 600
LOCK = Path("/tmp/staal-apt-install.lock")


class PackageMissing(Exception):
    """A package is not installed and could not be installed here."""


def ensure(package: str, found: Callable[[], Path | None]) -> Path:
    """What `found` finds (a binary's path), after installing `package` from
    Debian first if it finds nothing."""
    path = found()
    if path is not None:
        return path
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise PackageMissing(f"{package} is missing and the tests cannot install it (they need "
                             f"root and apt-get): run apt-get install -y {package} as root")
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = found()
        if path is not None:
            return path
        said = install(package)
        path = found()
    if path is None:
        raise PackageMissing(f"apt-get installed {package} but what the tests need of it is "
                             f"missing:\n{said}")
    return path


def exists(path: Path) -> Callable[[], Path | None]:
    return lambda: path if path.exists() else None


def install(package: str) -> str:
    """apt-get update, then the package without its recommendations; what apt said."""
    said = ""
    for command in (["apt-get", "update"],
                    ["apt-get", "install", "-y", "--no-install-recommends", package]):
        try:
            done = subprocess.run(command, capture_output=True, text=True, check=False,
                                  timeout=INSTALL_TIMEOUT_S,
                                  env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        except subprocess.TimeoutExpired:
            raise PackageMissing(f"{' '.join(command)} took over {INSTALL_TIMEOUT_S} s") from None
        said = done.stdout[-2000:] + done.stderr[-2000:]
        if done.returncode != 0:
            raise PackageMissing(f"{' '.join(command)} failed:\n{said}")
    return said
