"""Running one scenario's enumeration: record it, build its states, try
them (all, or a bounded sample of them)."""

from __future__ import annotations

import base64
import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from staal.supervisor.store.ledger import LEDGER_FILE
from tests.powerloss.disk import Disk
from tests.powerloss.explore import Candidate, Outcome, candidates, read_recording, try_state
from tests.powerloss.scenarios import Scenario, prepare, record


@dataclass
class Explored:
    scenario: Scenario
    points: int = 0
    states: int = 0
    found: list[Candidate] = field(default_factory=list)
    tried: list[Outcome] = field(default_factory=list)
    # The processes whose operations the recording holds (server, worker).
    writers: int = 0
    # For each fsync of the ledger in the recorded phase, how many reserve
    # events it made durable (group commit: more than one when calls share it).
    reserves_per_flush: list[int] = field(default_factory=list)
    # The process that created each journal in the recorded phase, in order
    # (a warm worker's second run: one pid twice).
    journal_creators: list[int] = field(default_factory=list)

    @property
    def violations(self) -> list[Outcome]:
        return [outcome for outcome in self.tried if outcome.problems]


Choose = Callable[[list[Candidate]], list[Candidate]]


def every(found: list[Candidate]) -> list[Candidate]:
    return found


def spread(count: int) -> Choose:
    """`count` states spread evenly over the crash points, first and last
    included: a bounded sample for the default test run."""
    def choose(found: list[Candidate]) -> list[Candidate]:
        if len(found) <= count:
            return found
        return [found[round(i * (len(found) - 1) / (count - 1))] for i in range(count)]
    return choose


def none(found: list[Candidate]) -> list[Candidate]:
    return []


def explore(scenario: Scenario, choose: Choose = every, progress: bool = False) -> Explored:
    ctx = prepare(scenario)
    try:
        snapshot = Disk.snapshot(ctx.journals)
        record(scenario, ctx)
        found, points = candidates(ctx, snapshot)
        during = read_recording(ctx.recording)[1]
        explored = Explored(scenario, points, len(found), found, writers=len(snapshot.writers),
                            reserves_per_flush=reserves_per_flush(during),
                            journal_creators=[op["pid"] for op in during if op["op"] == "open"
                                              and op["created"] and op["path"].endswith(".journal")])
        chosen = choose(found)
        for number, candidate in enumerate(chosen, start=1):
            outcome = try_state(scenario, ctx, candidate)
            explored.tried.append(outcome)
            if progress:
                verdict = "ok" if not outcome.problems else "VIOLATION " + "; ".join(outcome.problems)
                print(f"{scenario.name} {number}/{len(chosen)} (crash points "
                      f"{candidate.points[0]}..{candidate.points[-1]}): {verdict}",
                      file=sys.stderr, flush=True)
        return explored
    finally:
        ctx.payments.stop()
        shutil.rmtree(ctx.workdir, ignore_errors=True)


def reserves_per_flush(during: list[dict[str, Any]]) -> list[int]:
    """Per fsync of the ledger among the recorded operations, the reserve
    events written since the one before."""
    flushes, written = [], 0
    for op in during:
        if not str(op.get("path", "")).endswith("/" + LEDGER_FILE):
            continue
        if op["op"] == "write":
            lines = base64.b64decode(op["data"]).splitlines()
            written += sum(1 for line in lines if json.loads(line).get("event") == "reserve")
        elif op["op"] == "fsync":
            flushes.append(written)
            written = 0
    return flushes
