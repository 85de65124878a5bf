"""State machines with their transitions as data: a table from (state,
event) to the next state, and one way to move through it. A move the
table does not hold is a bug in the caller, raised as `IllegalTransition`
instead of leaving the machine in a state nobody planned for. The protocol
connection and the supervisor's worker pool both use it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from staal.errors import StaalError


class IllegalTransition(StaalError):
    """An event the machine's state does not allow (answering a call twice,
    running a worker that is already running)."""

    kind = "illegal_transition"


def advance(table: Mapping[tuple[Any, str], Any], state: Any, event: str) -> Any:
    try:
        return table[(state, event)]
    except KeyError:
        raise IllegalTransition(f"{event} is not allowed in state {state.value}") from None
