"""Quotas stay exact under concurrency (issue 27 item 1): writers on threads
of their own, each an instance with its own connection to the real
PostgreSQL store, reserve, settle and release at once against a tool's
quota (calls and money) and a caller's rate; the result is compared with a
model, the ledger state the file store decides with (supervisor/store/state.py).

Two comparisons. Every reserve the store committed, replayed in the order of
its `seq` (taken while its keys were locked, so every reserve of a key is
in order; an end ordered before a reserve it did not finish before only
frees more), must be one the model allows. And once the writers are done,
the store and the model agree exactly: each tool's and caller's use, and
the capacity left, which a sequential writer then fills to the last call.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from staal.manifest.durations import Duration
from staal.manifest.model import QuotaConfig
from staal.money import Money
from staal.runtime.clock import FixedClock
from staal.supervisor.store.entries import Admission
from staal.supervisor.store.ledger import OverQuota, Reserved, quota_refusal
from staal.supervisor.store.postgres.ledger import PostgresLedger
from staal.supervisor.store.state import LedgerState, caller_key, decode_event
from tests.helpers.pg_store import PgStore
from tests.supervisor.store.test_contract import T0

BOUND = 120  # seconds the writers may take before the test fails
QUOTA = QuotaConfig(window=Duration.parse("1h"), calls=3, money=Money("6", "USD"))
RATE = QuotaConfig(window=Duration.parse("1h"), calls=2)
TOOLS = ("t", "u")
CALLERS = ("a" * 64, "b" * 64)


@dataclass(frozen=True)
class Op:
    """One call of a writer: reserve `money` of `tool` (as `caller`, limited
    by its rate), then keep the run open, settle it charging `charged`, or
    release it."""

    tool: str
    money: int
    caller: str | None
    end: str
    charged: int

    def admission(self) -> Admission | None:
        return None if self.caller is None else Admission(caller=self.caller, rate=RATE)


OPS = st.builds(Op, st.sampled_from(TOOLS), st.integers(0, 4),
                st.sampled_from((None, *CALLERS)), st.sampled_from(("keep", "settle", "release")),
                st.integers(0, 4))


def usd(minor: int) -> tuple[Money, ...]:
    return (Money.from_minor(minor, "USD"),)


def write(ledger: PostgresLedger, ops: list[Op], start: threading.Barrier,
          results: list[object]) -> None:
    start.wait()
    for op in ops:
        got = ledger.reserve_call(op.tool, QUOTA, 1, usd(op.money), None, op.admission())
        results.append(got)
        if isinstance(got, Reserved) and op.end == "settle":
            ledger.settle(got.run, "done", usd(min(op.charged, op.money)))
        elif isinstance(got, Reserved) and op.end == "release":
            ledger.release(got.run)


def replayed(pg: PgStore) -> LedgerState:
    """The model: every committed event applied in `seq` order, each reserve
    first checked against the quotas as the model stands before it."""
    rows = pg.rows("SELECT seq, event FROM staal_runs UNION ALL SELECT seq, event FROM "
                   "staal_ends ORDER BY seq")
    model = LedgerState()
    for seq, data in rows:
        event = decode_event(data)
        if event.TYPE == "reserve":
            admission = None if event.caller is None else Admission(event.caller, rate=RATE)
            refused = quota_refusal(model, event.tool, QUOTA, 1, event.money, admission, T0)
            assert refused is None, (seq, event, refused)
        model.apply(event)
    return model


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.lists(OPS, min_size=1, max_size=6), min_size=2, max_size=4))
def test_concurrent_writers_never_pass_a_quota_and_leave_exactly_the_capacity_the_model_says(
        pg_store: PgStore, programs: list[list[Op]]) -> None:
    clock = FixedClock(T0)  # one window: every reserve counts until the end
    ledgers = [PostgresLedger.open(pg_store.dsn, f"w{i}", clock, lambda text: None)
               for i in range(len(programs))]
    pg_store.execute("DELETE FROM staal_runs")  # each example on an empty ledger
    results: list[list[object]] = [[] for _ in programs]
    start = threading.Barrier(len(programs), timeout=BOUND)
    threads = [threading.Thread(target=write, args=(ledger, ops, start, out))
               for ledger, ops, out in zip(ledgers, programs, results, strict=True)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(BOUND)
        assert [len(out) for out in results] == [len(ops) for ops in programs]  # none failed
        model = replayed(pg_store)
        reserved = {got.run for out in results for got in out if isinstance(got, Reserved)}
        assert reserved == {entry.run for entry in model.runs()}
        for out in results:  # a refusal names a quota the call would pass
            for got in out:
                assert isinstance(got, Reserved | OverQuota)
        check_exact(ledgers[0], model)
    finally:
        for ledger in ledgers:
            ledger.close()


def check_exact(ledger: PostgresLedger, model: LedgerState) -> None:
    """The store's use equals the model's, and a sequential writer gets
    exactly the calls the model has left: for each tool, then each caller."""
    for tool in TOOLS:
        assert ledger.quota_use(tool, QUOTA, T0) == model.quota_use(tool, QUOTA, T0)
    for tool in TOOLS:
        left = QUOTA.calls - model.quota_use(tool, QUOTA, T0).calls  # type: ignore[operator]
        fits = fill(ledger, tool, None)
        assert fits == max(left, 0), tool
    for caller in CALLERS:
        used = model.quota_use(caller_key(caller), RATE, T0).calls
        assert ledger.over_quota("v", None, 1, (), Admission(caller, rate=RATE)) is None \
            if used < 2 else isinstance(ledger.over_quota("v", None, 1, (),
                                                          Admission(caller, rate=RATE)),
                                        OverQuota)
        assert fill(ledger, "v", caller) == max(RATE.calls - used, 0)  # type: ignore[operator]


def fill(ledger: PostgresLedger, tool: str, caller: str | None) -> int:
    """How many calls of nothing fit before the quota (or rate) refuses."""
    admission = None if caller is None else Admission(caller, rate=RATE)
    quota = QUOTA if caller is None else None
    count = 0
    while isinstance(ledger.reserve_call(tool, quota, 1, (), None, admission), Reserved):
        count += 1
        assert count <= 3  # no quota here holds more
    return count
