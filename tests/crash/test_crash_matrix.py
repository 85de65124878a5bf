"""Every cell of the crash matrix, as a test (tests/crash/harness.py).

Most cells run under one test; the cells a requirement names on its own
have a test of their own, so the requirements map can point at each."""

from __future__ import annotations

import pytest

from tests.crash.harness import CELLS, cell_named, run_cell

ON_THEIR_OWN = ("worker:journal_file", "worker:outcome", "worker:end", "supervisor:refund held",
                "supervisor:ended", "worker:idle", "worker:journal#2",
                "worker:intent#2 (another call at once)")


def check(name_or_cell) -> None:
    cell = cell_named(name_or_cell) if isinstance(name_or_cell, str) else name_or_cell
    observed = run_cell(cell)
    assert observed.passed, observed.explain()


@pytest.mark.parametrize("cell", [c for c in CELLS if c.name not in ON_THEIR_OWN],
                         ids=lambda c: c.name.replace(" ", "-"))
def test_a_crash_at_each_kill_point_loses_nothing_and_does_nothing_twice(cell):
    check(cell)


def test_a_worker_killed_inside_the_journals_creation_is_replaced_by_one_that_starts_the_run():
    check("worker:journal_file")


def test_a_worker_killed_after_the_reads_outcome_is_replaced_and_the_read_is_replayed_not_resent():
    check("worker:outcome")


def test_a_worker_killed_after_its_end_record_is_replaced_by_one_that_reports_that_end():
    check("worker:end")


def test_a_supervisor_killed_while_the_service_holds_the_refund_resends_it_under_its_key_at_start():
    check("supervisor:refund held")


def test_a_run_that_ended_as_the_supervisor_died_is_settled_from_its_end_at_the_next_start():
    check("supervisor:ended")


def test_a_warm_worker_killed_while_it_rests_between_runs_costs_no_run_and_no_fork_backoff():
    check("worker:idle")


def test_a_warm_worker_killed_at_its_second_runs_journal_header_is_replaced_by_one_that_resumes_it():
    check("worker:journal#2")


def test_a_run_that_kills_its_worker_while_another_call_of_its_tool_waits_for_one_does_each_once():
    check("worker:intent#2 (another call at once)")
