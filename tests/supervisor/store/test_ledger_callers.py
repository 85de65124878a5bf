"""The ledger's per-caller admission (issue 14): a reserve records who
called (a SHA-256), its profile and its grant set, read back after a
restart; a caller's rate counts its runs of every tool and its quota its
runs of one tool, each apart from other callers'; once keys are the
caller's own; a ledger that cannot be written refuses from then on."""

from __future__ import annotations

from pathlib import Path

import pytest

from staal.errors import StaalError
from staal.manifest.durations import Duration
from staal.manifest.model import NetConfig, OnceConfig, QuotaConfig, Tool
from staal.records.canonical import sha256_hex
from staal.supervisor.store.ledger import Admission, Existing, OverQuota, Reserved, once_request
from tests.supervisor.store.test_ledger import HOUR, T0, Ledgers

A, B = sha256_hex(b"caller a"), sha256_hex(b"caller b")
RATE = QuotaConfig(Duration(HOUR, "1h"), calls=2)
PER_TOOL = QuotaConfig(Duration(HOUR, "1h"), calls=1)
REFUND = Tool(name="refund", description="", program=Path("refund.py"), entry="main", grants={},
              net=NetConfig(1000, 1000), once=OnceConfig(by=("order",), keep=None))


@pytest.fixture
def ledgers(tmp_path: Path) -> Ledgers:
    return Ledgers(tmp_path / "journals")


@pytest.fixture
def ledger(ledgers: Ledgers):
    opened = ledgers.open()
    yield opened
    opened.close()


def admission(caller: str, **limits) -> Admission:
    return Admission(caller=caller, profile="support", grants="narrow", **limits)


def test_a_reserve_records_the_callers_hash_profile_and_grant_set_across_a_restart(ledgers):
    with ledgers.open() as first:
        made = first.reserve_call("t", None, 1, (), None, admission(A))
    assert isinstance(made, Reserved)
    with ledgers.open() as again:
        entry = again.run(made.run)
    assert (entry.caller, entry.profile, entry.grants) == (A, "support", "narrow")
    (line,) = ledgers.lines()
    assert line["caller"] == A and "caller a" not in str(line)


def test_a_callers_rate_counts_its_runs_of_every_tool_and_no_one_elses(ledger):
    rate = admission(A, rate=RATE)
    assert isinstance(ledger.reserve_call("t", None, 1, (), None, rate), Reserved)
    assert isinstance(ledger.reserve_call("u", None, 1, (), None, rate), Reserved)
    refused = ledger.reserve_call("v", None, 1, (), None, rate)
    assert isinstance(refused, OverQuota) and refused.scope == "rate"
    assert (refused.limit, refused.in_use, refused.frees_at_ms) == (2, 2, T0 + HOUR + 1)
    assert isinstance(ledger.reserve_call("v", None, 1, (), None, admission(B, rate=RATE)), Reserved)
    assert len(ledger.runs()) == 3  # the refusal held nothing


def test_a_callers_quota_on_a_tool_counts_only_its_runs_of_that_tool(ledger):
    quota = admission(A, quota=PER_TOOL)
    assert isinstance(ledger.reserve_call("t", None, 1, (), None, quota), Reserved)
    refused = ledger.reserve_call("t", None, 1, (), None, quota)
    assert isinstance(refused, OverQuota) and refused.scope == "caller"
    assert isinstance(ledger.reserve_call("u", None, 1, (), None, quota), Reserved)
    assert isinstance(ledger.reserve_call("t", None, 1, (), None, admission(B, quota=PER_TOOL)),
                      Reserved)


def test_the_same_once_arguments_are_one_key_per_caller():
    tool = REFUND
    local, a, b = (once_request(tool, {"order": "A1"}, who) for who in (None, A, B))
    assert len({local.key, a.key, b.key}) == 3 and a.args == b.args
    assert once_request(tool, {"order": "A1"}, A) == a


def test_once_holds_within_one_caller_only(ledger):
    tool = REFUND
    first = ledger.reserve_call("refund", None, 1, (), once_request(tool, {"order": "A1"}, A),
                                admission(A))
    same = ledger.reserve_call("refund", None, 1, (), once_request(tool, {"order": "A1"}, A),
                               admission(A))
    other = ledger.reserve_call("refund", None, 1, (), once_request(tool, {"order": "A1"}, B),
                                admission(B))
    assert isinstance(same, Existing) and same.entry.run == first.run
    assert isinstance(other, Reserved) and other.run != first.run


def test_a_ledger_that_cannot_be_written_refuses_a_callers_reservations_from_then_on(ledgers):
    with ledgers.open() as opened:
        ledgers.syncer.failing = True
        with pytest.raises(StaalError) as raised:
            opened.reserve_call("t", None, 1, (), None, admission(A, rate=RATE))
        assert raised.value.kind == "ledger_unusable"
        with pytest.raises(StaalError):
            opened.reserve_call("t", None, 1, (), None, admission(A, rate=RATE))
    ledgers.syncer.failing = False
    with ledgers.open() as again:
        # The one whose fsync failed may be on disk, never started: the next
        # start releases it (recovery); nothing after it was written.
        assert [entry.state for entry in again.runs()] in ([], ["unsettled"])
