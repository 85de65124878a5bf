"""Every state a power loss could leave during a recorded scenario, and the
real server started on each (docs/power-loss.md).

A crash may come after any recorded operation. At each such point the disk
model (`disk.py`) gives the states the disk could be in, and the recording
says which refunds the fake service had made (or had received, and may make
for nobody) and which answers the client had received by then. States that
are byte for byte the same, with the same refunds made, are tried once
(with every answer any of them had). For each: the directory is made to
hold exactly that state, the service put back to what it had done, the
real server started on it, and the call repeated through the official
client; then `judge` checks the rules.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from staal.errors import StaalError
from staal.records.appendlog import read_log
from staal.records.ledger_records import LEDGER, Release, Reserve, Settle
from staal.supervisor.store.files import find_journals
from staal.supervisor.store.ledger import LEDGER_FILE, read_ledger
from staal.supervisor.store.lockfile import ServerLock
from tests.crash.harness import ANSWERED, REFUND_OP
from tests.powerloss.disk import Disk, State, write_state
from tests.powerloss.scenarios import Context, Scenario, refund_of

LOCK_WAIT_S = 30.0


@dataclass(frozen=True)
class Refund:
    key: str
    body: str

    @property
    def amount(self) -> int:
        fields = dict(httpx.QueryParams(self.body))
        return int(fields["amount"])


Answer = tuple[int, str | None, tuple[str, ...]]


@dataclass
class Candidate:
    """One distinct state, with what the world outside the disk knew."""

    state: State
    refunds: tuple[Refund, ...]
    # The answers the client had by the crash: (which call, its refund id or
    # None, the runs in the ledger when it was answered).
    answers: set[Answer] = field(default_factory=set)
    points: list[int] = field(default_factory=list)  # the crash points that leave it


@dataclass
class Outcome:
    candidate: Candidate
    problems: list[str]


def read_recording(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The operations before the `begin` mark (the set-up) and after it."""
    lines = [json.loads(line) for line in path.read_text().splitlines() if line]
    [begin] = [i for i, op in enumerate(lines) if op["op"] == "mark" and op["what"] == "begin"]
    return lines[:begin], lines[begin + 1:]


def candidates(ctx: Context, snapshot: Disk) -> tuple[list[Candidate], int]:
    """The distinct states of the recorded phase, and its crash points."""
    before, during = read_recording(ctx.recording)
    resets = [i for i, op in enumerate(before) if _is(op, "reset")]
    kept = before[resets[-1] + 1:] if resets else before
    refunds = [Refund(op["key"], op["body"]) for op in kept if _is(op, "refund")]
    answers: set[Answer] = set()
    found: dict[tuple[State, tuple[Refund, ...]], Candidate] = {}
    points = 0

    received: list[Refund] = []  # POSTs the service has, and has not answered yet

    def crash_here() -> None:
        nonlocal points
        points += 1
        made = {refund.key for refund in refunds}
        in_flight = tuple(r for r in received if r.key not in made)
        # The service may finish a refund it received for nobody: the power
        # went, not the service (as the crash matrix's "refund held").
        worlds = {tuple(refunds), tuple(refunds) + in_flight}
        for state in snapshot.crash_states():
            for world in worlds:
                candidate = found.setdefault((state, world), Candidate(state, world))
                candidate.answers |= answers
                if not candidate.points or candidate.points[-1] != points:
                    candidate.points.append(points)

    crash_here()
    for op in during:
        if _is(op, "end"):
            break
        # A refund received or made, or an answer received, changes what a
        # crash now must keep, though not the disk.
        if _is(op, "refund"):
            refunds.append(Refund(op["key"], op["body"]))
        elif _is(op, "post"):
            received.append(Refund(op["key"], op["body"]))
        elif _is(op, "answered"):
            answers.add((op.get("call", 0), op["refund"], tuple(op["runs"])))
        elif op["op"] == "mark" or not snapshot.apply(op):
            continue
        crash_here()
    return list(found.values()), points


def _is(op: dict[str, Any], what: str) -> bool:
    return op["op"] == "mark" and op["what"] == what


# -- trying one state -------------------------------------------------------------


def restore_service(ctx: Context, refunds: tuple[Refund, ...]) -> None:
    """The service as it was at the crash: the intent, and each refund it
    had made, made again through its API under the same key."""
    ctx.payments.reset()
    ctx.make_intents()
    for refund in refunds:
        answer = httpx.post(ctx.payments.base + "/v1/refunds", content=refund.body, headers={
            "Authorization": f"Bearer {ctx.payments.key}", "Idempotency-Key": refund.key,
            "Content-Type": "application/x-www-form-urlencoded"}, trust_env=False)
        answer.raise_for_status()


def service_refunds(ctx: Context, offset: int) -> list[Refund]:
    """The refunds the service marked in the recording since `offset`."""
    with open(ctx.recording, "rb") as stream:
        stream.seek(offset)
        lines = [json.loads(line) for line in stream.read().splitlines() if line]
    return [Refund(op["key"], op["body"]) for op in lines if _is(op, "refund")]


def try_state(scenario: Scenario, ctx: Context, candidate: Candidate) -> Outcome:
    if ctx.journals.exists():
        # The last state's server is gone (the client waits for its exit),
        # but the lock says so for certain: no process still writes here.
        ServerLock.acquire(ctx.journals, LOCK_WAIT_S).release()
    write_state(candidate.state, ctx.journals)
    offset = ctx.recording.stat().st_size
    restore_service(ctx, candidate.refunds)
    log = ctx.workdir / "state.log"
    log.write_text("")
    seen = ctx.call_all(ctx.env(), "state.log", in_series=scenario.in_series)
    problems = judge(scenario, ctx, candidate, seen, service_refunds(ctx, offset))
    if problems and any(one.get("seen") != ANSWERED for one in seen):
        problems.append("its server said: " + _last_error(log))
    return Outcome(candidate, problems)


def orphans(state: State, scratch: Path) -> list[str]:
    """The runs of journals in `state` that its ledger has no reservation
    for: a state the server refuses to start on (seed 000 section 7)."""
    write_state(state, scratch, files_only=True)
    reserved = {entry.run for entry in read_ledger(scratch / LEDGER_FILE).runs()}
    return sorted(run for run in find_journals(scratch) if run not in reserved)


def _last_error(log: Path) -> str:
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    return lines[-1][:600] if lines else "nothing"


# -- the rules --------------------------------------------------------------------


def judge(scenario: Scenario, ctx: Context, candidate: Candidate, seen: list[dict[str, Any]],
          refunds: list[Refund]) -> list[str]:
    """Seed 000 section 7's rules, on what the server and the service now
    hold: it started and answered each repeat; every run has one reserve and
    at most one settle or release, and none is left unsettled; each refund
    was made once, under the key of a run whose settlement says so; nothing
    answered before the crash is lost."""
    problems: list[str] = []
    for number, one in enumerate(seen):
        if one.get("seen") != ANSWERED or one.get("is_error"):
            problems.append(f"the repeated call {number} was not done: {one.get('seen')} "
                            f"{one.get('text', '')[:300]}")
    try:
        events = read_log(ctx.journals / LEDGER_FILE, LEDGER.decode).records
    except (OSError, StaalError) as exc:
        return [*problems, f"the ledger cannot be read: {exc}"]
    reserves: dict[str, int] = {}
    ends: dict[str, list[Settle | Release]] = {}
    for event in events:
        if isinstance(event, Reserve):
            reserves[event.run] = reserves.get(event.run, 0) + 1
        else:
            ends.setdefault(event.run, []).append(event)
    for run in sorted(set(reserves) | set(ends)):
        if reserves.get(run, 0) != 1:
            problems.append(f"run {run} has {reserves.get(run, 0)} reserves")
        if len(ends.get(run, [])) > 1:
            problems.append(f"run {run} has {len(ends[run])} settles or releases")
        elif not ends.get(run):
            problems.append(f"run {run} is left unsettled")
    problems += judge_service(scenario, refunds, candidate.refunds, ends)
    problems += judge_answers(candidate, seen, set(reserves))
    return problems


def judge_service(scenario: Scenario, refunds: list[Refund], before: tuple[Refund, ...],
                  ends: dict[str, list[Settle | Release]]) -> list[str]:
    """`refunds`: every refund the service holds now (the ones it had made
    by the crash, made again, and those since), with its key."""
    problems = []
    if len(refunds) > scenario.max_refunds:
        problems.append(f"{len(refunds)} refunds at the service, at most {scenario.max_refunds} "
                        "may be made")
    by_key: dict[str, int] = {}
    for refund in refunds:
        if refund.key in by_key:
            problems.append(f"two refunds under key {refund.key}")
        by_key[refund.key] = by_key.get(refund.key, 0) + refund.amount
    settled = {run: e[0] for run, e in ends.items() if isinstance(e[0], Settle)}
    for key in sorted(by_key):
        run = key.removesuffix(f"-{REFUND_OP}")
        if run in settled:
            continue
        # A run settled before the scenario and dropped by compaction since.
        if scenario.drops_settled and any(r.key == key for r in before):
            continue
        problems.append(f"a refund under key {key}, of no settled run in the ledger")
    for run, event in sorted(settled.items()):
        charged = sum(money.minor for money in event.charged)
        if charged != by_key.get(f"{run}-{REFUND_OP}", 0):
            problems.append(f"run {run} settled having charged {charged}, and the service "
                            f"refunded {by_key.get(f'{run}-{REFUND_OP}', 0)} under its key")
    return problems


def judge_answers(candidate: Candidate, seen: list[dict[str, Any]], runs: set[str]) -> list[str]:
    problems = []
    for number, refund, answered_runs in sorted(candidate.answers, key=str):
        lost = sorted(set(answered_runs) - runs)
        if lost:
            problems.append(f"runs {lost} were in the ledger when the client was answered, "
                            "and are lost")
        if refund is not None and refund_of(seen[number]) != refund:
            problems.append(f"call {number} was answered refund {refund} before the crash; "
                            f"its repeat answered {refund_of(seen[number])}")
    return problems

