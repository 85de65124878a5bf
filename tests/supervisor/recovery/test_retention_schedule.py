"""When retention sweeps (supervisor/recovery/retention.py `Retention`), on
a clock the test moves: at start when asked, then once a day; a daily sweep
that fails is logged and the next day's goes on. What a sweep deletes is
tests/docs/test_operators.py's."""

from __future__ import annotations

import asyncio

from staal.errors import StaalError
from staal.runtime.clock import FakeMonotonic
from staal.supervisor.recovery.retention import DAY_S, Retention, Sweep
from staal.supervisor.store.entries import Compaction


class DiskFull(StaalError):
    kind = "ledger"


def test_a_sweep_is_made_once_a_day_and_a_failed_one_does_not_stop_the_next():
    clock = FakeMonotonic(now=0.0)
    logged: list[tuple[str, dict[str, object]]] = []
    swept_at: list[float] = []
    three = asyncio.Event()

    def sweep() -> Sweep:
        swept_at.append(clock.monotonic())
        if len(swept_at) == 2:
            raise DiskFull("no space left on device")
        return Sweep(("r1",), Compaction(kept=("r2",), dropped=()))

    def log(event: str, **fields: object) -> None:  # on the loop's thread: sweeps run in another
        logged.append((event, fields))
        if len(logged) == 3:
            three.set()

    retention = Retention(sweep, log, clock)

    async def three_days() -> None:
        daily = asyncio.ensure_future(retention.daily())
        try:
            await asyncio.wait_for(three.wait(), 5)
        finally:
            daily.cancel()

    asyncio.run(three_days())
    assert swept_at[:3] == [DAY_S, 2 * DAY_S, 3 * DAY_S]
    assert [event for event, _ in logged[:3]] == ["retention", "retention_failed", "retention"]
    assert logged[0][1] == {"deleted": 1, "kept": 1, "dropped": 0}
    assert logged[1][1] == {"level": "error", "kind": "ledger", "message": "no space left on device"}


def test_a_sweep_at_start_is_made_at_once_and_logged():
    logged: list[tuple[str, dict[str, object]]] = []
    retention = Retention(lambda: Sweep((), Compaction(kept=(), dropped=("r9",))),
                          lambda event, **fields: logged.append((event, fields)),
                          FakeMonotonic())
    asyncio.run(retention.sweep_now())
    assert logged == [("retention", {"deleted": 0, "kept": 0, "dropped": 1})]
