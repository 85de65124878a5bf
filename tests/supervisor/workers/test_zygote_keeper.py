"""Keeping the pool's zygote (supervisor/workers/zygote_keeper.py): one
that dies after it was up is replaced after the backoff, longer while they
keep dying; the first, dying before it ever said ready, is not, and no
worker will come; one closed meanwhile is not started again. The pool is a
stand-in that records what it is told, timers are recorded, not run."""

from __future__ import annotations

from collections.abc import Callable

from staal.runtime.clock import FakeMonotonic
from staal.supervisor.workers.pool_states import PoolState, ZygoteGone
from staal.supervisor.workers.zygote_keeper import ZygoteKeeper


class Pool:
    def __init__(self) -> None:
        self.told: list[str] = []

    def started(self) -> None:
        self.told.append("started")

    def forked(self, pid: int) -> None:
        self.told.append(f"forked {pid}")

    def unforked(self, errno: str) -> None:
        self.told.append(f"unforked {errno}")

    def exited(self, pid: int, status: int) -> None:
        self.told.append(f"exited {pid} {status}")

    def died(self, how: str) -> None:
        self.told.append(f"died: {how}")

    def ended(self, gone: ZygoteGone) -> None:
        self.told.append(f"ended: {gone.message}")


class Keeping:
    def __init__(self, tmp_path) -> None:
        self.pool = Pool()
        self.clock = FakeMonotonic()
        self.timers: list[tuple[float, Callable[[], None]]] = []
        self.logged: list[tuple[str, dict[str, object]]] = []
        self.keeper = ZygoteKeeper(tmp_path / "staal.toml", "ipc://nowhere", {}, None, self.pool,
                                   self.clock, self.log, self.no_task, self.later)

    def log(self, event: str, **fields: object) -> None:
        self.logged.append((event, fields))

    def no_task(self, work):
        work.close()
        raise AssertionError("nothing here starts a task")

    def later(self, delay: float, callback: Callable[[], None]):
        self.timers.append((delay, callback))


def test_a_zygote_that_dies_once_up_is_replaced_after_a_backoff_that_grows_while_they_keep_dying(tmp_path):
    keeping = Keeping(tmp_path)
    keeper = keeping.keeper
    keeper.report("ready")
    keeper._died("was killed by signal 9")
    assert keeper.state is PoolState.REPLACING
    assert keeping.pool.told == ["died: was killed by signal 9"]
    keeper.move("spawn")  # as if the replacement started
    keeper.move("up")  # and came up
    keeper._died("was killed by signal 9")
    delays = [delay for delay, _ in keeping.timers]
    assert len(delays) == 2 and delays[1] > delays[0]
    assert [e for e, _ in keeping.logged] == ["zygote_exited", "zygote_replacing"] * 2


def test_the_first_zygote_dying_before_it_was_up_is_not_replaced_and_no_worker_will_come(tmp_path):
    keeping = Keeping(tmp_path)
    keeping.keeper._died("exited with status 3")
    assert keeping.keeper.state is PoolState.FAILED
    assert keeping.timers == []
    assert keeping.pool.told == [
        "ended: the zygote exited (exited with status 3); see the log above",
        "died: exited with status 3"]


def test_a_replacement_due_after_the_pool_closed_is_not_started(tmp_path):
    keeping = Keeping(tmp_path)
    keeping.keeper.report("ready")
    keeping.keeper._died("was killed by signal 9")
    keeping.keeper.move("close")
    (_, restart), = keeping.timers
    restart()
    assert keeping.keeper.state is PoolState.CLOSED and keeping.keeper.process is None
