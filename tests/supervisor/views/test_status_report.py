"""supervisor/views/status_report.py: the status report's records write the
`status --json` form scripts read: the same keys, in the same order, the
same ones left out, whatever shape of run, quota or caller."""

from __future__ import annotations

from staal.supervisor.views.status_report import (
    CallerStatus,
    Doubt,
    ForgottenRun,
    InstanceStatus,
    MoneyUse,
    QuotaStatus,
    RateStatus,
    ServerStatus,
    StatusReport,
    UnfinishedRun,
)

RUN = "a" * 32
WHEN = "2026-01-02T03:04:05Z"
RESOLVE = "staal resolve --journal j --op 2 --happened yes --result JSON   (or: --happened no)"


def test_a_run_of_this_instance_names_its_journal_before_its_state():
    run = UnfinishedRun(RUN, "pay", WHEN, "in_progress", journal="/j/pay/a.journal")
    assert list(run.to_json().items()) == [
        ("run", RUN), ("tool", "pay"), ("reserved", WHEN), ("journal", "/j/pay/a.journal"),
        ("state", "in_progress")]


def test_a_damaged_journal_shows_its_problem_between_the_journal_and_the_state():
    run = UnfinishedRun(RUN, "pay", WHEN, "in_progress", journal="j", problem="line 3: torn")
    assert list(run.to_json()) == ["run", "tool", "reserved", "journal", "problem", "state"]


def test_a_waiting_run_adds_its_op_message_and_resolve_command_even_when_unknown():
    run = UnfinishedRun(RUN, "pay", WHEN, "waiting_for_operator", journal="j",
                        doubt=Doubt(None, None, RESOLVE))
    assert run.to_json() == {"run": RUN, "tool": "pay", "reserved": WHEN, "journal": "j",
                             "state": "waiting_for_operator", "op": None, "message": None,
                             "resolve": RESOLVE}


def test_another_instances_run_names_its_owner_and_who_recorded_its_wait():
    alone = UnfinishedRun(RUN, "pay", WHEN, "owned by another instance", owner="b")
    assert list(alone.to_json()) == ["run", "tool", "reserved", "state", "owner"]
    waiting = UnfinishedRun(RUN, "pay", WHEN, "waiting_for_operator", owner="b",
                            doubt=Doubt(2, "op 2 has no outcome", RESOLVE, since=WHEN,
                                        recorded_by="b"))
    assert list(waiting.to_json().items())[3:] == [
        ("state", "waiting_for_operator"), ("owner", "b"), ("op", 2),
        ("message", "op 2 has no outcome"), ("resolve", RESOLVE), ("waiting_since", WHEN),
        ("recorded_by", "b")]


def test_a_quota_shows_money_only_with_a_money_limit():
    calls = QuotaStatus("pay", 60_000, 3, 10, WHEN, 1)
    assert list(calls.to_json()) == ["tool", "window_ms", "calls", "calls_limit", "calls_frees_at",
                                     "unsettled_runs"]
    money = QuotaStatus("pay", 60_000, 3, None, None, 0,
                        MoneyUse("1.00 EUR", "2.00 EUR", "10.00 EUR", WHEN))
    assert list(money.to_json().items())[-4:] == [
        ("money_held", "1.00 EUR"), ("money_spent", "2.00 EUR"), ("money_limit", "10.00 EUR"),
        ("money_frees_at", WHEN)]


def test_a_caller_shows_its_rate_and_quotas_only_when_its_profile_is_known():
    unknown = CallerStatus("c" * 64, 2, 0, "gone")
    assert unknown.to_json() == {"caller": "c" * 64, "runs": 2, "unsettled_runs": 0,
                                 "profile": "gone"}
    known = CallerStatus("c" * 64, 2, 1, "ops", RateStatus(1, 5, 60_000, WHEN), ())
    assert known.to_json()["rate"] == {"calls": 1, "calls_limit": 5, "window_ms": 60_000,
                                       "calls_frees_at": WHEN}
    assert list(known.to_json()) == ["caller", "runs", "unsettled_runs", "profile", "rate",
                                     "quotas"]
    assert known.to_json()["quotas"] == []


def test_the_report_lists_instances_only_on_a_shared_store():
    server = ServerStatus(False, None, "/j", "/j/ledger.jsonl")
    forgotten = ForgottenRun(RUN, "pay", "done", WHEN, WHEN)
    report = StatusReport(server, (), (), (), (forgotten,))
    assert report.to_json() == {
        "server": {"running": False, "pid": None, "journals": "/j", "store": "/j/ledger.jsonl"},
        "runs": [], "quotas": [], "callers": [],
        "forgotten": [{"run": RUN, "tool": "pay", "outcome": "done", "ended": WHEN,
                       "forgotten": WHEN}]}
    instance = InstanceStatus("a", True, 3, WHEN, "0.1.0", None, "released", 0)
    shared = StatusReport(server, (), (), (), (), (instance,))
    assert shared.to_json()["instances"] == [{
        "instance": "a", "this": True, "fence": 3, "started": WHEN, "version": "0.1.0",
        "lease_until": None, "lease": "released", "unsettled_runs": 0}]
