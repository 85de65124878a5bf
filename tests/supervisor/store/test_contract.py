"""The store's contract (issue 15 item 1): every test here runs against the
file store and the PostgreSQL store, through the `Ledger` interface alone,
and each must give the same answers (seed 000 sections 5-7)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from staal.manifest.durations import Duration
from staal.manifest.model import QuotaConfig
from staal.money import Money
from staal.records.canonical import sha256_hex
from staal.records.ledger_records import OnceHold
from staal.runtime.clock import FixedClock
from staal.supervisor.recovery.forget import ForgetRefused, forget_in_files, forget_in_store
from staal.supervisor.store.entries import RunEntry
from staal.supervisor.store.file_ledger import FileLedger
from staal.supervisor.store.ledger import (
    Admission,
    Different,
    Existing,
    Ledger,
    LedgerBug,
    OverQuota,
    Reserved,
)
from staal.supervisor.store.postgres.ledger import PostgresLedger
from tests.helpers.pg_store import PgStore

T0 = 1_700_000_000_000
HOUR = 3_600_000
QUOTA = QuotaConfig(window=Duration.parse("1h"), calls=2, money=Money("10", "USD"))


class Store:
    """Opens ledgers of one store, all on one clock, collecting warnings."""

    def __init__(self, opener: Callable[[FixedClock, Callable[[str], None]], Any],
                 forgetter: Callable[[str, FixedClock], RunEntry] | None = None) -> None:
        self.clock = FixedClock(T0)
        self.warnings: list[str] = []
        self._opener = opener
        self._forgetter = forgetter
        self._opened: list[Any] = []

    def forget(self, run: str) -> RunEntry:
        """An operator's `staal-supervisor forget` of `run` on this store."""
        assert self._forgetter is not None
        return self._forgetter(run, self.clock)

    def open(self) -> Any:
        ledger = self._opener(self.clock, self.warnings.append)
        self._opened.append(ledger)
        return ledger

    def close_all(self) -> None:
        for ledger in self._opened:
            ledger.close()


@pytest.fixture(params=["file", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "file":
        path = tmp_path / "journals" / "server.ledger"
        made = Store(lambda clock, warn: FileLedger.open(path, clock, warn=warn),
                     lambda run, clock: forget_in_files(path.parent, run, clock))
    else:
        pg: PgStore = request.getfixturevalue("pg_store")
        made = Store(lambda clock, warn: PostgresLedger.open(pg.dsn, "instance-1", clock, warn),
                     lambda run, clock: forget_in_store(pg.dsn, run, clock))
    try:
        yield made
    finally:
        made.close_all()


def usd(amount: str) -> tuple[Money, ...]:
    return (Money(amount, "USD"),)


def hold(key: str = "a", args: str = "1", keep_ms: int | None = HOUR) -> OnceHold:
    return OnceHold(key=key * 64, args=args * 64, keep_ms=keep_ms)


def reserved(ledger: Ledger, tool: str = "t", **kwargs: Any) -> Reserved:
    result = ledger.reserve_call(tool, kwargs.get("quota"), 1, kwargs.get("money", ()),
                                 kwargs.get("once"), kwargs.get("admission"))
    assert isinstance(result, Reserved), result
    return result


def test_the_postgresql_ledger_offers_every_method_of_the_ledger_interface_with_its_signature(
        ) -> None:
    methods = [name for name in vars(Ledger) if not name.startswith("_")]
    assert "mine" in methods and "compact" in methods
    for name in methods:
        assert inspect.signature(getattr(PostgresLedger, name)) == \
            inspect.signature(getattr(Ledger, name)), name


def test_every_run_reserved_settled_or_released_is_read_back_as_it_was_after_reopening(
        store: Store) -> None:
    ledger = store.open()
    a = reserved(ledger, money=usd("5"), once=hold())
    b = reserved(ledger, tool="u")
    c = reserved(ledger)
    store.clock.advance(10)
    ledger.settle(a.run, "done", usd("2"))
    ledger.release(b.run)
    before = ledger.runs()
    ledger.close()
    again = store.open()
    assert again.runs() == before
    assert [e.run for e in again.unsettled()] == [c.run]
    assert [e.run for e in again.mine()] == [a.run, b.run, c.run]
    settled = again.run(a.run)
    assert (settled.state, settled.ended_ms, settled.outcome, settled.charged) == \
        ("settled", T0 + 10, "done", usd("2"))
    assert again.run("f" * 32) is None


def test_a_second_settle_or_a_release_after_a_settle_is_refused_and_changes_nothing(
        store: Store) -> None:
    ledger = store.open()
    run = reserved(ledger).run
    ledger.settle(run, "done", usd("1"))
    with pytest.raises(LedgerBug):
        ledger.settle(run, "failed", usd("9"))
    with pytest.raises(LedgerBug):
        ledger.release(run)
    with pytest.raises(LedgerBug):
        ledger.release("e" * 32)
    ledger.close()
    entry = store.open().run(run)
    assert (entry.state, entry.outcome, entry.charged) == ("settled", "done", usd("1"))


def test_a_once_key_is_held_by_its_run_until_its_keep_ends_then_a_new_run_takes_it(
        store: Store) -> None:
    ledger = store.open()
    first = reserved(ledger, once=hold())
    same = ledger.reserve_call("t", None, 1, (), hold())
    assert isinstance(same, Existing) and same.entry.run == first.run
    other = ledger.reserve_call("t", None, 1, (), hold(args="2"))
    assert isinstance(other, Different) and other.entry.run == first.run
    assert ledger.once_holder("t", "a" * 64).run == first.run
    ledger.settle(first.run, "done", ())
    store.clock.advance(HOUR - 1)
    assert isinstance(ledger.reserve_call("t", None, 1, (), hold()), Existing)
    store.clock.advance(1)
    second = reserved(ledger, once=hold())
    assert second.run != first.run
    assert ledger.once_holder("t", "a" * 64).run == second.run
    assert len(ledger.runs()) == 2


def test_a_released_run_gives_its_once_key_and_its_quota_back(store: Store) -> None:
    ledger = store.open()
    first = reserved(ledger, once=hold(), quota=QUOTA)
    reserved(ledger, quota=QUOTA)
    assert isinstance(ledger.reserve_call("t", QUOTA, 1, (), None), OverQuota)
    ledger.release(first.run)
    assert ledger.once_holder("t", "a" * 64) is None
    again = reserved(ledger, once=hold(), quota=QUOTA)
    assert again.run != first.run


def test_a_quota_refuses_the_call_that_would_exceed_it_and_frees_as_its_window_passes(
        store: Store) -> None:
    ledger = store.open()
    reserved(ledger, quota=QUOTA, money=usd("4"))
    store.clock.advance(1000)
    reserved(ledger, quota=QUOTA, money=usd("4"))
    refused = ledger.reserve_call("t", QUOTA, 1, usd("1"), None)
    assert isinstance(refused, OverQuota) and refused.which == "calls"
    assert refused.frees_at_ms == T0 + HOUR + 1
    assert len(ledger.runs()) == 2
    use = ledger.quota_use("t", QUOTA)
    assert (use.calls, use.money_held) == (2, Money("8", "USD"))
    store.clock.advance(HOUR + 1 - 1000)
    refused = ledger.reserve_call("t", QUOTA, 1, usd("7"), None)
    assert isinstance(refused, OverQuota) and refused.which == "money"
    assert isinstance(ledger.reserve_call("t", QUOTA, 1, usd("6"), None), Reserved)


def test_a_callers_rate_counts_its_runs_of_every_tool_and_its_once_keys_are_its_own(
        store: Store) -> None:
    ledger = store.open()
    a, b = sha256_hex(b"caller a"), sha256_hex(b"caller b")
    rate = QuotaConfig(Duration(HOUR, "1h"), calls=2)

    def admission(caller: str) -> Admission:
        return Admission(caller=caller, profile="p", grants="g", rate=rate)

    reserved(ledger, "t", admission=admission(a))
    reserved(ledger, "u", admission=admission(a))
    refused = ledger.reserve_call("v", None, 1, (), None, admission(a))
    assert isinstance(refused, OverQuota) and refused.scope == "rate"
    made = reserved(ledger, "v", admission=admission(b))
    assert ledger.run(made.run).caller == b


def test_a_clock_behind_the_ledger_stamps_with_the_ledgers_time_and_warns_once(
        store: Store) -> None:
    ledger = store.open()
    first = reserved(ledger)
    store.clock.advance(-5000)
    second = reserved(ledger)
    third = reserved(ledger)
    assert (first.time, second.time, third.time) == (T0, T0, T0)
    assert ledger.now_ms() == T0
    assert len(store.warnings) == 1 and "5000 ms behind the ledger" in store.warnings[0]


def test_compaction_drops_only_runs_no_file_window_or_once_key_keeps(store: Store) -> None:
    ledger = store.open()
    old = reserved(ledger)
    held = reserved(ledger, once=hold(keep_ms=None))
    ledger.settle(old.run, "done", ())
    ledger.settle(held.run, "done", ())
    store.clock.advance(2 * HOUR)
    recent = reserved(ledger, "u")
    result = ledger.compact(set(), {"t": HOUR, "u": HOUR})
    assert (set(result.kept), set(result.dropped)) == ({held.run, recent.run}, {old.run})
    assert [e.run for e in ledger.runs()] == [held.run, recent.run]
    ledger.close()
    again = store.open()
    assert [e.run for e in again.runs()] == [held.run, recent.run]
    assert isinstance(again.reserve_call("t", None, 1, (), hold(keep_ms=None)), Existing)
    assert reserved(again).time == T0 + 2 * HOUR


def test_the_quota_read_before_a_worker_refuses_as_the_reserve_does_and_reserves_nothing(
        store: Store) -> None:
    ledger = store.open()
    calls = QuotaConfig(window=Duration.parse("1h"), calls=2)
    assert ledger.over_quota("t", calls, 1, ()) is None
    first, _ = reserved(ledger, quota=calls), reserved(ledger, quota=calls)
    over = ledger.over_quota("t", calls, 1, ())
    assert isinstance(over, OverQuota) and (over.which, over.scope, over.in_use) == \
        ("calls", "tool", 2)
    assert over.frees_at_ms == T0 + HOUR + 1
    assert len(ledger.runs()) == 2  # reading reserved nothing
    assert ledger.reserve_call("t", calls, 1, (), None) == over  # the reserve says the same
    ledger.release(first.run)
    assert ledger.over_quota("t", calls, 1, ()) is None
    reserved(ledger, quota=calls)
    # Money: a call whose worst case alone passes the limit never fits.
    alone = ledger.over_quota("m", QUOTA, 1, usd("11"))
    assert isinstance(alone, OverQuota) and alone.which == "money" and alone.frees_at_ms is None
    # A caller's rate, over its calls of every tool.
    rate = Admission(caller="c" * 64, rate=QuotaConfig(window=Duration.parse("1h"), calls=1))
    reserved(ledger, "u", admission=rate)
    limited = ledger.over_quota("v", None, 1, (), rate)
    assert isinstance(limited, OverQuota) and limited.scope == "rate"
    assert ledger.over_quota("v", None, 1, (), None) is None  # another caller is not limited
    assert len(ledger.runs()) == 4


def test_a_forgotten_once_key_is_released_for_a_new_run_and_stays_so_after_replay_and_compaction(
        store: Store) -> None:
    ledger = store.open()
    failed = reserved(ledger, once=hold(keep_ms=None), quota=QUOTA, money=usd("4"))
    store.clock.advance(10)
    ledger.settle(failed.run, "failed", usd("3"))
    assert isinstance(ledger.reserve_call("t", QUOTA, 1, (), hold(keep_ms=None)), Existing)
    ledger.close()
    store.clock.advance(10)
    forgotten = store.forget(failed.run)
    assert (forgotten.state, forgotten.outcome, forgotten.forgotten_ms) == \
        ("settled", "failed", T0 + 20)
    again = store.open()  # the ledger replayed
    assert again.once_holder("t", "a" * 64) is None
    assert again.run(failed.run) == forgotten
    use = again.quota_use("t", QUOTA)  # forgetting gives back nothing the run spent
    assert (use.calls, use.money_charged) == (1, Money("3", "USD"))
    fixed = reserved(again, once=hold(keep_ms=None), quota=QUOTA)
    assert fixed.run != failed.run
    again.settle(fixed.run, "done", ())
    assert again.once_holder("t", "a" * 64).run == fixed.run
    store.clock.advance(2 * HOUR)
    # Compaction keeps the forgotten run while its journal is kept, and its forget with it.
    assert set(again.compact({failed.run}, {"t": HOUR}).kept) == {failed.run, fixed.run}
    again.close()
    replayed = store.open()
    assert replayed.run(failed.run).forgotten_ms == T0 + 20
    assert replayed.once_holder("t", "a" * 64).run == fixed.run
    assert replayed.compact(set(), {"t": HOUR}).dropped == (failed.run,)
    assert isinstance(replayed.reserve_call("t", None, 1, (), hold(keep_ms=None)), Existing)


def test_forget_refuses_a_run_not_ended_unknown_released_without_a_key_or_forgotten_and_writes_nothing(
        store: Store) -> None:
    ledger = store.open()
    running = reserved(ledger, once=hold()).run
    released = reserved(ledger, once=hold("b")).run
    ledger.release(released)
    keyless = reserved(ledger).run
    ledger.settle(keyless, "done", ())
    done = reserved(ledger, once=hold("c")).run
    ledger.settle(done, "done", ())
    ledger.close()
    refusals = {running: ", not ended: only an ended run", released: "never started",
                keyless: "has no once key", "f" * 32: "is not in the ledger"}
    for run, said in refusals.items():
        with pytest.raises(ForgetRefused, match=said):
            store.forget(run)
    store.forget(done)
    with pytest.raises(ForgetRefused, match="forgotten already"):
        store.forget(done)
    again = store.open()
    assert [e.run for e in again.runs() if e.forgotten_ms is not None] == [done]
    assert again.once_holder("t", "a" * 64).run == running
