"""The crash matrix on the PostgreSQL store (issue 15): the cells whose
kill point is in the supervisor, where the ledger is written, and those in
the worker, whose journal records the supervisor commits as rows there
(the warm cells among them: a worker serving several runs commits each
run's records as rows of its own run).
Each kill point keeps its meaning ("after the step is durable"), judged by
the same rules as on the file store (tests/crash/harness.py): nothing lost,
nothing done twice, one reserve and at most one settle or release per run."""

from __future__ import annotations

import pytest

from tests.crash.harness import CELLS, Cell, run_cell
from tests.helpers.pg_store import PgStore

SUPERVISOR_CELLS = [c for c in CELLS if c.process == "supervisor"]
WORKER_CELLS = [c for c in CELLS if c.process == "worker"]


@pytest.mark.parametrize("cell", SUPERVISOR_CELLS, ids=lambda c: c.name.replace(" ", "-"))
def test_a_supervisor_crash_at_each_kill_point_loses_nothing_and_does_nothing_twice_on_postgres(
        cell, pg_store: PgStore) -> None:
    passes_on_postgres(cell, pg_store)


@pytest.mark.parametrize("cell", WORKER_CELLS, ids=lambda c: c.name.replace(" ", "-"))
def test_a_worker_crash_at_each_kill_point_loses_nothing_and_does_nothing_twice_on_postgres(
        cell, pg_store: PgStore) -> None:
    passes_on_postgres(cell, pg_store)
    unjournaled = pg_store.rows("SELECT run FROM staal_runs WHERE run NOT IN "
                                "(SELECT run FROM staal_journal)")
    released = pg_store.rows("SELECT run FROM staal_ends WHERE kind = 'release'")
    assert sorted(unjournaled) == sorted(released)  # a run with no journal rows never started


def passes_on_postgres(cell: Cell, pg_store: PgStore) -> None:
    """The cell passes by the matrix's own rules, and every run ended, once."""
    observed = run_cell(cell, pg_store.dsn)
    assert observed.passed, observed.explain()
    ends = pg_store.rows("SELECT count(*) FROM staal_ends")[0][0]
    assert ends == len(pg_store.rows("SELECT run FROM staal_runs"))
