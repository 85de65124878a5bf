"""One restarting supervisor for the long-lived children (the zygote, the
provider verifier): when a child that died is started again, on a fake
clock. Only a child that came up once is restarted; restarts wait for the
backoff; a start that fails is a death; closing cancels the restart due."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from staal.runtime.backoff import Backoff
from staal.runtime.transitions import IllegalTransition
from staal.supervisor.workers.restarting import ChildState, Restarting


@dataclass
class Timer:
    when: float
    callback: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class FakeClock:
    """A scheduler whose time moves only when told; due timers fire then."""

    now: float = 100.0
    timers: list[Timer] = field(default_factory=list)

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(self.now + delay, callback)
        self.timers.append(timer)
        return timer

    def advance(self, seconds: float) -> None:
        self.now += seconds
        due = [t for t in self.timers if t.when <= self.now and not t.cancelled]
        self.timers = [t for t in self.timers if t not in due and not t.cancelled]
        for timer in due:
            timer.callback()


@dataclass
class Child:
    """The owner: counts its starts, can be made to fail them, and hears
    every death and every state."""

    clock: FakeClock = field(default_factory=FakeClock)
    starts: int = 0
    failing: bool = False
    lost: list[str] = field(default_factory=list)
    states: list[ChildState] = field(default_factory=list)
    life: Restarting = field(init=False)

    def __post_init__(self) -> None:
        self.life = Restarting(start=self.start, lost=self.on_lost, moved=self.states.append,
                               backoff=Backoff(first=0.5, cap=2.0, quiet=60.0),
                               scheduler=self.clock)

    def start(self) -> None:
        if self.failing:
            raise OSError("no more processes")
        self.starts += 1

    def on_lost(self, how: str) -> None:
        self.lost.append(how)
        self.life.died()


def up_then_dead(child: Child) -> float | None:
    child.life.move("up")
    return child.life.died()


def test_a_first_child_that_dies_before_it_is_up_is_not_started_again():
    child = Child()
    assert child.life.died() is None
    child.clock.advance(3600)
    assert child.life.state is ChildState.FAILED and child.starts == 0
    assert child.clock.timers == []


def test_a_child_that_was_up_is_started_again_at_once_then_after_a_doubling_backoff():
    child = Child()
    delays = []
    for _ in range(4):
        delays.append(up_then_dead(child))
        assert child.life.state is ChildState.REPLACING
        before = child.starts
        child.clock.advance(delays[-1] or 0.0)
        assert child.starts == before + 1 and child.life.state is ChildState.BOOTING
    assert delays == [0.0, 0.5, 1.0, 2.0]


def test_a_restart_is_not_started_before_its_backoff_has_passed():
    child = Child()
    up_then_dead(child)
    child.clock.advance(0)
    assert up_then_dead(child) == 0.5
    child.clock.advance(0.4)
    assert child.starts == 1 and child.life.state is ChildState.REPLACING
    child.clock.advance(0.1)
    assert child.starts == 2


def test_the_backoff_starts_over_after_a_quiet_spell():
    child = Child()
    up_then_dead(child)
    child.clock.advance(0)
    assert up_then_dead(child) == 0.5
    child.clock.advance(61)
    assert up_then_dead(child) == 0.0


def test_a_start_that_fails_is_a_death_and_is_tried_again_after_the_backoff():
    child = Child(failing=True)
    up_then_dead(child)
    child.clock.advance(0)
    assert child.lost == ["could not be started: no more processes"]
    assert child.life.state is ChildState.REPLACING
    child.failing = False
    child.clock.advance(0.5)
    assert child.starts == 1 and child.life.state is ChildState.BOOTING


def test_closing_cancels_the_restart_that_was_due():
    child = Child()
    up_then_dead(child)
    child.life.close()
    child.clock.advance(3600)
    assert child.starts == 0 and child.life.state is ChildState.CLOSED
    assert child.life.died() is None  # a child that ends after the close is not replaced


def test_the_owner_is_told_every_state_the_child_moves_to():
    child = Child()
    up_then_dead(child)
    child.clock.advance(0)
    child.life.move("up")
    child.life.close()
    assert child.states == [ChildState.UP, ChildState.REPLACING, ChildState.BOOTING,
                            ChildState.UP, ChildState.CLOSED]


def test_a_child_that_is_up_cannot_come_up_again():
    child = Child()
    child.life.move("up")
    with pytest.raises(IllegalTransition):
        child.life.move("up")


def test_a_backoff_that_waits_from_the_first_failure_doubles_from_its_first_step():
    waits = Backoff(first=1.0, cap=4.0, at_once=0)
    assert [waits.strike(t) for t in range(5)] == [1.0, 2.0, 4.0, 4.0, 4.0]
    assert [waits.after(n) for n in (1, 2, 3)] == [1.0, 2.0, 4.0]
