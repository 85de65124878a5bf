"""State machines with their transitions as data: a table from (state,
event) to the next state, and one way to move through it. A move the
table does not hold is a bug in the caller, raised as `IllegalTransition`
instead of leaving the machine in a state nobody planned for. The protocol
connection and the supervisor's worker pool both use it."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import TypeVar

from staal.errors import StaalError


class IllegalTransition(StaalError):
    """An event the machine's state does not allow (answering a call twice,
    running a worker that is already running)."""

    kind = "illegal_transition"


State = TypeVar("State", bound=Enum)
Event = TypeVar("Event", bound=str)


def advance(table: Mapping[tuple[State, Event], State], state: State, event: Event) -> State:
    """The state `table` moves `state` to on `event`."""
    try:
        return table[(state, event)]
    except KeyError:
        raise IllegalTransition(f"{event} is not allowed in state {state.value}") from None
