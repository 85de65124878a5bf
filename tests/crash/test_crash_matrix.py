"""Every kill point of the crash matrix, as a test."""

from __future__ import annotations

import pytest

from tests.crash.harness import CELLS, run_cell


@pytest.mark.parametrize("cell", CELLS, ids=lambda c: c.name.replace(" ", "-"))
def test_a_crash_at_each_kill_point_loses_nothing_and_does_nothing_twice(cell):
    observed = run_cell(cell)
    assert observed.passed, "; ".join(observed.problems) + f"\nfirst {observed.first}\nrepeat {observed.repeat}\nrules {observed.rules}"
