"""Which runs something in this process is running (supervisor/calls/in_flight.py):
a run has one holder at a time, moves only as the table says, and settling
in place never claims a run whose reservation is still under way."""

from __future__ import annotations

import threading

import pytest

from staal.runtime.transitions import IllegalTransition
from staal.supervisor.calls.in_flight import Holder, RunsInFlight

BOUND = 30.0


def test_a_run_nothing_holds_cannot_be_let_go() -> None:
    # Its table is walked with the other lifecycles' (tests/supervisor/workers/test_pool.py).
    with pytest.raises(IllegalTransition) as caught:
        RunsInFlight().let_go(["never held"])
    assert caught.value.message == "let_go is not allowed in state free"


def test_a_claim_takes_only_the_free_runs_and_a_run_let_go_is_free_again() -> None:
    flying = RunsInFlight()
    with flying.reserving() as hold:
        hold("called")
    assert flying.claim(["called", "left"]) == ["left"]
    assert flying.claim(["left"]) == []  # one holder at a time
    assert flying.holder("called") is Holder.CALL and flying.holder("left") is Holder.RECOVERY
    flying.let_go(["called", "left"])
    assert flying.holder("called") is Holder.FREE and flying.claim(["called"]) == ["called"]


def test_an_unattended_claim_waits_for_the_reservation_under_way_and_skips_its_run() -> None:
    flying = RunsInFlight()
    entered, committed = threading.Event(), threading.Event()

    def reserve() -> None:
        with flying.reserving() as hold:
            entered.set()
            # The ledger has committed the run; its call does not hold it yet.
            assert committed.wait(BOUND)
            hold("reserved")

    reserving = threading.Thread(target=reserve)
    reserving.start()
    assert entered.wait(BOUND)
    claimed: list[str] = []
    claiming = threading.Thread(target=lambda: claimed.extend(
        flying.claim_unattended(["reserved", "left"], BOUND)))
    claiming.start()
    committed.set()
    reserving.join(BOUND)
    claiming.join(BOUND)
    assert claimed == ["left"]
    assert flying.holder("reserved") is Holder.CALL


def test_an_unattended_claim_gives_up_on_a_reservation_that_does_not_end_and_claims_nothing(
        ) -> None:
    flying = RunsInFlight()
    with flying.reserving():
        assert flying.claim_unattended(["left"], 0.01) == []
        assert flying.holder("left") is Holder.FREE
    with flying.reserving() as hold:  # reservations go on after it
        hold("next")
    assert flying.claim_unattended(["left"], BOUND) == ["left"]


def test_a_run_let_go_by_its_holder_is_forgotten_by_what_else_noted_it():
    forgotten: list[str] = []
    runs = RunsInFlight(on_let_go=forgotten.append)
    assert runs.claim(["a", "b"]) == ["a", "b"]  # recovery's: it may settle them, not resume
    runs.let_go(["a"])
    assert forgotten == ["a"] and runs.holder("b") is Holder.RECOVERY
