"""staal.supervisor.store.ledger: runs, once keys and quotas, durable (seed 000 sections 5-7)."""

from __future__ import annotations

import errno
import inspect
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from staal.errors import LogDamaged, StaalError
from staal.manifest.durations import Duration
from staal.manifest.model import NetConfig, OnceConfig, QuotaConfig, Tool
from staal.money import Money
from staal.records.canonical import canonical_json
from staal.records.ledger_records import LEDGER, OnceHold, Release, Reserve, Settle
from staal.runtime.clock import FixedClock
from staal.supervisor.store.entries import RunEntry
from staal.supervisor.store.file_ledger import TOGETHER_VARIABLE, FileLedger
from staal.supervisor.store.ledger import (
    Different,
    Existing,
    Ledger,
    OverQuota,
    Reserved,
    once_request,
    read_ledger,
)
from staal.supervisor.store.state import LedgerState

BOUND = 10.0  # seconds any wait in these tests may take before it fails
T0 = 1_700_000_000_000
HOUR = 3_600_000
QUOTA = QuotaConfig(window=Duration.parse("1h"), calls=3, money=Money("100", "USD"))


def usd(amount: str) -> tuple[Money, ...]:
    return (Money(amount, "USD"),)


def once(key: str = "a", args: str = "1", keep_ms: int | None = HOUR) -> OnceHold:
    return OnceHold(key=key * 64, args=args * 64, keep_ms=keep_ms)


class CountingSyncer:
    """Counts syncs and does none; `fail` makes every later file sync fail."""

    def __init__(self) -> None:
        self.files = 0
        self.dirs = 0
        self.failing = False
        self.lock = threading.Lock()

    def sync_file(self, fd: int) -> None:
        if self.failing:
            raise OSError(errno.EIO, "simulated fsync failure")
        with self.lock:
            self.files += 1

    def sync_dir(self, path: str | os.PathLike[str]) -> None:
        with self.lock:
            self.dirs += 1


class GatedSyncer(CountingSyncer):
    """Holds the first file sync open until `release(commit)` says enough
    callers are queued or waiting behind it."""

    def __init__(self) -> None:
        super().__init__()
        self.ledger: FileLedger | None = None
        self.gate: Any = None

    def sync_file(self, fd: int) -> None:
        gate, self.gate = self.gate, None
        if gate is not None and self.ledger is not None:
            assert self.ledger._commit.wait_for(gate, BOUND)
        super().sync_file(fd)


class Ledgers:
    """Opens ledgers in one journal directory with one clock, collecting warnings."""

    def __init__(self, journals: Path, syncer: CountingSyncer | None = None) -> None:
        self.path = journals / "server.ledger"
        self.clock = FixedClock(T0)
        self.syncer = syncer or CountingSyncer()
        self.warnings: list[str] = []

    def open(self) -> FileLedger:
        return FileLedger.open(self.path, self.clock, self.syncer, warn=self.warnings.append)

    def lines(self) -> list[dict[str, Any]]:
        return [orjson.loads(line) for line in self.path.read_bytes().splitlines()]


@pytest.fixture
def ledgers(tmp_path: Path) -> Ledgers:
    return Ledgers(tmp_path / "journals")


@pytest.fixture
def ledger(ledgers: Ledgers) -> Any:
    opened = ledgers.open()
    yield opened
    opened.close()


def reserve(ledger: FileLedger, tool: str = "t", money: tuple[Money, ...] = (),
            quota: QuotaConfig | None = None, key: OnceHold | None = None) -> Any:
    return ledger.reserve_call(tool, quota, 1, money, key)


def reserved(ledger: FileLedger, **kwargs: Any) -> Reserved:
    result = reserve(ledger, **kwargs)
    assert isinstance(result, Reserved), result
    return result


def write_events(path: Path, events: list[Any], tail: bytes = b"") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(canonical_json(LEDGER.encode(e)) + b"\n" for e in events) + tail)


RUN_A, RUN_B = "a" * 32, "b" * 32


# -- the interface ---------------------------------------------------------------


def test_the_file_ledger_offers_every_method_of_the_ledger_interface_with_its_signature(
        ) -> None:
    methods = [name for name in vars(Ledger) if not name.startswith("_")]
    assert "reserve_call" in methods and "compact" in methods
    for name in methods:
        assert inspect.signature(getattr(FileLedger, name)) == \
            inspect.signature(getattr(Ledger, name)), name


# -- opening and reading -------------------------------------------------------


def test_a_new_ledger_is_created_0600_in_a_0700_directory_and_is_empty(
        ledgers: Ledgers) -> None:
    with ledgers.open() as ledger:
        assert ledger.runs() == ()
    assert stat.S_IMODE(os.stat(ledgers.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(ledgers.path.parent).st_mode) == 0o700


def test_a_reserve_is_on_disk_when_the_fsync_that_returns_it_runs(ledgers: Ledgers) -> None:
    seen: list[bytes] = []

    class Watching(CountingSyncer):
        def sync_file(self, fd: int) -> None:
            seen.append(ledgers.path.read_bytes())

    ledgers.syncer = Watching()
    with ledgers.open() as ledger:
        seen.clear()
        result = reserved(ledger, money=usd("5"), key=once())
        assert len(seen) == 1 and result.run.encode() in seen[0]
    assert ledgers.lines()[0] == {
        "v": 1, "event": "reserve", "run": result.run, "tool": "t", "time": T0, "calls": 1,
        "money": [{"amount": "5.00", "currency": "USD"}],
        "once": {"key": "a" * 64, "args": "1" * 64, "keep_ms": HOUR}}


def test_reopening_the_ledger_gives_back_every_run_as_it_was(ledgers: Ledgers) -> None:
    with ledgers.open() as ledger:
        a = reserved(ledger, money=usd("5"), key=once())
        b = reserved(ledger, tool="u")
        c = reserved(ledger)
        ledgers.clock.advance(10)
        ledger.settle(a.run, "done", usd("2"))
        ledger.release(b.run)
        before = ledger.runs()
    with ledgers.open() as again:
        assert again.runs() == before
        assert [e.run for e in again.unsettled()] == [c.run]
        settled = again.run(a.run)
        assert settled is not None and settled.state == "settled"
        assert (settled.ended_ms, settled.outcome, settled.charged) == (T0 + 10, "done", usd("2"))
    assert read_ledger(ledgers.path).runs() == before


def test_a_torn_last_line_is_discarded_and_cut_so_the_next_event_starts_a_line(
        ledgers: Ledgers) -> None:
    write_events(ledgers.path, [Reserve(run=RUN_A, tool="t", time=T0, calls=1)],
                 tail=b'{"v":1,"event":"settle","ru')
    with ledgers.open() as ledger:
        assert [e.state for e in ledger.runs()] == ["unsettled"]
        ledger.settle(RUN_A, "done", ())
    assert [line["event"] for line in ledgers.lines()] == ["reserve", "settle"]


def test_a_bad_line_before_the_last_is_damage_naming_the_line(ledgers: Ledgers) -> None:
    write_events(ledgers.path, [Reserve(run=RUN_A, tool="t", time=T0, calls=1)])
    good = ledgers.path.read_bytes()
    ledgers.path.write_bytes(good + b"not json\n" + good)
    with pytest.raises(LogDamaged) as caught:
        ledgers.open()
    assert caught.value.kind == "log_damaged" and caught.value.line == 2
    assert ledgers.path.read_bytes() == good + b"not json\n" + good


def test_an_unknown_event_or_missing_field_is_damage_naming_the_line(ledgers: Ledgers) -> None:
    write_events(ledgers.path, [Reserve(run=RUN_A, tool="t", time=T0, calls=1)],
                 tail=b'{"v":1,"event":"refund","run":"' + RUN_A.encode() + b'"}\n'
                 + b'{"v":1,"event":"release","run":"' + RUN_A.encode() + b'"}\n')
    with pytest.raises(LogDamaged) as caught:
        ledgers.open()
    assert caught.value.line == 2


BROKEN_SEQUENCES = {
    "a second reserve": [Reserve(run=RUN_A, tool="t", time=T0, calls=1),
                         Reserve(run=RUN_A, tool="t", time=T0, calls=1)],
    "a second settle": [Reserve(run=RUN_A, tool="t", time=T0, calls=1),
                        Settle(run=RUN_A, time=T0, outcome="done"),
                        Settle(run=RUN_A, time=T0, outcome="done")],
    "a settle after a release": [Reserve(run=RUN_A, tool="t", time=T0, calls=1),
                                 Release(run=RUN_A, time=T0),
                                 Settle(run=RUN_A, time=T0, outcome="done")],
    "a release after a settle": [Reserve(run=RUN_A, tool="t", time=T0, calls=1),
                                 Settle(run=RUN_A, time=T0, outcome="done"),
                                 Release(run=RUN_A, time=T0)],
    "a settle with no reserve": [Reserve(run=RUN_A, tool="t", time=T0, calls=1),
                                 Settle(run=RUN_B, time=T0, outcome="done")],
    "a release with no reserve": [Release(run=RUN_B, time=T0)],
    "time going backwards": [Reserve(run=RUN_A, tool="t", time=T0, calls=1),
                             Reserve(run=RUN_B, tool="t", time=T0 - 1, calls=1)],
}


@pytest.mark.parametrize("case", sorted(BROKEN_SEQUENCES))
def test_a_ledger_breaking_one_reserve_then_one_end_per_run_is_damage_naming_the_line(
        ledgers: Ledgers, case: str) -> None:
    events = BROKEN_SEQUENCES[case]
    write_events(ledgers.path, events)
    for read in (ledgers.open, lambda: read_ledger(ledgers.path)):
        with pytest.raises(LogDamaged) as caught:
            read()
        assert caught.value.line == len(events)


def test_read_ledger_changes_nothing_and_leaves_a_line_still_being_written_alone(
        ledgers: Ledgers) -> None:
    with ledgers.open() as ledger:
        run = reserved(ledger).run
        ledger.path.open("ab").write(b'{"v":1,"event":"sett')
        data = ledgers.path.read_bytes()
        assert [e.run for e in read_ledger(ledgers.path).runs()] == [run]
        assert ledgers.path.read_bytes() == data
    assert read_ledger(ledgers.path.parent / "absent").runs() == ()


# -- writes refused --------------------------------------------------------------


@pytest.mark.parametrize("first", ["settle", "release"])
@pytest.mark.parametrize("second", ["settle", "release"])
def test_a_second_settle_or_release_is_refused_as_a_bug_and_nothing_is_written(
        ledger: FileLedger, ledgers: Ledgers, first: str, second: str) -> None:
    run = reserved(ledger).run
    end = {"settle": lambda: ledger.settle(run, "done", ()), "release": lambda: ledger.release(run)}
    end[first]()
    data = ledgers.path.read_bytes()
    with pytest.raises(StaalError) as caught:
        end[second]()
    assert caught.value.kind == "bug"
    assert ledgers.path.read_bytes() == data
    assert ledger.run(run) is not None and ledger.run(run).state == f"{first}d"


def test_settling_or_releasing_a_run_the_ledger_does_not_hold_is_refused_as_a_bug(
        ledger: FileLedger, ledgers: Ledgers) -> None:
    for end in (lambda: ledger.settle(RUN_A, "done", ()), lambda: ledger.release(RUN_A)):
        with pytest.raises(StaalError) as caught:
            end()
        assert caught.value.kind == "bug"
    assert ledgers.path.read_bytes() == b""


@pytest.mark.parametrize("bad", ["outcome", "charged", "calls", "money"])
def test_an_event_a_restart_could_not_read_back_is_refused_as_a_bug(
        ledger: FileLedger, ledgers: Ledgers, bad: str) -> None:
    run = reserved(ledger).run
    data = ledgers.path.read_bytes()
    with pytest.raises(StaalError) as caught:
        if bad == "outcome":
            ledger.settle(run, "maybe", ())  # type: ignore[arg-type]
        elif bad == "charged":
            ledger.settle(run, "done", usd("-1"))
        elif bad == "calls":
            ledger.reserve_call("t", None, -1, (), None)
        else:
            ledger.reserve_call("t", None, 1, usd("-1"), None)
    assert caught.value.kind == "bug"
    assert ledgers.path.read_bytes() == data
    assert ledger.unsettled() == (ledger.run(run),)


def test_the_state_refuses_to_apply_a_second_reserve_and_changes_nothing() -> None:
    state = LedgerState()
    state.apply(Reserve(run=RUN_A, tool="t", time=T0, calls=1))
    with pytest.raises(StaalError) as caught:
        state.apply(Reserve(run=RUN_A, tool="u", time=T0, calls=2))
    assert caught.value.kind == "bug"
    assert state.runs() == (RunEntry(RUN_A, "t", T0, 1),) and state.events == 1


# -- once ----------------------------------------------------------------------


def test_a_calls_once_identity_is_its_named_arguments_and_its_whole_arguments() -> None:
    tool = Tool(name="refund", description="", program=Path("refund.py"), entry="refund",
                grants={}, net=NetConfig(1000, 1000),
                once=OnceConfig(by=("order",), keep=Duration.parse("30d")))
    first = once_request(tool, {"order": "A1", "amount": Money("35", "USD")})
    same = once_request(tool, {"order": "A1", "amount": Money("35.00", "USD")})
    other = once_request(tool, {"order": "A1", "amount": Money("36", "USD")})
    assert first == same and first is not None and other is not None
    assert (other.key, other.keep_ms) == (first.key, 30 * 24 * HOUR)
    assert other.args != first.args
    assert once_request(replace(tool, once=None), {"order": "A1"}) is None


def test_a_held_once_key_with_the_same_arguments_answers_the_existing_run_and_writes_nothing(
        ledger: FileLedger, ledgers: Ledgers) -> None:
    first = reserved(ledger, key=once())
    data = ledgers.path.read_bytes()
    again = reserve(ledger, key=once())
    assert isinstance(again, Existing) and again.entry.run == first.run
    assert ledgers.path.read_bytes() == data


def test_a_held_once_key_with_different_arguments_is_a_different_operation(
        ledger: FileLedger, ledgers: Ledgers) -> None:
    first = reserved(ledger, key=once(args="1"))
    data = ledgers.path.read_bytes()
    again = reserve(ledger, key=once(args="2"))
    assert isinstance(again, Different) and again.entry.run == first.run
    assert ledgers.path.read_bytes() == data


def test_an_unsettled_runs_key_never_expires(ledger: FileLedger, ledgers: Ledgers) -> None:
    first = reserved(ledger, key=once(keep_ms=1))
    ledgers.clock.advance(100 * 365 * 24 * HOUR)
    assert isinstance(reserve(ledger, key=once(keep_ms=1)), Existing)
    assert first.entry.holds_key(ledgers.clock.value)


def test_a_settled_runs_key_is_kept_for_keep_counted_from_the_runs_end(
        ledger: FileLedger, ledgers: Ledgers) -> None:
    first = reserved(ledger, key=once(keep_ms=HOUR))
    ledgers.clock.advance(5 * HOUR)
    ledger.settle(first.run, "done", ())
    ledgers.clock.advance(HOUR - 1)
    assert isinstance(reserve(ledger, key=once()), Existing)
    ledgers.clock.advance(1)
    second = reserve(ledger, key=once())
    assert isinstance(second, Reserved) and second.run != first.run
    assert isinstance(reserve(ledger, key=once()), Existing)


def test_a_key_kept_forever_never_expires(ledger: FileLedger, ledgers: Ledgers) -> None:
    first = reserved(ledger, key=once(keep_ms=None))
    ledger.settle(first.run, "failed", ())
    ledgers.clock.advance(100 * 365 * 24 * HOUR)
    again = reserve(ledger, key=once(keep_ms=None))
    assert isinstance(again, Existing) and again.entry.outcome == "failed"


def test_a_released_run_holds_no_key(ledger: FileLedger) -> None:
    first = reserved(ledger, key=once())
    ledger.release(first.run)
    assert isinstance(reserve(ledger, key=once()), Reserved)


def test_once_keys_are_scoped_to_the_tool(ledger: FileLedger) -> None:
    reserved(ledger, tool="t", key=once())
    assert isinstance(reserve(ledger, tool="u", key=once()), Reserved)


def test_a_call_refused_over_its_quota_holds_no_key(ledger: FileLedger, ledgers: Ledgers) -> None:
    for _ in range(3):
        reserved(ledger, quota=QUOTA)
    data = ledgers.path.read_bytes()
    for _ in range(2):
        assert isinstance(reserve(ledger, quota=QUOTA, key=once()), OverQuota)
    assert ledgers.path.read_bytes() == data
    ledgers.clock.advance(HOUR + 1)
    assert isinstance(reserve(ledger, quota=QUOTA, key=once()), Reserved)


def test_concurrent_calls_with_one_once_key_reserve_exactly_one_run_and_the_rest_wait_for_it(
        tmp_path: Path) -> None:
    count = 12
    syncer = GatedSyncer()
    ledgers = Ledgers(tmp_path, syncer)
    results: list[Any] = [None] * count
    synced_when_returned: list[int] = [0] * count
    with ledgers.open() as ledger:
        syncer.ledger = ledger
        syncer.gate = lambda commit: commit.waiting >= count - 1
        before = syncer.files

        def call(i: int) -> None:
            results[i] = reserve(ledger, key=once())
            synced_when_returned[i] = syncer.files - before

        threads = [threading.Thread(target=call, args=(i,)) for i in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(BOUND)
    winners = [r for r in results if isinstance(r, Reserved)]
    assert len(winners) == 1
    assert all(isinstance(r, Existing) and r.entry.run == winners[0].run
               for r in results if r is not winners[0])
    assert min(synced_when_returned) >= 1
    assert [line["event"] for line in ledgers.lines()] == ["reserve"]


# -- quotas --------------------------------------------------------------------


def test_a_call_past_the_calls_quota_is_refused_naming_it_and_when_it_frees(
        ledger: FileLedger, ledgers: Ledgers) -> None:
    for _ in range(3):
        reserved(ledger, quota=QUOTA)
        ledgers.clock.advance(10)
    refused = reserve(ledger, quota=QUOTA)
    assert refused == OverQuota("calls", 3, 3, 1, T0 + HOUR + 1)


def test_a_call_past_the_money_quota_is_refused_naming_it_and_when_it_frees(
        ledger: FileLedger, ledgers: Ledgers) -> None:
    reserved(ledger, quota=QUOTA, money=usd("30"))
    ledgers.clock.advance(10)
    reserved(ledger, quota=QUOTA, money=usd("40"))
    ledgers.clock.advance(10)
    refused = reserve(ledger, quota=QUOTA, money=usd("65"))
    # 70 held: the first reservation ageing out is not enough; the second's is.
    assert refused == OverQuota("money", Money("100", "USD"), Money("70", "USD"),
                                Money("65", "USD"), T0 + 10 + HOUR + 1)
    assert reserve(ledger, quota=QUOTA, money=usd("60")).frees_at_ms == T0 + HOUR + 1
    assert isinstance(reserve(ledger, quota=QUOTA, money=usd("30")), Reserved)


def test_a_call_that_alone_asks_for_more_than_the_quota_never_frees(ledger: FileLedger) -> None:
    refused = reserve(ledger, quota=QUOTA, money=usd("100.01"))
    assert isinstance(refused, OverQuota) and refused.which == "money"
    assert refused.frees_at_ms is None


def test_an_unsettled_run_holds_its_worst_case_until_it_settles_to_what_it_charged(
        ledger: FileLedger) -> None:
    first = reserved(ledger, quota=QUOTA, money=usd("80"))
    assert isinstance(reserve(ledger, quota=QUOTA, money=usd("30")), OverQuota)
    ledger.settle(first.run, "done", usd("10"))
    reserved(ledger, quota=QUOTA, money=usd("30"))
    use = ledger.quota_use("t", QUOTA)
    assert (use.calls, use.money_held, use.money_charged) == (2, Money("30", "USD"),
                                                              Money("10", "USD"))


def test_a_settled_runs_call_still_counts_and_a_released_run_counts_nothing(
        ledger: FileLedger) -> None:
    runs = [reserved(ledger, quota=QUOTA, money=usd("10")).run for _ in range(3)]
    ledger.settle(runs[0], "done", ())
    assert reserve(ledger, quota=QUOTA).which == "calls"
    ledger.release(runs[1])
    assert isinstance(reserve(ledger, quota=QUOTA), Reserved)
    assert ledger.quota_use("t", QUOTA).money == Money("10", "USD")


def test_the_window_slides_by_reserve_time_and_includes_both_ends(
        ledger: FileLedger, ledgers: Ledgers) -> None:
    for _ in range(3):
        reserved(ledger, quota=QUOTA)
    ledgers.clock.advance(HOUR)
    assert isinstance(reserve(ledger, quota=QUOTA), OverQuota)
    ledgers.clock.advance(1)
    assert isinstance(reserve(ledger, quota=QUOTA), Reserved)


def test_money_of_another_currency_does_not_count_against_the_quota(ledger: FileLedger) -> None:
    both = (Money("90", "EUR"), Money("90", "USD"))
    reserved(ledger, quota=QUOTA, money=both)
    assert isinstance(reserve(ledger, quota=QUOTA, money=(Money("90", "EUR"),)), Reserved)
    assert reserve(ledger, quota=QUOTA, money=usd("11")).which == "money"


def test_quota_use_reports_calls_and_money_in_the_window_and_when_the_next_frees(
        ledger: FileLedger, ledgers: Ledgers) -> None:
    tight = QuotaConfig(window=Duration.parse("1h"), calls=5)
    zero = reserved(ledger, quota=tight, money=usd("5"))
    ledger.settle(zero.run, "done", ())
    ledgers.clock.advance(60_000)
    reserved(ledger, quota=tight, money=usd("7"))
    use = ledger.quota_use("t", QUOTA)
    assert (use.calls, use.calls_limit, use.calls_frees_at_ms) == (2, 3, T0 + HOUR + 1)
    assert (use.money_held, use.money_charged) == (Money("7", "USD"), Money("0", "USD"))
    assert use.money_frees_at_ms == T0 + 60_000 + HOUR + 1
    assert (use.unsettled, use.now_ms, use.window_ms) == (1, T0 + 60_000, HOUR)
    assert ledger.quota_use("t", tight).money_held is None
    assert ledger.quota_use("other", QUOTA).calls == 0


def test_quota_use_survives_a_restart(ledgers: Ledgers) -> None:
    with ledgers.open() as ledger:
        for _ in range(3):
            reserved(ledger, quota=QUOTA, money=usd("20"))
        before = ledger.quota_use("t", QUOTA)
    with ledgers.open() as again:
        assert again.quota_use("t", QUOTA) == before
        assert isinstance(reserve(again, quota=QUOTA), OverQuota)
    assert read_ledger(ledgers.path).quota_use("t", QUOTA, T0) == before


# -- time ----------------------------------------------------------------------


def test_a_clock_set_back_stamps_events_with_the_ledgers_time_and_warns_once(
        ledger: FileLedger, ledgers: Ledgers) -> None:
    first = reserved(ledger)
    ledgers.clock.value = T0 - HOUR
    second = reserved(ledger)
    third = reserved(ledger)
    assert (first.time, second.time, third.time) == (T0, T0, T0)
    assert len(ledgers.warnings) == 1
    ledgers.clock.value = T0 + 5
    assert reserved(ledger).time == T0 + 5
    ledgers.clock.value = T0
    reserved(ledger)
    assert len(ledgers.warnings) == 2
    times = [line["time"] for line in ledgers.lines()]
    assert times == sorted(times)


def test_a_clock_set_back_cannot_shorten_a_quota_window(
        ledger: FileLedger, ledgers: Ledgers) -> None:
    for _ in range(3):
        reserved(ledger, quota=QUOTA)
    ledgers.clock.value = T0 - 10 * HOUR
    assert reserve(ledger, quota=QUOTA).frees_at_ms == T0 + HOUR + 1
    ledgers.clock.value = T0 + HOUR + 1
    assert isinstance(reserve(ledger, quota=QUOTA), Reserved)


def test_a_clock_behind_the_ledger_at_open_is_reported(ledgers: Ledgers) -> None:
    with ledgers.open() as ledger:
        reserved(ledger)
    ledgers.clock.value = T0 - 1
    with ledgers.open() as again:
        assert len(ledgers.warnings) == 1
        assert again.now_ms() == T0


# -- group commit ----------------------------------------------------------------


def test_concurrent_reserves_share_fsyncs(tmp_path: Path) -> None:
    count = 32
    syncer = GatedSyncer()
    ledgers = Ledgers(tmp_path, syncer)
    with ledgers.open() as ledger:
        syncer.ledger = ledger
        before = syncer.files
        syncer.gate = lambda commit: commit.submitted >= count
        threads = [threading.Thread(target=reserve, args=(ledger,)) for _ in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(BOUND)
        # The first flush took what was queued when it began; all the rest,
        # queued while it was held open, went out together under one more fsync.
        assert syncer.files - before == 2
        assert len(ledger.runs()) == count
    assert len(ledgers.lines()) == count


def test_with_the_test_lever_the_first_reserve_waits_for_the_next_and_one_fsync_takes_both(
        ledgers: Ledgers, monkeypatch: pytest.MonkeyPatch) -> None:
    """The power-loss scenario "two in flight" relies on it."""
    monkeypatch.setenv(TOGETHER_VARIABLE, "2")
    with ledgers.open() as ledger:
        before = ledgers.syncer.files
        first = threading.Thread(target=reserve, args=(ledger,))
        first.start()
        assert ledger._commit.wait_for(lambda commit: commit.submitted == 1, BOUND)
        second = reserve(ledger)
        first.join(BOUND)
        assert not first.is_alive()
        assert isinstance(second, Reserved)
        assert ledgers.syncer.files - before == 1
        # Once: the next reserve waits for nobody.
        reserve(ledger)
        assert ledgers.syncer.files - before == 2
    assert len(ledgers.lines()) == 3


def test_a_lone_event_costs_one_fsync(ledger: FileLedger, ledgers: Ledgers) -> None:
    before = ledgers.syncer.files
    run = reserved(ledger).run
    ledger.settle(run, "done", ())
    assert ledgers.syncer.files - before == 2


def test_a_failed_fsync_leaves_the_ledger_unusable_until_it_is_reopened(
        ledger: FileLedger, ledgers: Ledgers) -> None:
    ledgers.syncer.failing = True
    for call in (lambda: reserve(ledger), lambda: reserve(ledger), ledger.runs):
        with pytest.raises(StaalError) as caught:
            call()
        assert caught.value.kind == "ledger_unusable"
    ledgers.syncer.failing = False
    with ledgers.open() as again:
        assert isinstance(reserve(again), Reserved)


# -- compaction ------------------------------------------------------------------


def build_compaction_case(ledger: FileLedger, clock: FixedClock) -> dict[str, str]:
    """One run for each rule; returns name -> run id. Ends at T0 + 10 h."""
    quota = {"quota": QUOTA}
    runs = {
        "unsettled": reserved(ledger, tool="u").run,
        "files kept": reserved(ledger, tool="u").run,
        "once held": reserved(ledger, tool="u", key=once("a", keep_ms=20 * HOUR)).run,
        "once expired": reserved(ledger, tool="u", key=once("b", keep_ms=HOUR)).run,
        "old": reserved(ledger, tool="t", **quota).run,
        "released old": reserved(ledger, tool="u").run,
    }
    for name in ("files kept", "once held", "once expired", "old"):
        ledger.settle(runs[name], "done", ())
    ledger.release(runs["released old"])
    clock.advance(10 * HOUR)
    runs["in window"] = reserved(ledger, tool="t", **quota).run
    ledger.settle(runs["in window"], "failed", ())
    runs["released in window"] = reserved(ledger, tool="t", **quota).run
    ledger.release(runs["released in window"])
    return runs


KEPT = {"unsettled", "files kept", "once held", "in window"}


def test_compaction_keeps_exactly_the_runs_seed_section_6_lists(ledgers: Ledgers) -> None:
    with ledgers.open() as ledger:
        runs = build_compaction_case(ledger, ledgers.clock)
        before = {e.run: e for e in ledger.runs()}
        result = ledger.compact({runs["files kept"]}, {"t": HOUR})
        kept_ids = {runs[name] for name in KEPT}
        assert set(result.kept) == kept_ids
        assert set(result.dropped) == {runs[n] for n in runs} - kept_ids
        assert {e.run: e for e in ledger.runs()} == {r: before[r] for r in kept_ids}
    again = read_ledger(ledgers.path)
    assert {e.run: e for e in again.runs()} == {r: before[r] for r in kept_ids}


def test_files_kept_may_be_a_predicate(ledger: FileLedger, ledgers: Ledgers) -> None:
    runs = build_compaction_case(ledger, ledgers.clock)
    result = ledger.compact(lambda entry: entry.run == runs["files kept"], {"t": HOUR})
    assert runs["files kept"] in result.kept and runs["old"] in result.dropped


def test_compaction_leaves_quota_use_once_answers_and_new_events_as_they_were(
        ledgers: Ledgers) -> None:
    with ledgers.open() as ledger:
        runs = build_compaction_case(ledger, ledgers.clock)
        use = ledger.quota_use("t", QUOTA)
        ledger.compact(set(), {"t": HOUR})
        assert ledger.quota_use("t", QUOTA) == use
        assert reserve(ledger, tool="u", key=once("a")).entry.run == runs["once held"]
        assert isinstance(reserve(ledger, tool="u", key=once("b")), Reserved)
        ledger.settle(runs["unsettled"], "done", ())
        after = ledger.runs()
    assert read_ledger(ledgers.path).runs() == after


def test_compaction_writes_a_private_temp_file_syncs_it_then_renames_and_syncs_the_directory(
        ledgers: Ledgers) -> None:
    steps: list[tuple[str, Any]] = []

    class Recording(CountingSyncer):
        def sync_file(self, fd: int) -> None:
            name = os.readlink(f"/proc/self/fd/{fd}")
            mode = stat.S_IMODE(os.fstat(fd).st_mode)
            steps.append(("file", Path(name).name, mode, ledgers.path.read_bytes()))

        def sync_dir(self, path: str | os.PathLike[str]) -> None:
            steps.append(("dir", Path(path), sorted(os.listdir(path))))

    ledgers.syncer = Recording()
    with ledgers.open() as ledger:
        build_compaction_case(ledger, ledgers.clock)
        old = ledgers.path.read_bytes()
        steps.clear()
        ledger.compact(set(), {"t": HOUR})
    new = ledgers.path.read_bytes()
    assert steps[0] == ("file", "server.ledger.compact", 0o600, old)
    assert steps[1] == ("dir", ledgers.path.parent, ["server.ledger"])
    assert len(new) < len(old)
    assert stat.S_IMODE(os.stat(ledgers.path).st_mode) == 0o600


def test_a_compaction_that_drops_nothing_leaves_the_file_alone(ledger: FileLedger,
                                                                ledgers: Ledgers) -> None:
    reserved(ledger)
    inode = os.stat(ledgers.path).st_ino
    assert ledger.compact(set(), {}).dropped == ()
    assert os.stat(ledgers.path).st_ino == inode


def test_time_does_not_go_back_when_compaction_drops_the_latest_event(
        ledger: FileLedger, ledgers: Ledgers) -> None:
    reserved(ledger)
    ledgers.clock.advance(HOUR)
    ledger.release(reserved(ledger).run)
    ledgers.clock.value = T0
    ledger.compact(set(), {})
    assert ledger.now_ms() == T0 + HOUR


def test_a_leftover_temp_file_is_ignored_at_open_and_removed_by_the_next_compaction(
        ledgers: Ledgers) -> None:
    with ledgers.open() as ledger:
        build_compaction_case(ledger, ledgers.clock)
        before = ledger.runs()
    temp = ledgers.path.with_name("server.ledger.compact")
    temp.write_bytes(ledgers.path.read_bytes()[:37])  # a power cut mid-write
    with ledgers.open() as ledger:
        assert ledger.runs() == before
        ledger.compact(set(), {})
    assert not temp.exists()


COMPACT_CHILD = """
import sys
from staal.runtime.clock import FixedClock
from staal.supervisor.store.file_ledger import TOGETHER_VARIABLE, FileLedger
ledger = FileLedger.open(sys.argv[1], FixedClock(int(sys.argv[2])))
ledger.compact(set(), {"t": 3_600_000})
ledger.close()
"""
STEPS = ["compact.written", "compact.synced", "compact.renamed", "compact.done"]


@pytest.mark.parametrize("step", STEPS)
def test_a_crash_at_any_step_of_compaction_leaves_one_whole_ledger(
        tmp_path: Path, step: str) -> None:
    ledgers = Ledgers(tmp_path / "journals")
    with ledgers.open() as ledger:
        build_compaction_case(ledger, ledgers.clock)
        old = ledger.runs()
    model = Ledgers(tmp_path / "model")
    shutil.copytree(ledgers.path.parent, model.path.parent)
    model.clock.value = ledgers.clock.value
    with model.open() as copy:
        copy.compact(set(), {"t": HOUR})
        new = copy.runs()
    env = {**os.environ, "STAAL_TEST_KILL_POINTS": "1", "STAAL_KILL_AT": f"supervisor:{step}"}
    child = subprocess.run([sys.executable, "-c", COMPACT_CHILD, str(ledgers.path),
                            str(ledgers.clock.value)], check=False, env=env,
                           timeout=BOUND * 3)
    assert child.returncode == -9
    expected = old if step in ("compact.written", "compact.synced") else new
    assert read_ledger(ledgers.path).runs() == expected
    with ledgers.open() as ledger:
        assert ledger.runs() == expected
        ledger.compact(set(), {"t": HOUR})
        assert ledger.runs() == new
    assert sorted(os.listdir(ledgers.path.parent)) == ["server.ledger"]


# -- properties ------------------------------------------------------------------

TOOLS = {
    "a": QuotaConfig(window=Duration(1000, "1s"), calls=3, money=Money("10", "USD")),
    "b": QuotaConfig(window=Duration(5000, "5s"), money=Money("7", "USD")),
}
RESERVE = st.tuples(st.just("reserve"), st.sampled_from(sorted(TOOLS)), st.integers(0, 6),
                    st.sampled_from([None, "0", "1"]), st.sampled_from(["1", "2"]))
OPS = st.lists(st.one_of(
    RESERVE, RESERVE, RESERVE,
    st.tuples(st.just("settle"), st.integers(0, 50), st.integers(0, 100)),
    st.tuples(st.just("release"), st.integers(0, 50)),
    st.tuples(st.just("advance"), st.integers(-800, 1200)),
    st.tuples(st.just("compact"), st.integers(0, 2)),
), min_size=10, max_size=60)


def apply_op(ledger: FileLedger, clock: FixedClock, op: tuple[Any, ...]) -> None:
    unsettled = ledger.unsettled()
    if op[0] == "reserve":
        _, tool, dollars, key, args = op
        hold = None if key is None else OnceHold(key * 64, args * 64, 1500)
        ledger.reserve_call(tool, TOOLS[tool], 1, usd(str(dollars)), hold)
    elif op[0] == "settle" and unsettled:
        entry = unsettled[op[1] % len(unsettled)]
        spent = entry.money[0].minor * op[2] // 100
        ledger.settle(entry.run, "done", (Money.from_minor(spent, "USD"),))
    elif op[0] == "release" and unsettled:
        ledger.release(unsettled[op[1] % len(unsettled)].run)
    elif op[0] == "advance":
        clock.advance(op[1])
    elif op[0] == "compact":
        ledger.compact({e.run for e in ledger.runs()[::op[1] + 1]},
                       {tool: quota.window.ms for tool, quota in TOOLS.items()})


def check_quotas_hold_in_every_window(runs: tuple[RunEntry, ...]) -> None:
    for tool, quota in TOOLS.items():
        mine = [e for e in runs if e.tool == tool]
        for end in {e.reserved_ms for e in mine}:
            inside = [e for e in mine if end - quota.window.ms <= e.reserved_ms <= end]
            assert quota.calls is None or sum(e.calls_used() for e in inside) <= quota.calls
            assert quota.money is not None
            spent = sum(e.money_used("USD") for e in inside)
            assert spent <= quota.money.minor


def check_one_holder_per_key(runs: tuple[RunEntry, ...], now: int) -> None:
    holders = [(e.tool, e.once.key) for e in runs if e.once is not None and e.holds_key(now)]
    assert len(holders) == len(set(holders))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_no_sequence_of_calls_lets_a_window_exceed_its_quota_and_reading_back_agrees(
        ops: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        ledgers = Ledgers(Path(directory))
        ledger = ledgers.open()
        runs: tuple[RunEntry, ...] = ()
        try:
            for op in ops:
                apply_op(ledger, ledgers.clock, op)
                runs = ledger.runs()
                check_quotas_hold_in_every_window(runs)
                check_one_holder_per_key(runs, ledger.now_ms())
                assert read_ledger(ledgers.path).runs() == runs
                use = {t: ledger.quota_use(t, q) for t, q in TOOLS.items()}
                assert {t: read_ledger(ledgers.path).quota_use(t, q, ledger.now_ms())
                        for t, q in TOOLS.items()} == use
        finally:
            ledger.close()
        with ledgers.open() as again:
            assert again.runs() == runs
