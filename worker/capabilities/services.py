"""What a run's capabilities share: its clock, its secrets, its config and
one HTTP client, made on first use so a run that makes no request never
imports httpx; and what a worker keeps across the runs it serves (`Kept`):
its PostgreSQL connections, reset between runs."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from staal.records.runconfig import RunConfig
from staal.runtime.clock import Clock
from staal.worker.runs.refusal import broker_section

if TYPE_CHECKING:
    from staal.worker.capabilities.http import HttpClient
    from staal.worker.runs.actions import Performed


# A database connection's key: the root grant's parameter, its capability,
# and the SHA-256 of the secret value it connects with (a DSN; "" for none),
# so a kept connection whose secret changed is never used again.
DatabaseKey = tuple[str, str, str]


class Database(Protocol):
    """One grant's open database: what `SqlBound._open()` gives (sql.py)."""

    def query(self, sql: str, params: Any) -> Performed: ...

    def execute(self, sql: str, params: Any) -> Performed: ...

    def between_runs(self) -> None:
        """Leave nothing of this run's session for the next run (or close)."""

    def close(self) -> None: ...


@dataclass
class Kept:
    """The connections a worker keeps across the runs it serves, all of one
    tool and grant set: opening a PostgreSQL connection costs round trips
    and a server process, more than many a run's own work. Only databases
    whose capability says `KEPT` are here (sql.connections); the others
    belong to one run. The worker calls `between_runs()` after each run's
    report is sent, and `close()` when it exits."""

    databases: dict[DatabaseKey, Database] = field(default_factory=dict)

    def between_runs(self) -> None:
        """Reset each kept database for the next run. One that cannot be
        reset (its own between_runs raised: a bug) is closed and forgotten,
        so the next run opens a new one rather than inherit a session."""
        for key, database in list(self.databases.items()):
            try:
                database.between_runs()
            except Exception:  # noqa: BLE001 - a new connection is the safe state
                del self.databases[key]
                with contextlib.suppress(Exception):
                    database.close()

    def close(self) -> None:
        """Close every kept database (best effort: the worker is leaving)."""
        databases = list(self.databases.values())
        self.databases.clear()
        with broker_section():  # the broker's own connections, whatever closing them does
            for database in databases:
                with contextlib.suppress(Exception):
                    database.close()


@dataclass
class Services:
    """What capabilities share within one run."""

    clock: Clock
    secrets: dict[str, str] = field(default_factory=dict)
    config: RunConfig | None = None
    _http: HttpClient | None = None
    # The run's open database connections by grant, made on first use and
    # closed when the services go away (worker/capabilities/sql.py).
    databases: dict[DatabaseKey, Database] | None = None
    # What the worker keeps across its runs; None: a process of one run,
    # whose connections are all the run's own.
    kept: Kept | None = None

    @property
    def run_config(self) -> RunConfig:
        """The run's config, which a run's services always have (a benchmark's
        may not, when its capabilities do not read it)."""
        if self.config is None:
            raise RuntimeError("these run services were made without a run config")
        return self.config

    @property
    def http(self) -> HttpClient:
        """The run's HTTP client, made (and httpx imported) on first use."""
        if self._http is None:
            from staal.worker.capabilities.http import HttpClient

            self._http = HttpClient(self.run_config.net)
        return self._http

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
