"""What the server holds of each tool once the start-up check passed: its
manifest entry, the argument rules and schema the check returned (the
supervisor never imports a program), and the worst case a run of it holds
in the ledger until it settles.
"""

from __future__ import annotations

from dataclasses import dataclass

from staal.inputs.types import Description
from staal.manifest.model import Tool
from staal.money import Money
from staal.records.record import Json
from staal.supervisor.store.entries import Admission


@dataclass
class ToolRuntime:
    tool: Tool
    inputs: Description
    schema: dict[str, Json]
    worst_case: tuple[Money, ...]
    running: int = 0

    @property
    def capabilities(self) -> tuple[str, ...]:
        return tuple(self.tool.grants)


def worst_case(tool: Tool, grants: str | None = None) -> tuple[Money, ...]:
    """One run's worst-case spend, per currency: over the money grants of
    its grant set, max, or each times uses (seed 000 section 6)."""
    totals: dict[str, Money] = {}
    walked = (inner for grant in tool.grant_set(grants).values() for inner in grant.walk())
    for grant in walked:
        if not grant.spec.money:
            continue
        worst = grant.worst_case()
        if worst is not None:
            totals[worst.currency] = totals.get(worst.currency, Money.zero(worst.currency)) + worst
    return tuple(totals[c] for c in sorted(totals))


def money_held(runtime: ToolRuntime, admission: Admission | None) -> tuple[Money, ...]:
    """What a run holds until it settles: the worst case of its grant set."""
    if admission is None or admission.grants is None:
        return runtime.worst_case
    return worst_case(runtime.tool, admission.grants)


def busy_text(limit: int, running: int, runtime: ToolRuntime) -> str | None:
    """Why a call is refused busy with `running` runs in progress, the
    server's `limit` and the tool's own (None: it is not)."""
    if running >= limit:
        return (f"the server is busy: {limit} runs are in progress, its limit; "
                "try again later")
    tool_limit = runtime.tool.max_concurrent_runs
    if tool_limit is not None and runtime.running >= tool_limit:
        return (f"the server is busy: tool '{runtime.tool.name}' already has {tool_limit} "
                "runs in progress, its limit; try again later")
    return None
