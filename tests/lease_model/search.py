"""The explicit-state search: breadth first from the initial state over every
enabled step, a visited set of states (each its own canonical form), each
state checked against every safety invariant as it is found; then the
liveness check over the graph found: from every reachable state, a state
where every unfinished run is owned by a live instance is reachable by
progress steps alone (no fault, no paused or killed instance coming back).
A violation keeps the shortest trace that reaches it (breadth first)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tests.lease_model.actions import successors
from tests.lease_model.checks import LIVENESS, SAFETY, owned_by_live
from tests.lease_model.state import Config, State, initial


@dataclass
class Violation:
    invariant: str
    message: str
    trace: list[tuple[str, State]]


@dataclass
class Result:
    states: int
    transitions: int
    depth: int
    violations: list[Violation] = field(default_factory=list)

    def violated(self) -> set[str]:
        return {v.invariant for v in self.violations}


def explore(config: Config, liveness: bool = True, max_states: int = 5_000_000,
            stop_on: str | None = None) -> Result:
    """Every state reachable under `config`'s bound; `stop_on`: stop at the
    first violation of that invariant (a broken variant's test)."""
    start = initial(config)
    index: dict[State, int] = {start: 0}
    states: list[State] = [start]
    parent: list[tuple[int, str]] = [(-1, "start")]
    depth = [0]
    progress: list[list[int]] = [[]]
    transitions = 0
    found: dict[str, Violation] = {}
    queue = deque([0])
    _check(config, start, 0, states, parent, found)
    while queue:
        at = queue.popleft()
        for label, is_progress, nxt in successors(states[at], config):
            transitions += 1
            to = index.get(nxt)
            if to is None:
                if len(states) >= max_states:
                    raise RuntimeError(f"more than {max_states} states: lower the bound")
                to = index[nxt] = len(states)
                states.append(nxt)
                parent.append((at, label))
                depth.append(depth[at] + 1)
                progress.append([])
                _check(config, nxt, to, states, parent, found)
                if stop_on in found:
                    return Result(len(states), transitions, max(depth), list(found.values()))
                queue.append(to)
            if is_progress:
                progress[at].append(to)
    result = Result(len(states), transitions, max(depth), list(found.values()))
    if liveness:
        stuck = _never_reaching_goal(config, states, progress)
        if stuck is not None:
            result.violations.append(Violation(
                LIVENESS, "from this state no progress leads to every unfinished run being "
                "owned by a live instance", _trace(stuck, states, parent)))
    return result


def _check(config: Config, s: State, at: int, states: list[State],
           parent: list[tuple[int, str]], found: dict[str, Violation]) -> None:
    for name, invariant in SAFETY.items():
        if name in found:
            continue
        message = invariant(s, config)
        if message is not None:
            found[name] = Violation(name, message, _trace(at, states, parent))


def _never_reaching_goal(config: Config, states: list[State],
                         progress: list[list[int]]) -> int | None:
    """The first state (breadth-first order) from which no progress path
    reaches the goal; None if there is none."""
    back: list[list[int]] = [[] for _ in states]
    for frm, tos in enumerate(progress):
        for to in tos:
            back[to].append(frm)
    good = [owned_by_live(s, config) for s in states]
    queue = deque(i for i, ok in enumerate(good) if ok)
    while queue:
        at = queue.popleft()
        for frm in back[at]:
            if not good[frm]:
                good[frm] = True
                queue.append(frm)
    return next((i for i, ok in enumerate(good) if not ok), None)


def _trace(at: int, states: list[State], parent: list[tuple[int, str]]) -> list[tuple[str, State]]:
    steps: list[tuple[str, State]] = []
    while at >= 0:
        frm, label = parent[at]
        steps.append((label, states[at]))
        at = frm
    return steps[::-1]
