"""The bound on calls in progress (supervisor/calls/busy_bound.py, seed 000
section 5): 4 x max_concurrent_runs + 16; a call past it is busy, counted
in the metrics under its tool, a resource read under none."""

from __future__ import annotations

from staal.protocol.mcp.results import Refused
from staal.supervisor.calls.busy_bound import BusyBound


class Counted:
    def __init__(self) -> None:
        self.answered: list[tuple[str, object]] = []

    def call_answered(self, tool: str, outcome: object) -> None:
        self.answered.append((tool, outcome))


def test_a_call_past_four_times_the_run_limit_plus_16_in_progress_is_busy_and_counted():
    counted = Counted()
    bound = BusyBound(2, counted)  # type: ignore[arg-type]
    assert bound.refuse(23, "lookup") is None
    refused = bound.refuse(24, "lookup")
    assert refused == Refused("busy", "the server is busy: more than 24 calls are in progress; "
                                      "try again later")
    assert counted.answered == [("lookup", refused)]


def test_a_resource_read_past_the_bound_is_busy_but_counted_under_no_tool():
    counted = Counted()
    assert BusyBound(1, counted).refuse(20) is not None  # type: ignore[arg-type]
    assert counted.answered == []
