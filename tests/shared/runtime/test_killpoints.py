"""The crash harness's test-only hooks (shared/runtime/killpoints.py): a
pool told to keep fewer workers ahead, and a pause (STAAL_PAUSE_AT), only
where kill points are on."""

from __future__ import annotations

import pytest

from staal.runtime.killpoints import kill_point, pool_ahead


def test_the_pools_own_number_of_workers_ahead_holds_without_kill_points(monkeypatch):
    monkeypatch.delenv("STAAL_TEST_KILL_POINTS", raising=False)
    monkeypatch.setenv("STAAL_TEST_POOL_AHEAD", "1")
    assert pool_ahead(3) == 3


def test_with_kill_points_on_the_test_variable_sets_the_workers_ahead(monkeypatch):
    monkeypatch.setenv("STAAL_TEST_KILL_POINTS", "1")
    monkeypatch.setenv("STAAL_TEST_POOL_AHEAD", "1")
    assert pool_ahead(3) == 1
    monkeypatch.delenv("STAAL_TEST_POOL_AHEAD")
    assert pool_ahead(3) == 3


@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_a_number_of_workers_ahead_that_is_no_whole_number_of_at_least_one_is_refused_by_name(
        monkeypatch, value):
    monkeypatch.setenv("STAAL_TEST_KILL_POINTS", "1")
    monkeypatch.setenv("STAAL_TEST_POOL_AHEAD", value)
    with pytest.raises(ValueError, match="STAAL_TEST_POOL_AHEAD must be a whole number"):
        pool_ahead(3)


def test_a_pause_is_ignored_without_kill_points_and_elsewhere_than_where_it_is_set(
        monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("STAAL_PAUSE_AT", "supervisor:inputs")
    monkeypatch.setenv("STAAL_PAUSE_FIFO", str(tmp_path / "absent"))  # opening it would fail
    monkeypatch.delenv("STAAL_TEST_KILL_POINTS", raising=False)
    kill_point("supervisor", "inputs")
    monkeypatch.setenv("STAAL_TEST_KILL_POINTS", "1")
    kill_point("supervisor", "reserve")
    kill_point("worker", "inputs")
    assert "paused" not in capsys.readouterr().err
