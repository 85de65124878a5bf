"""supervisor/views/status.py's two readings that the console shares: now as a
reader beside the server takes it, and the in-doubt line of a waiting run."""

from __future__ import annotations

from staal.records.ledger_records import Reserve
from staal.runtime.clock import FixedClock
from staal.supervisor.store.state import LedgerState
from staal.supervisor.views.status import in_doubt, ledger_now_ms
from staal.supervisor.views.status_report import Doubt

T0 = 1_700_000_000_000
RUN_A, RUN_B = "a" * 32, "b" * 32
RESOLVE = "staal resolve --journal j --op N --happened yes --result JSON"


def _state(*times: int) -> LedgerState:
    state = LedgerState()
    for run, time in zip((RUN_A, RUN_B), times, strict=False):
        state.apply(Reserve(run=run, tool="t", time=time, calls=1))
    return state


def test_a_clock_behind_the_ledger_reads_as_the_latest_reservation():
    state = _state(T0, T0 + 5_000)
    assert ledger_now_ms(state, FixedClock(T0 - 60_000)) == T0 + 5_000


def test_a_clock_past_every_reservation_is_now():
    state = _state(T0, T0 + 5_000)
    assert ledger_now_ms(state, FixedClock(T0 + 90_000)) == T0 + 90_000
    assert ledger_now_ms(LedgerState(), FixedClock(T0)) == T0


def test_the_in_doubt_line_names_its_op_once_whatever_the_stop_message_says():
    engines = Doubt(3, "op 3 (http.post) has no outcome", RESOLVE)
    assert in_doubt(engines) == "op 3 (http.post) has no outcome"
    other = Doubt(4, "the service answered 409", RESOLVE)
    assert in_doubt(other) == "op 4: the service answered 409"
    assert in_doubt(Doubt(5, None, RESOLVE)) == "op 5"
