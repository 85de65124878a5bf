"""The model's transitions, rule for rule the code's; each names the function
it stands for. `successors` yields every step enabled in a state, as
(label, progress, next state): progress steps are the ones the liveness check
may rely on (time passing, the protocol's own steps, the database coming
back), not faults nor an instance coming back (checks.py).

Each step is one transaction of the code (or one step of a process with no
row written), so a database restart between steps loses nothing: every row
in `State` is committed. Where the code reads in one transaction and acts in
another (a takeover reads `now`, then takes), the model reads and acts in
one step (docs/lease-model.md says what that leaves out).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

from tests.lease_model.plan import in_doubt, plan
from tests.lease_model.state import (
    AFTER_NOTHING,
    AFTER_SETTLE,
    AFTER_TAKE,
    END,
    HEADER,
    HELD,
    INTENT,
    LOST,
    NEXT_ACTION,
    NEXT_END,
    NEXT_HEADER,
    NEXT_INTENT,
    NEXT_OUTCOME,
    NEXT_RELEASE,
    NEXT_SETTLE,
    NEXT_WAIT,
    OUTCOME,
    PAUSED,
    UP,
    Budget,
    Config,
    Proc,
    Run,
    State,
)

T = TypeVar("T")

Step = tuple[str, bool, State]

# A process is an instance's current one ("cur") or one left over ("stale").
CUR, STALE = "cur", "stale"


def successors(s: State, c: Config) -> Iterator[Step]:
    yield from _environment(s, c)
    for i in range(c.instances):
        for which, p in ((CUR, s.procs[i]), (STALE, s.stale[i])):
            if p is None or p.status != UP:
                continue
            yield from _process_steps(s, c, i, which, p)


# -- helpers ------------------------------------------------------------------

def proc_of(s: State, i: int, which: str) -> Proc | None:
    return s.procs[i] if which == CUR else s.stale[i]


def _with_proc(s: State, i: int, which: str, p: Proc | None) -> State:
    if which == CUR:
        return s._replace(procs=_put(s.procs, i, p))
    return s._replace(stale=_put(s.stale, i, p))


def _put(items: tuple[T, ...], i: int, value: T) -> tuple[T, ...]:
    return (*items[:i], value, *items[i + 1:])


def stamp(s: State, c: Config, i: int) -> int:
    """Stamper.stamp: the later of the instance's clock and the ledger's last
    time (read from staal_head by the transaction's catch-up)."""
    return max(c.skews[i], s.head)


def fenced(s: State, i: int, p: Proc, run: int) -> bool:
    """What every write's condition tests (journal_rows._OWNED and
    PostgresLedger._end): the run's owner is this instance and the
    instance's row holds this process's token."""
    return s.runs[run].owner != i or not p.token_current


def _hold(p: Proc, run: int, nxt: str | None, rows: int = 0) -> Proc:
    """The process holds `run`, doing `nxt` next with `rows` rows in its
    copy of the journal (None: it lets the run go)."""
    held = tuple(h for h in p.held if h[0] != run)
    if nxt is not None:
        held = tuple(sorted((*held, (run, nxt, rows))))
    return p._replace(held=held)


def _set_run(s: State, run: int, r: Run) -> State:
    return s._replace(runs=_put(s.runs, run, r))


def _claim(s: State, c: Config, i: int, which: str, p: Proc, runs: list[int]) -> State:
    """RunsInFlight.claim then plan_taken / plan_recovery: the runs this
    process does not hold yet are planned by recovery's rules and held."""
    for run in runs:
        if any(h[0] == run for h in p.held):
            continue
        nxt = plan(s.runs[run], c.variant)
        if nxt is not None:
            p = _hold(p, run, nxt, len(s.runs[run].journal))
    return _with_proc(s, i, which, p)


# -- the world: faults, restarts, time, operators ---------------------------

def _environment(s: State, c: Config) -> Iterator[Step]:
    b = s.budget
    if _may_tick(s, c):
        yield "tick", True, _tick(s, c)
    if s.db_up and b.db_restarts:
        yield "database restarts (committed rows survive)", False, s._replace(
            db_up=False, budget=b._replace(db_restarts=b.db_restarts - 1))
    if not s.db_up:
        yield "database is back", True, s._replace(db_up=True)
    for i in range(c.instances):
        yield from _instance_faults(s, c, i)
    for run, r in enumerate(s.runs):
        if s.db_up and r.waiting and not r.end and in_doubt(r.journal):
            # resolve_rows.answer_in_store: the answer is the run's next row
            # and its waiting record goes, in one transaction, unfenced.
            yield f"operator answers run {run}", False, _set_run(
                s, run, r._replace(journal=r.journal + "A", waiting=False))


def _instance_faults(s: State, c: Config, i: int) -> Iterator[Step]:
    b, p, old = s.budget, s.procs[i], s.stale[i]
    if p is not None and b.kills:
        yield f"kill instance {i}", False, _with_proc(s, i, CUR, None)._replace(
            budget=b._replace(kills=b.kills - 1))
    if old is not None and b.kills:
        yield f"kill instance {i}'s old process", False, _with_proc(s, i, STALE, None)._replace(
            budget=b._replace(kills=b.kills - 1))
    if p is not None and p.status == UP and b.pauses:
        yield f"pause instance {i}", False, _with_proc(s, i, CUR, p._replace(status=PAUSED))._replace(
            budget=b._replace(pauses=b.pauses - 1))
    for which, q in ((CUR, p), (STALE, old)):
        if q is not None and q.status == PAUSED:
            yield f"wake instance {i} ({which})", False, _with_proc(s, i, which, q._replace(status=UP))
    if p is None and s.db_up:
        yield f"restart instance {i}", False, _start(s, c, i, s.budget)
    if p is not None and p.status == PAUSED and old is None and b.duplicates and s.db_up:
        # Another process registers the same instance while this one is
        # paused (two hosts with one name): lease.py's LOST case.
        kept = p._replace(token_current=c.variant.register_keeps_token)
        started = _start(_with_proc(s, i, STALE, kept), c, i, b._replace(duplicates=b.duplicates - 1))
        yield f"a second process registers instance {i}", False, started


def _start(s: State, c: Config, i: int, budget: Budget) -> State:
    """PostgresLedger.open -> register_instance (a new token, a lease from
    the instance's own clock, not the ledger's time), then recovery at start
    (at_start.plan_recovery over ledger.mine(): the runs the rows say are
    this instance's), the process starting until its recovery is over."""
    leases = _put(s.leases, i, c.skews[i] + c.lease)
    fresh = Proc(UP, True, HELD, False, True, AFTER_NOTHING, (), starting=True)
    s = _with_proc(s._replace(leases=leases, budget=budget), i, CUR, fresh)
    mine = [run for run, r in enumerate(s.runs) if r.owner == i and not r.end]
    return _claim(s, c, i, CUR, fresh, mine)


def _may_tick(s: State, c: Config) -> bool:
    """LeaseKeeper.keep renews every third of the lease, from the lease's
    registration on (start-up included): time moves on only once every
    running process holding its lease tried a renewal since the last tick (a
    paused one is exempt: that is what a pause is; so, in the code before
    issue 27 item 6, was one still starting)."""
    return all(p.renewed for p in (*s.procs, *s.stale)
               if p is not None and p.status == UP and p.lease == HELD
               and not (p.starting and c.variant.no_renew_while_starting))


def _tick(s: State, c: Config) -> State:
    def back(t: int | None) -> int | None:
        return None if t is None else max(t - 1, c.floor)

    def proc(p: Proc | None) -> Proc | None:
        return None if p is None else p._replace(renewed=False)

    return s._replace(leases=tuple(back(t) for t in s.leases),
                      head=max(s.head - 1, min(c.skews)),
                      procs=tuple(proc(p) for p in s.procs), stale=tuple(proc(p) for p in s.stale))


# -- a running process --------------------------------------------------------

def _process_steps(s: State, c: Config, i: int, which: str, p: Proc) -> Iterator[Step]:
    # LeaseKeeper.renew, then (awaited) Takeover.take_over: one step here.
    if not (p.starting and c.variant.no_renew_while_starting):
        label, progress, renewed = _renew(s, c, i, which, p)
        q = proc_of(renewed, i, which)
        assert q is not None
        if q.after == AFTER_TAKE:
            more, _, renewed = _take_over(renewed, c, i, which, q)
            label = f"{label}; {more}"
        yield label, progress, renewed
    if p.after == AFTER_SETTLE and s.db_up:
        yield from _settle_in_place(s, c, i, which, p)
    if p.lease == HELD and not p.starting and s.db_up and s.budget.runs:
        yield from _reserve(s, c, i, which, p)
    for run, nxt, rows in p.held:
        yield _run_step(s, c, i, which, p, run, nxt, rows)
    if p.starting and not p.held:
        # Recovery at start is over (every run it held let go): Server.started
        # -> LeaseKeeper.serving, the lease takes over as it renews from now on.
        yield f"instance {i} ({which}) started", True, _with_proc(
            s, i, which, p._replace(starting=False))


def _renew(s: State, c: Config, i: int, which: str, p: Proc) -> Step:
    """LeaseKeeper.renew -> Lease.renew -> PostgresLedger.renew_lease: the
    lease runs `lease` past the stamp while the token is the row's; else
    LOST for good (the server stops taking calls). A store out of reach
    leaves the lease to run down."""
    if not s.db_up:
        return f"instance {i} ({which}) fails to renew", True, _with_proc(
            s, i, which, p._replace(renewed=True, renew_ok=False))
    if not p.token_current:
        return f"instance {i} ({which}) finds its lease lost", True, _with_proc(
            s, i, which, p._replace(renewed=True, renew_ok=False, lease=LOST,
                                    after=AFTER_NOTHING))
    leases = _put(s.leases, i, stamp(s, c, i) + c.lease)
    # A starting lease only renews (LeaseState.STARTING): no takeover, no
    # settling in place until the process serves.
    renewed = p._replace(renewed=True, renew_ok=True,
                         after=AFTER_NOTHING if p.starting else AFTER_TAKE)
    return f"instance {i} ({which}) renews", True, _with_proc(
        s._replace(leases=leases), i, which, renewed)


def _reserve(s: State, c: Config, i: int, which: str, p: Proc) -> Iterator[Step]:
    """PostgresLedger.reserve_call: a new run, owned by this instance; its
    stamp moves the ledger's last time (_stamp). Not fenced: a process
    replaced but not yet told (its next renewal) may still reserve."""
    run = len(s.runs)
    r = Run(owner=i, journal="", end="", waiting=False, actions=0, ends=0, fenced_writes=0,
            stolen=0)
    b = s.budget._replace(runs=s.budget.runs - 1)
    s2 = s._replace(runs=(*s.runs, r), head=stamp(s, c, i), budget=b)
    yield f"instance {i} ({which}) reserves run {run}", False, _with_proc(
        s2, i, which, _hold(p, run, NEXT_HEADER))


def _take_over(s: State, c: Config, i: int, which: str, p: Proc) -> Step:
    """Takeover.take_over -> Lease.take_over -> JournalRows.take_over(now),
    under the advisory lock: only an instance whose row holds its token and
    whose own lease runs at `now` takes; it takes every unended run of each
    other instance whose lease ran out before `now` (by the `now` it read,
    its own clock or the ledger's last time), but for the runs something in
    this process holds (RunsInFlight.held: a call of its own, or its
    recovery, still runs it; it is taken at a later takeover, once let
    go), then claims and plans them.
    The code reads `now` (ledger.now_ms) in a transaction before the
    takeover's; the model reads it in the same step (docs/lease-model.md).
    Called while the store answers: one that fails takes nothing."""
    now, done = stamp(s, c, i), p._replace(after=AFTER_SETTLE)
    label = f"instance {i} ({which}) takes over at now {now:+d}"
    if not s.db_up:
        return label + " (store failed)", True, _with_proc(s, i, which, done)
    own = s.leases[i]
    if not p.token_current or own is None or own < now:
        return label + " (not live itself: takes nothing)", True, _with_proc(s, i, which, done)
    dead = {j for j in range(c.instances) if j != i and _dead(s.leases[j], now, c)}
    taken = [run for run, r in enumerate(s.runs) if r.owner in dead and not r.end
             and (c.variant.takeover_takes_held or all(h[0] != run for h in p.held))]
    for run in taken:
        r = s.runs[run]
        stolen = r.stolen + (1 if _alive_and_renewing(s, c, r.owner) else 0)
        s = _set_run(s, run, r._replace(owner=i, stolen=stolen))
    return f"{label}: runs {taken}", True, _claim(s, c, i, which, done, taken)


def _dead(lease: int | None, now: int, c: Config) -> bool:
    if c.variant.takeover_released_only:
        return lease is None
    return lease is not None and lease < now


def _alive_and_renewing(s: State, c: Config, j: int) -> bool:
    """Not a rule of the code: the ghost the live-keeps-its-runs check reads.
    The instance's process runs, holds its lease, renewed it since the last
    tick, and by its own clock the lease has not run out, starting or
    serving. In the code before issue 27 item 6 a starting process has no
    renewal to go by: running, it counts as alive (that variant is checked
    without pauses, so running means it never stopped)."""
    p, lease = s.procs[j], s.leases[j]
    if p is None or p.status != UP or p.lease != HELD or not p.token_current:
        return False
    if p.starting and c.variant.no_renew_while_starting:
        return p.renew_ok
    return p.renewed and p.renew_ok and lease is not None and lease >= c.skews[j]


def _settle_in_place(s: State, c: Config, i: int, which: str, p: Proc) -> Iterator[Step]:
    """Takeover.settle_in_place after a renewal that held: this instance's
    own unended runs (mine_unsettled: by the rows' owner), none waiting
    (all_waiting), none held here (claim_unattended), planned as at start."""
    mine = [run for run, r in enumerate(s.runs) if r.owner == i and not r.end and not r.waiting
            and all(h[0] != run for h in p.held)]
    done = p._replace(after=AFTER_NOTHING)
    yield f"instance {i} ({which}) settles in place runs {mine}", True, _claim(
        s, c, i, which, done, mine)


_APPENDS = {NEXT_HEADER: (HEADER, NEXT_INTENT), NEXT_INTENT: (INTENT, NEXT_ACTION),
            NEXT_OUTCOME: (OUTCOME, NEXT_END), NEXT_END: (END, NEXT_SETTLE)}


def _run_step(s: State, c: Config, i: int, which: str, p: Proc, run: int, nxt: str,
              rows: int) -> Step:
    """One step of a run this process holds: the call's, or recovery's."""
    label = f"instance {i} ({which}) run {run}: {nxt}"
    r = s.runs[run]
    if nxt == NEXT_ACTION:
        # The op's action, after its intent's row committed: no row, no
        # check; the outside world sees it.
        return label, True, _with_proc(_set_run(s, run, r._replace(actions=r.actions + 1)),
                                       i, which, _hold(p, run, NEXT_OUTCOME, rows))
    if not s.db_up:
        # A write the store could not commit: the run is cut off, left
        # unsettled for settling in place (run_crashes, Takeover).
        return label + " (store failed: left)", True, _with_proc(s, i, which, _hold(p, run, None))
    bad = fenced(s, i, p, run)
    if nxt in _APPENDS:
        # JournalRows.append: check_owned, then the line after the last row
        # (not the line the writer's copy expects: the fix variant checks it).
        moved = c.variant.append_checks_line and len(r.journal) != rows
        if (bad and not c.variant.skip_append_fence) or moved:
            return label + " (fenced)", True, _with_proc(s, i, which, _hold(p, run, None))
        letter, then = _APPENDS[nxt]
        r = r._replace(journal=r.journal + letter, fenced_writes=r.fenced_writes + bad)
        return label, True, _with_proc(_set_run(s, run, r), i, which,
                                       _hold(p, run, then, len(r.journal)))
    if nxt == NEXT_WAIT:
        # RunNotes.wait (note_rows): check_owned, ON CONFLICT DO NOTHING;
        # the run stops, unsettled, until an operator answers.
        if bad and not c.variant.skip_append_fence:
            return label + " (fenced)", True, _with_proc(s, i, which, _hold(p, run, None))
        r = r._replace(waiting=True, fenced_writes=r.fenced_writes + bad)
        return label, True, _with_proc(_set_run(s, run, r), i, which, _hold(p, run, None))
    assert nxt in (NEXT_SETTLE, NEXT_RELEASE)
    return _end(s, c, i, which, p, run, nxt, bad, label)


def _end(s: State, c: Config, i: int, which: str, p: Proc, run: int, kind: str, bad: bool,
         label: str) -> Step:
    """PostgresLedger._end: LedgerState.check refuses a second end (the
    ledger caught up under the head lock), and the insert joins the run's
    owner and the instance's token: a stale writer inserts nothing."""
    r = s.runs[run]
    unchecked = c.variant.skip_end_fence
    if (r.end and not unchecked) or (bad and not unchecked):
        return label + " (refused)", True, _with_proc(s, i, which, _hold(p, run, None))
    r = r._replace(end=kind, ends=r.ends + 1, fenced_writes=r.fenced_writes + bad)
    return label, True, _with_proc(_set_run(s, run, r), i, which, _hold(p, run, None))
