"""The system services tests need, started by the test command itself, so
the README's two commands are the whole set-up on a fresh machine and no
step lives only in CI (issue 10, item 5).

PostgreSQL: `STAAL_TEST_POSTGRES_DSN`, defaulting to the local server at
127.0.0.1:5432. When that server does not answer, the local cluster is
started with `pg_ctlcluster`, which waits until it accepts connections
(`pg_ctl start` waits by default). A DSN that names another server is only
checked, never started.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

POSTGRES_ENV = "STAAL_TEST_POSTGRES_DSN"
DEFAULT_POSTGRES_DSN = "host=127.0.0.1 port=5432 dbname=test user=postgres"
CLUSTERS = Path("/etc/postgresql")
START_TIMEOUT_S = 120


class ServiceMissing(Exception):
    """A service a test needs is neither running nor startable here."""


def postgres_dsn() -> str:
    """The test server's DSN, once it accepts connections. The variable is
    set to it, so `staal` processes the tests start see the same server."""
    dsn = os.environ.get(POSTGRES_ENV) or DEFAULT_POSTGRES_DSN
    os.environ[POSTGRES_ENV] = dsn
    if not postgres_ready(dsn):
        if dsn != DEFAULT_POSTGRES_DSN:
            raise ServiceMissing(f"{POSTGRES_ENV}={dsn!r} does not accept connections "
                                 "(only the default local server is started by the tests)")
        said = start_local_postgres()
        if not postgres_ready(dsn):
            raise ServiceMissing(f"PostgreSQL does not accept connections at {dsn!r} after "
                                 f"pg_ctlcluster start, which said:\n{said}")
    return dsn


def postgres_ready(dsn: str) -> bool:
    if shutil.which("pg_isready") is None:
        raise ServiceMissing("pg_isready is not on PATH: PostgreSQL is not installed "
                             "(Debian, Ubuntu: apt-get install postgresql)")
    done = subprocess.run(["pg_isready", "-q", "-d", dsn], capture_output=True,
                          timeout=30, check=False)
    return done.returncode == 0


def start_local_postgres() -> str:
    """`pg_ctlcluster --skip-systemctl-redirect VERSION main start` for the
    installed cluster (the first version, as listed, if there are several).
    A cluster another test session started meanwhile is no error: readiness
    is checked again afterwards. What it printed."""
    versions = sorted(p.name for p in CLUSTERS.iterdir()) if CLUSTERS.is_dir() else []
    if not versions or shutil.which("pg_ctlcluster") is None:
        raise ServiceMissing(f"no PostgreSQL cluster under {CLUSTERS} to start "
                             "(Debian, Ubuntu: apt-get install postgresql)")
    done = subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", versions[0], "main", "start"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=START_TIMEOUT_S,
        check=False)
    return done.stdout + done.stderr
