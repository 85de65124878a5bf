"""The crash matrix's judgement on its own, without processes: what a
correct run of a cell shows passes, and each way of going wrong fails it."""

from __future__ import annotations

from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from tests.crash.harness import (
    ANSWERED,
    CLOSED,
    REFUND_OP,
    RESUMED,
    Cell,
    Observed,
    cell_named,
    judge,
    what_the_client_saw,
)

RUN = "a" * 32
OTHER = "c" * 32  # the other call's run, in a warm cell


def request(method: str, key: str | None = None, hung_up: bool = False) -> dict:
    headers = {"idempotency-key": key} if key else {}
    path = "/v1/refunds" if method == "POST" else "/v1/payment_intents/pi_1"
    return {"method": method, "path": path, "headers": headers, "finished": True,
            "hung_up": hung_up}


def as_expected(cell: Cell) -> Observed:
    """What a correct run of a once cell with one run shows."""
    refund = {"id": "re_1", "amount": 2000}
    answer = {"seen": ANSWERED, "is_error": False,
              "structured": {"result": {"refund": "re_1", "status": "succeeded"}}}
    get, post = cell.requests
    posts = [request("POST", f"{RUN}-{REFUND_OP}") for _ in range(post)]
    if cell.held:
        posts[0]["hung_up"] = True
    return Observed(
        cell, first=answer if cell.first == ANSWERED else {"seen": CLOSED}, repeat=answer,
        killed=True, family=[11, 12], first_worker=12 if cell.held else None,
        at_first=[(RUN, e) for e in cell.at_first], at_restart=[(RUN, e) for e in cell.at_restart],
        first_run=RUN, requests=[request("GET") for _ in range(get)] + posts,
        refunds=[refund] * cell.refunds, runs=[RUN], charged_minor=2000,
        journals={RUN: ["Header", "Intent", "OutcomeRecord", "Intent", "OutcomeRecord", "Print",
                        "End"]})


def as_expected_warm(cell: Cell) -> Observed:
    """What a correct run of a warm cell shows: the other call's run
    OTHER, before the cell's call or at once with it, each run with its
    own GET, refund POST under its own key, and refund."""
    def answer(refund: str) -> dict:
        return {"seen": ANSWERED, "is_error": False,
                "structured": {"result": {"refund": refund, "status": "succeeded"}}}

    worker, fresh, resumed = 11, 12, 13
    own = worker if cell.reused else fresh
    started = [(OTHER, worker), (RUN, own)] + ([(RUN, resumed)] if cell.at_first else [])
    journal = ["Header", "Intent", "OutcomeRecord", "Intent", "OutcomeRecord", "Print", "End"]
    return Observed(
        cell, first=answer("re_1"), repeat=answer("re_1"), others=[answer("re_2")], killed=True,
        at_first=[(RUN, e) for e in cell.at_first], first_run=RUN, first_worker=own,
        started=started,
        requests=[request("GET"), request("POST", f"{OTHER}-{REFUND_OP}"),
                  request("GET"), request("POST", f"{RUN}-{REFUND_OP}")],
        refunds=[{"id": "re_2", "amount": 2000}, {"id": "re_1", "amount": 2000}],
        runs=[OTHER, RUN], charged_minor=4000, journals={OTHER: journal, RUN: journal})


WARM_CELLS = ("worker:idle", "worker:journal#2", "worker:intent#2 (another call at once)")


def judged(observed: Observed) -> list[str]:
    judge(observed.cell, observed)
    return observed.problems


def test_what_a_correct_run_of_each_once_cell_shows_passes():
    for name in ("supervisor:waiting", "supervisor:refund held", "supervisor:ended",
                 "worker:outcome", "supervisor:answer"):
        assert judged(as_expected(cell_named(name))) == [], name


def test_a_second_post_under_the_same_key_fails_a_cell_though_the_service_refunded_once():
    observed = as_expected(cell_named("supervisor:ended"))
    observed.requests.append(request("POST", f"{RUN}-{REFUND_OP}"))
    assert judged(observed) == ["the service got 1 GET and 2 POST (3 requests), expected 1 GET "
                                "and 1 POST"]


def test_a_post_under_a_key_of_no_run_fails_a_cell():
    observed = as_expected(cell_named("supervisor:waiting"))
    observed.requests[-1]["headers"]["idempotency-key"] = "b" * 32 + "-2"
    assert judged(observed) == [f"POSTs under keys no run of the ledger sends: {['b' * 32 + '-2']}",
                                "2 idempotency keys for 1 refunds"]


def test_a_recovery_rule_other_than_the_cells_fails_it():
    observed = as_expected(cell_named("supervisor:ended"))
    observed.at_restart = [(RUN, e) for e in RESUMED]
    assert judged(observed) == ["the restarted server logged recovery ['resuming', 'resumed: done'], "
                                "expected ['settled from its end']"]


def test_a_recovery_the_cell_expects_at_restart_but_logged_by_the_first_server_fails_it():
    observed = as_expected(cell_named("supervisor:ended"))
    observed.at_first, observed.at_restart = observed.at_restart, []
    assert judged(observed) == [
        "the first server logged recovery ['settled from its end'], expected none",
        "the restarted server logged recovery none, expected ['settled from its end']"]


def test_a_read_timeout_is_not_taken_for_the_connection_closing():
    timeout = MCPError(REQUEST_TIMEOUT, "Request 'tools/call' timed out")
    assert what_the_client_saw(timeout, exited=True) == (
        "a read timeout (Request 'tools/call' timed out)")
    observed = as_expected(cell_named("supervisor:ended"))
    observed.first = {"seen": what_the_client_saw(timeout, exited=False)}
    assert judged(observed) == ["the first call saw \"a read timeout (Request 'tools/call' timed "
                                "out)\", expected 'connection closed'"]


def test_the_connection_closing_counts_only_when_the_server_process_is_gone():
    closed = MCPError(CONNECTION_CLOSED, "Connection closed")
    assert what_the_client_saw(closed, exited=True) == CLOSED
    assert what_the_client_saw(closed, exited=False) != CLOSED
    assert what_the_client_saw(MCPError(CONNECTION_CLOSED, "some error the server sent"),
                               exited=True) != CLOSED
    assert what_the_client_saw(BrokenPipeError("gone"), exited=True) != CLOSED


def test_a_held_refund_whose_client_never_hung_up_fails_its_cell():
    observed = as_expected(cell_named("supervisor:refund held"))
    observed.requests[1]["hung_up"] = False
    [problem] = judged(observed)
    assert problem.startswith("the held refund's client did not hang up before its answer")


def test_a_worker_that_outlived_the_killed_supervisor_fails_the_held_cell():
    observed = as_expected(cell_named("supervisor:refund held"))
    observed.survivors = [12]
    assert judged(observed) == ["the supervisor's children [12] outlived it"]


def test_a_cell_whose_kill_point_was_never_reached_fails():
    observed = as_expected(cell_named("worker:outcome"))
    observed.killed = False
    assert judged(observed) == ["the kill point was never reached"]


def test_an_extra_refund_fails_a_cell():
    observed = as_expected(cell_named("supervisor:settle"))
    observed.refunds = observed.refunds * 2
    assert "2 refunds at the service, expected 1" in judged(observed)


def test_a_journal_with_a_second_end_fails_a_cell_though_everything_else_is_right():
    observed = as_expected(cell_named("worker:end"))
    observed.journals[RUN].append("End")
    [problem] = judged(observed)
    assert problem.startswith(f"run {RUN}'s journal does not end once, at its end")


def test_docs_crash_matrix_holds_a_passing_row_for_every_cell_as_the_report_prints_it():
    from tests.crash.harness import CELLS, ROOT

    rows = [line for line in (ROOT / "docs" / "crash-matrix.md").read_text().splitlines()
            if line.startswith("| ") and not line.startswith("| cell ")]
    assert len(rows) == len(CELLS)
    for cell, line in zip(CELLS, rows, strict=True):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[:3] == [cell.label, "yes" if cell.once else "no",
                             cell.first], line
        assert cells[-1] == "pass", line


def test_what_a_correct_run_of_each_warm_cell_shows_passes():
    for name in WARM_CELLS:
        assert judged(as_expected_warm(cell_named(name))) == [], name


def test_a_second_run_that_did_not_start_in_the_warm_worker_of_the_first_fails_its_cell():
    observed = as_expected_warm(cell_named("worker:journal#2"))
    observed.started[1] = (RUN, 12)
    assert judged(observed) == ["the cell's call started in worker 12, not in the warm worker 11 "
                                "of the call before it"]


def test_a_call_served_by_the_worker_killed_while_it_rested_fails_its_cell():
    observed = as_expected_warm(cell_named("worker:idle"))
    observed.started[1] = (RUN, 11)
    assert judged(observed) == ["the cell's call started in worker 11, the worker killed after "
                                "the call before it"]


def test_a_resting_worker_the_harness_never_killed_fails_its_cell():
    observed = as_expected_warm(cell_named("worker:idle"))
    observed.killed = False
    assert judged(observed) == ["the resting worker was never killed"]


def test_a_worker_that_died_unused_fails_a_cell():
    observed = as_expected_warm(cell_named("worker:idle"))
    observed.died_unused = [{"event": "worker_died_unused", "how": "worker 11 was killed by "
                                                                  "SIGKILL while idle"}]
    assert judged(observed) == ["workers died unused: ['worker 11 was killed by SIGKILL while idle']"]


def test_an_other_call_that_was_not_done_fails_a_warm_cell():
    observed = as_expected_warm(cell_named("worker:intent#2 (another call at once)"))
    observed.others = [{"seen": CLOSED}]
    assert judged(observed) == [f"the other call 1 was not done: {{'seen': {CLOSED!r}}}"]


def test_two_calls_answered_by_one_refund_fail_a_warm_cell():
    observed = as_expected_warm(cell_named("worker:journal#2"))
    observed.others[0]["structured"]["result"]["refund"] = "re_1"
    assert judged(observed) == ["the calls answered refunds ['re_1', 're_1'], not one each of "
                                "those made ['re_1', 're_2']"]
