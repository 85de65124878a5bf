"""What a run's capabilities share: its clock, its secrets, its config and
one HTTP client, made on first use so a run that makes no request never
imports httpx."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from staal.records.runconfig import RunConfig
from staal.runtime.clock import Clock

if TYPE_CHECKING:
    from staal.worker.capabilities.http import HttpClient
    from staal.worker.runs.actions import Performed


class Database(Protocol):
    """One grant's open database: what `SqlBound._open()` gives (sql.py)."""

    def query(self, sql: str, params: Any) -> Performed: ...

    def execute(self, sql: str, params: Any) -> Performed: ...

    def close(self) -> None: ...


@dataclass
class Services:
    """What capabilities share within one run."""

    clock: Clock
    secrets: dict[str, str] = field(default_factory=dict)
    config: RunConfig | None = None
    _http: HttpClient | None = None
    # The run's open database connections by grant, made on first use and
    # closed when the services go away (worker/capabilities/sql.py).
    databases: dict[str, Database] | None = None

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
