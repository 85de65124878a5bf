"""A private PostgreSQL cluster the deployment tests own and may stop, crash
and restart; the machine's shared server at 5432 is never touched (other
tests and engineers use it).

Debian's server binaries (`/usr/lib/postgresql/<major>/bin`; the `postgresql`
package is installed when they are missing, `tests/helpers/apt.py`), run as the
`postgres` user, since initdb refuses root. The cluster lives in a fresh
directory under /tmp that only `postgres` may enter, listens on loopback on
a free port and keeps its Unix socket in its own directory. The settings
the ledger's guarantees need are set explicitly, not left to defaults:
`fsync=on`, `synchronous_commit=on`, `full_page_writes=on`; trust
authentication on loopback only, as the shared test server has.

`pg_ctl -w` waits, with a bound (`-t`), until the server accepts
connections or is gone: every start and stop here is a bounded wait on the
server's own readiness, never a sleep.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.helpers.apt import ensure

OWNER = "postgres"
WAIT_S = 60
PORT_TRIES = 3
SETTINGS = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on",
            "listen_addresses": "'127.0.0.1'", "max_connections": "200",
            "shared_buffers": "32MB", "logging_collector": "off"}


class ClusterFailed(Exception):
    """initdb or pg_ctl failed; the message holds what it said."""


def binaries() -> Path:
    """The newest installed major version's bin directory (installed from
    Debian first when there is none)."""
    def found() -> Path | None:
        have = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                      key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0)
        return have[-1].parent if have else None

    return ensure("postgresql", found)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PgCluster:
    """One cluster: `init()` once, then `start`, `stop(mode)` and `restart`."""

    def __init__(self, name: str = "staal", port: int | None = None) -> None:
        self.bin = binaries()
        self.owner = pwd.getpwnam(OWNER)
        self.root = Path(tempfile.mkdtemp(prefix=f"staal-pg-{name}-"))
        os.chown(self.root, self.owner.pw_uid, self.owner.pw_gid)
        os.chmod(self.root, 0o700)
        self.data = self.root / "data"
        self.sockets = self.root / "sockets"
        self.log = self.root / "server.log"
        self.port = port or free_port()
        self.database = name

    @property
    def dsn(self) -> str:
        """A libpq DSN for the cluster's database, over TCP on loopback."""
        return f"host=127.0.0.1 port={self.port} dbname={self.database} user={OWNER}"

    def _run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(["runuser", "-u", OWNER, "--", *command], capture_output=True,
                              text=True, timeout=WAIT_S + 30, check=False, cwd=self.root)
        if check and done.returncode != 0:
            raise ClusterFailed(f"{' '.join(command)} exited {done.returncode}:\n"
                                f"{done.stdout[-2000:]}{done.stderr[-2000:]}\n{self.log_text()}")
        return done

    def init(self) -> PgCluster:
        self._run("mkdir", "-p", str(self.sockets))
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", OWNER, "--auth=trust",
                  "--encoding=UTF8", "--locale=C.UTF-8", "--no-instructions")
        self._configure({**SETTINGS, "unix_socket_directories": f"'{self.sockets}'"})
        for attempt in range(PORT_TRIES):
            self._configure({"port": str(self.port)})  # the last setting of a name wins
            try:
                self.start()
                break
            except ClusterFailed as exc:
                # The free port was taken before the server bound it: another.
                if "Address already in use" not in str(exc) or attempt == PORT_TRIES - 1:
                    raise
                self.port = free_port()
        self._run(str(self.bin / "createdb"), "-h", str(self.sockets), "-p", str(self.port),
                  self.database)
        return self

    def standby(self, name: str = "standby") -> PgCluster:
        """A hot standby of this cluster, started: a base backup
        (`pg_basebackup -R`, a checkpoint asked for at once) streaming from
        it, in a directory and on a port of its own, read-only while it
        replays. `destroy()` it before this one."""
        other = PgCluster(name)
        other.database = self.database
        other._run("mkdir", "-p", str(other.sockets))
        other._run(str(self.bin / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(self.port),
                   "-U", OWNER, "-D", str(other.data), "-R", "-X", "stream", "-c", "fast")
        other._configure({"port": str(other.port), "hot_standby": "on",
                          "unix_socket_directories": f"'{other.sockets}'"})
        other.start()
        return other

    def _configure(self, settings: dict[str, str]) -> None:
        conf = "".join(f"{key} = {value}\n" for key, value in settings.items())
        with open(self.data / "postgresql.conf", "a") as file:  # stays the owner's file
            file.write(conf)

    def start(self) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
                  "-w", "-t", str(WAIT_S), "start")

    def stop(self, mode: str = "fast") -> None:
        """`fast`: a clean shutdown, sessions cut; `immediate`: the crash
        kind, every process quits at once and the next start recovers from
        the write-ahead log."""
        if mode not in ("smart", "fast", "immediate"):
            raise ValueError(f"pg_ctl stop mode {mode!r}: smart, fast or immediate")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode,
                  "-w", "-t", str(WAIT_S), "stop")

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def running(self) -> bool:
        done = self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "status", check=False)
        return done.returncode == 0

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def destroy(self) -> None:
        """Stop it (immediately: nothing is kept) and remove its directory."""
        if self.data.exists() and self.running():
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


@contextmanager
def private_cluster(name: str = "staal") -> Iterator[PgCluster]:
    """A cluster made and started for a `with` block, destroyed after it
    (for a fixture: the deployment tests' shared store)."""
    cluster = PgCluster(name)
    try:
        yield cluster.init()
    finally:
        cluster.destroy()
