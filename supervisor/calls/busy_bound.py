"""The bound on calls in progress (seed 000 section 5): with more than
4 x max_concurrent_runs + 16 calls in progress (being checked or running),
a call is busy at once, before it reaches the pipeline. Each transport
counts its calls in progress and asks (`refuse`)."""

from __future__ import annotations

from staal.protocol.mcp.results import Refused
from staal.supervisor.telemetry.metrics import Observer


class BusyBound:
    def __init__(self, max_concurrent_runs: int, observer: Observer) -> None:
        self.bound = 4 * max_concurrent_runs + 16
        self.observer = observer

    def refuse(self, in_progress: int, tool: str | None = None) -> Refused | None:
        """The refusal of a call with `in_progress` calls in progress, or
        None. `tool`: the call's, counted in the metrics (None: a resource read)."""
        if in_progress < self.bound:
            return None
        refused = Refused("busy", f"the server is busy: more than {self.bound} calls are in "
                                  "progress; try again later")
        if tool is not None:
            self.observer.call_answered(tool, refused)
        return refused
