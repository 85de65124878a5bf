"""The crash matrix's cells whose kill point is in the supervisor, where
the ledger is written, on the PostgreSQL store (issue 15): each kill point
keeps its meaning there, judged by the same rules as on the file store
(tests/crash/harness.py): nothing lost, nothing done twice, one reserve and
at most one settle or release per run."""

from __future__ import annotations

import pytest

from tests.crash.harness import CELLS, run_cell
from tests.pg_store import PgStore

SUPERVISOR_CELLS = [c for c in CELLS if c.process == "supervisor"]


@pytest.mark.parametrize("cell", SUPERVISOR_CELLS, ids=lambda c: c.name.replace(" ", "-"))
def test_a_supervisor_crash_at_each_kill_point_loses_nothing_and_does_nothing_twice_on_postgres(
        cell, pg_store: PgStore) -> None:
    observed = run_cell(cell, pg_store.dsn)
    assert observed.passed, observed.explain()
    ends = pg_store.rows("SELECT count(*) FROM staal_ends")[0][0]
    assert ends == len(pg_store.rows("SELECT run FROM staal_runs"))  # every run ended, once
