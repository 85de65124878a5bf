"""`payments.stripe.refund` end to end: `staal run`, `resume` and `resolve`
in their own processes against the fake payment service, with the secret
key passed through the environment as an operator would."""

from __future__ import annotations

import json
from urllib.parse import parse_qs

import pytest

from tests.helpers.payments import WAIT, Payments
from tests.helpers.runs import Done, Workspace

# The DESIGN.md section 3 example (examples/refund.py).
REFUND = """
from staal import Money, fail
from staal.caps import StripeRefund

def main(order: str, amount: Money, pay: StripeRefund,
         reason: str = "requested_by_customer") -> dict:
    intent = pay.payment_intent(order)            # a journaled GET
    if amount > Money.from_minor(intent["amount_received"], intent["currency"]):
        fail("validation", "refund exceeds what was paid")
    refund = pay.refund(order, amount, reason)    # a journaled, idempotent POST, checked by the broker
    print("refunded", refund["id"])               # journaled, goes to stderr, never to the client
    return {"refund": refund["id"], "status": refund["status"]}
"""

TWICE = """
from staal import Money
from staal.caps import StripeRefund

def main(order: str, amount: Money, pay: StripeRefund) -> dict:
    first = pay.refund(order, amount, "requested_by_customer")
    second = pay.refund(order, amount, "duplicate")
    return {"refunds": [first["id"], second["id"]]}
"""

ENV = "STRIPE_SECRET_KEY"
KILL_AT_REFUND_INTENT = {"STAAL_TEST_KILL_POINTS": "1", "STAAL_KILL_AT": "worker:intent#2"}
USD20 = {"amount": "20.00", "currency": "USD"}


def grant(base: str, get_only: str = "/v1/payment_intents/*", post_only: str = "/v1/refunds",
          **limits) -> dict:
    limits = limits or {"each": {"amount": "50.00", "currency": "USD"}, "uses": 1}
    return {
        "cap": "payments.stripe.refund", **limits, "base_url": base,
        "needs": {
            "get": {"cap": "net.http.get", "only": [base + get_only]},
            "post": {"cap": "net.http.post", "only": [base + post_only], "idempotency_key": True},
            "key": {"env": ENV},
        },
    }


def workspace(tmp_path, payments: Payments, program: str = REFUND, amount: dict = USD20,
              paid: int = 5000, reason: str | None = None, run_limits: dict | None = None,
              timeout_ms: int = 5000, **grant_fields) -> tuple[Workspace, dict]:
    intent = payments.intent(amount=paid)
    ws = Workspace(tmp_path)
    ws.program(program)
    inputs = {"order": intent["id"], "amount": amount}
    if reason is not None:
        inputs["reason"] = reason
    ws.config(grants={"pay": grant(payments.base, **grant_fields)}, inputs=inputs,
              net={"timeout_ms": timeout_ms, "connect_timeout_ms": 2000}, limits=run_limits or {})
    return ws, intent


def secret(payments: Payments) -> dict[str, str]:
    return {ENV: payments.key}


def run_id(ws: Workspace) -> str:
    return ws.records("header")[0]["run"]


def refused(done: Done, message: str) -> None:
    assert done.code == 1, done.stderr
    assert done.outcome["failure"] == {"kind": "capability", "message": message}


def no_refund_asked(payments: Payments) -> None:
    assert payments.requests("POST") == []
    assert payments.refunds() == []


def kept_secret(ws: Workspace, payments: Payments, *done: Done) -> None:
    for answer in done:
        assert payments.key not in answer.stdout and payments.key not in answer.stderr
    assert payments.key not in (ws.root / "run.journal").read_text()


def kill_while_the_service_holds_the_refund(ws: Workspace, payments: Payments) -> None:
    payments.fault("/v1/refunds", "hang")
    process = ws.spawn_run(env=secret(payments))
    try:
        payments.wait("/v1/refunds", held=1)
    finally:
        process.kill()
        process.communicate(timeout=WAIT)
    assert process.returncode == -9


# -- a refund ---------------------------------------------------------------------


def test_a_refund_within_the_limits_is_done_and_usage_reports_the_refunded_money(tmp_path, payments):
    ws, intent = workspace(tmp_path, payments)
    done = ws.run(env=secret(payments))
    assert done.code == 0, done.stderr
    [refund] = payments.refunds()
    assert done.outcome["result"] == {"refund": refund["id"], "status": "succeeded"}
    assert (refund["amount"], refund["currency"], refund["payment_intent"], refund["reason"]) == (
        2000, "usd", intent["id"], "requested_by_customer")
    assert done.outcome["usage"] == {"pay": {"actions": 2, "charged": [USD20]}}
    assert ws.records("end")[0]["usage"]["pay"]["charged"] == [USD20]
    assert f"refunded {refund['id']}" in done.stderr


def test_the_requests_carry_the_bearer_key_and_the_refund_is_form_encoded_in_minor_units(tmp_path, payments):
    ws, intent = workspace(tmp_path, payments, amount={"amount": "12.5", "currency": "USD"},
                           reason="duplicate")
    assert ws.run(env=secret(payments)).code == 0
    [get] = payments.requests("GET")
    assert get["path"] == f"/v1/payment_intents/{intent['id']}"
    assert get["headers"]["authorization"] == f"Bearer {payments.key}"
    [post] = payments.requests("POST")
    assert post["headers"]["authorization"] == f"Bearer {payments.key}"
    assert post["headers"]["content-type"] == "application/x-www-form-urlencoded"
    assert parse_qs(post["body"]) == {"payment_intent": [intent["id"]], "amount": ["1250"],
                                      "reason": ["duplicate"]}


def test_the_refund_post_carries_the_run_id_and_op_as_its_idempotency_key(tmp_path, payments):
    ws, _ = workspace(tmp_path, payments)
    done = ws.run(env=secret(payments))
    [post] = payments.requests("POST")
    assert post["headers"]["idempotency-key"] == f"{done.outcome['run']}-2"
    assert "idempotency-key" not in payments.requests("GET")[0]["headers"]
    assert ws.records("intent")[1]["idempotency_key"] == f"{done.outcome['run']}-2"


def test_a_refund_stripe_refuses_fails_the_run_as_action_with_stripes_message(tmp_path, payments):
    ws, intent = workspace(tmp_path, payments, paid=3000)
    # Someone refunded most of it already, outside this run.
    payments.client.post("/v1/refunds", data={"payment_intent": intent["id"], "amount": "1500"},
                         headers={"Authorization": f"Bearer {payments.key}"}).raise_for_status()
    done = ws.run(env=secret(payments))
    assert done.code == 1
    failure = done.outcome["failure"]
    assert failure["kind"] == "action"
    assert "amount_too_large" in failure["message"]
    assert "Refund amount ($20.00) is greater than unrefunded amount on charge ($15.00)" in failure["message"]
    assert done.outcome["usage"] == {"pay": {"actions": 2, "charged": []}}
    assert len(payments.refunds()) == 1
    kept_secret(ws, payments, done)


def test_a_wrong_key_fails_as_action_and_refunds_nothing(tmp_path, payments):
    ws, _ = workspace(tmp_path, payments)
    done = ws.run(env={ENV: "sk_test_not_the_key_1234"})
    assert done.code == 1
    assert done.outcome["failure"]["kind"] == "action"
    assert "answered 401" in done.outcome["failure"]["message"]
    no_refund_asked(payments)


# -- the broker's refusals: nothing reaches the service ----------------------------


def test_a_refund_over_each_is_refused_and_no_refund_is_asked(tmp_path, payments):
    ws, _ = workspace(tmp_path, payments, amount={"amount": "300", "currency": "USD"}, paid=50_000)
    done = ws.run(env=secret(payments))
    refused(done, "'payments.stripe.refund' allows at most 50.00 USD per action; "
                  "this action needs 300.00 USD")
    no_refund_asked(payments)
    assert done.outcome["usage"] == {"pay": {"actions": 1, "charged": []}}


def test_refunds_over_max_across_two_actions_are_refused_at_the_second(tmp_path, payments):
    ws, _ = workspace(tmp_path, payments, program=TWICE, amount={"amount": "30", "currency": "USD"},
                      max={"amount": "50.00", "currency": "USD"})
    done = ws.run(env=secret(payments))
    refused(done, "'payments.stripe.refund' allows at most 50.00 USD per run; 30.00 USD is "
                  "already asked for and this action needs 30.00 USD")
    assert len(payments.requests("POST")) == 1 and len(payments.refunds()) == 1
    assert done.outcome["usage"] == {"pay": {"actions": 1, "charged": [
        {"amount": "30.00", "currency": "USD"}]}}


def test_a_refund_over_uses_is_refused_and_reading_the_intent_is_not_a_use(tmp_path, payments):
    program = """
from staal import Money
from staal.caps import StripeRefund

def main(order: str, amount: Money, pay: StripeRefund) -> dict:
    pay.payment_intent(order)
    first = pay.refund(order, amount, "requested_by_customer")
    second = pay.refund(order, amount, "duplicate")
    return {"refunds": [first["id"], second["id"]]}
"""
    ws, _ = workspace(tmp_path, payments, program=program, amount={"amount": "10", "currency": "USD"})
    done = ws.run(env=secret(payments))
    refused(done, "'payments.stripe.refund' allows 1 action per run; this would be action 2")
    assert len(payments.requests("GET")) == 1
    assert len(payments.requests("POST")) == 1 and len(payments.refunds()) == 1


def test_the_get_needs_own_uses_bound_the_reads(tmp_path, payments):
    program = REFUND.replace("intent = pay.payment_intent(order)",
                             "pay.payment_intent(order)\n    intent = pay.payment_intent(order)")
    ws, _ = workspace(tmp_path, payments, program=program)
    config = json.loads((tmp_path / "config.json").read_text())
    config["grants"]["pay"]["needs"]["get"]["uses"] = 1
    (tmp_path / "config.json").write_text(json.dumps(config))
    done = ws.run(env=secret(payments))
    refused(done, "'net.http.get' allows 1 action per run; this would be action 2")
    assert len(payments.requests("GET")) == 1
    no_refund_asked(payments)


def test_a_read_outside_the_get_needs_only_is_refused_and_nothing_is_sent(tmp_path, payments):
    ws, intent = workspace(tmp_path, payments, get_only="/v1/customers/*")
    done = ws.run(env=secret(payments))
    refused(done, f"'net.http.get' does not allow {payments.base}/v1/payment_intents/{intent['id']}; "
                  f"it allows {payments.base}/v1/customers/*")
    assert payments.requests() == []
    assert payments.refunds() == []


def test_a_refund_outside_the_post_needs_only_is_refused_and_no_refund_is_asked(tmp_path, payments):
    ws, _ = workspace(tmp_path, payments, post_only="/v1/charges")
    done = ws.run(env=secret(payments))
    refused(done, f"'net.http.post' does not allow {payments.base}/v1/refunds; "
                  f"it allows {payments.base}/v1/charges")
    no_refund_asked(payments)


def test_a_missing_secret_is_refused_before_anything_is_journaled_or_sent(tmp_path, payments):
    ws, _ = workspace(tmp_path, payments)
    done = ws.run()
    refused(done, "'payments.stripe.refund' needs the secret STRIPE_SECRET_KEY, which is not set "
                  "in the server's environment")
    assert payments.requests() == []
    assert payments.refunds() == []
    assert ws.records("intent") == []


def test_a_reason_stripe_does_not_know_is_refused_and_no_refund_is_asked(tmp_path, payments):
    ws, _ = workspace(tmp_path, payments, reason="because")
    done = ws.run(env=secret(payments))
    refused(done, "'payments.stripe.refund' takes a reason of duplicate, fraudulent, "
                  "requested_by_customer, not 'because'")
    no_refund_asked(payments)


def test_an_intent_id_that_would_change_the_url_is_refused_and_nothing_is_sent(tmp_path, payments):
    ws, _ = workspace(tmp_path, payments)
    config = json.loads((tmp_path / "config.json").read_text())
    config["inputs"]["order"] = "pi_1/../../v1/refunds"
    (tmp_path / "config.json").write_text(json.dumps(config))
    done = ws.run(env=secret(payments))
    assert done.outcome["failure"]["kind"] == "capability"
    assert "pi_1/../../v1/refunds" in done.outcome["failure"]["message"]
    assert payments.requests() == []
    assert payments.refunds() == []


def test_a_refund_in_another_currency_than_the_payment_is_refused(tmp_path, payments):
    program = """
from staal import Money
from staal.caps import StripeRefund

def main(order: str, amount: Money, pay: StripeRefund) -> dict:
    pay.payment_intent(order)
    return pay.refund(order, amount, "duplicate")
"""
    ws, intent = workspace(tmp_path, payments, program=program,
                           amount={"amount": "20", "currency": "EUR"},
                           each={"amount": "50.00", "currency": "EUR"})
    done = ws.run(env=secret(payments))
    refused(done, f"'payments.stripe.refund' cannot refund 20.00 EUR of {intent['id']}, "
                  "which was paid in USD")
    no_refund_asked(payments)


# -- answers lost, runs killed, operators ------------------------------------------


@pytest.mark.parametrize("fault", ["close_after", "fail_after", "close", "fail"])
def test_a_refund_whose_answer_is_lost_is_sent_again_with_its_key_inside_the_run(tmp_path, payments, fault):
    ws, _ = workspace(tmp_path, payments)
    payments.fault("/v1/refunds", fault)
    done = ws.run(env=secret(payments))
    assert done.code == 0, done.stderr
    posts = payments.requests("POST")
    assert len(posts) == 2
    assert {p["headers"]["idempotency-key"] for p in posts} == {f"{done.outcome['run']}-2"}
    assert posts[0]["body"] == posts[1]["body"]
    [refund] = payments.refunds()
    assert done.outcome["result"]["refund"] == refund["id"]
    assert done.outcome["usage"]["pay"]["charged"] == [USD20]
    assert [r["op"] for r in ws.records("intent")] == [1, 2]


def test_a_refund_whose_answers_keep_being_lost_is_sent_again_until_one_arrives_and_made_once(
        tmp_path, payments):
    ws, _ = workspace(tmp_path, payments)
    payments.fault("/v1/refunds", "fail_after", times=3)
    done = ws.run(env=secret(payments))
    assert done.code == 0, done.stderr
    [refund] = payments.refunds()
    assert done.outcome["result"]["refund"] == refund["id"]
    assert done.outcome["usage"]["pay"] == {"actions": 2, "charged": [USD20]}
    posts = payments.requests("POST")
    assert len(posts) == 4
    assert {p["headers"]["idempotency-key"] for p in posts} == {f"{run_id(ws)}-2"}
    assert ws.records("stopped") == []


def test_a_refund_that_timed_out_is_sent_again_under_its_key_and_done_once_the_service_answers(
        tmp_path, payments):
    """The answer is late (held 2.5 s, past net.timeout_ms), as when the
    instance was paused: the refund is sent again under its key, answered
    409 while the first is still being processed, then with the first's
    refund; nothing waits for an operator."""
    ws, _ = workspace(tmp_path, payments, timeout_ms=1000)
    payments.fault("/v1/refunds", "hang", hold_ms=2500)
    done = ws.run(env=secret(payments))
    assert done.code == 0, done.stderr
    [refund] = payments.refunds()
    assert done.outcome["result"] == {"refund": refund["id"], "status": "succeeded"}
    assert done.outcome["usage"]["pay"]["charged"] == [USD20]
    posts = payments.requests("POST")
    assert len(posts) >= 2
    assert {p["headers"]["idempotency-key"] for p in posts} == {f"{run_id(ws)}-2"}
    assert ws.records("stopped") == []


def test_a_saved_500_keeps_the_run_waiting_and_after_did_not_happen_a_new_key_refunds_once(
        tmp_path, payments):
    """Stripe saves a 500 under its key once the endpoint ran and gives it to
    every retry with that key for 24 hours: resends with the key cannot
    settle it, and the attempt an operator's "did not happen" allows goes
    out under a key of its own."""
    ws, _ = workspace(tmp_path, payments)
    payments.fault("/v1/refunds", "fail_saved")
    assert ws.run(env=secret(payments)).code == 3
    again = ws.resume(env=secret(payments))
    assert again.code == 3 and again.outcome["op"] == 2
    assert "answered 500" in again.outcome["message"]
    key = f"{run_id(ws)}-2"
    assert {p["headers"]["idempotency-key"] for p in payments.requests("POST")} == {key}
    assert payments.refunds() == []

    resolved = ws.staal("resolve", "--journal", "run.journal", "--op", "2", "--happened", "no")
    assert resolved.code == 0, resolved.stderr
    done = ws.resume(env=secret(payments))
    assert done.code == 0, done.stderr
    posts = payments.requests("POST")
    assert [p["headers"]["idempotency-key"] for p in posts][-1] == f"{key}-2"
    assert {p["body"] for p in posts} == {posts[0]["body"]}  # the same refund, asked again
    [refund] = payments.refunds()
    assert done.outcome["result"]["refund"] == refund["id"]
    assert [r["idempotency_key"] for r in ws.records("intent") if r["op"] == 2] == [key, f"{key}-2"]


def test_journal_show_tells_the_whole_history_of_an_op_an_operator_answered(tmp_path, payments):
    """The first attempt in doubt, the stop, the operator's "did not happen"
    and when, the new attempt under its new key and its outcome, in order."""
    ws, _ = workspace(tmp_path, payments)
    payments.fault("/v1/refunds", "fail_saved")
    assert ws.run(env=secret(payments)).code == 3
    assert ws.staal("resolve", "--journal", "run.journal", "--op", "2", "--happened", "no").code == 0
    assert ws.resume(env=secret(payments)).code == 0
    shown = ws.staal("journal", "show", "run.journal")
    assert shown.code == 0, shown.stderr
    key = f"{run_id(ws)}-2"
    story = [line for line in shown.stdout.splitlines() if line.startswith(("op   2", "STOPPED",
                                                                             "END", "         "))]
    expected = [
        ("op   2  intent  payments.stripe.refund refund through 'pay'", f"key {key}"),
        ("STOPPED at op 2, ", "may or may not have happened"),
        ("op   2  resolved by an operator at ", ": did not happen"),
        ("op   2  intent (attempt 2)  payments.stripe.refund refund through 'pay'", f"key {key}-2"),
        ("         outcome ", "charged 20.00 USD"),
        ("END ", "done: "),
    ]
    later = [line for line in story if not line.startswith("         outcome {\"amount\": 5000")]
    assert len(later) == len(expected), shown.stdout
    for line, (start, part) in zip(later, expected, strict=True):
        assert line.startswith(start) and part in line, (line, start, part)


def test_journal_show_names_a_file_that_is_missing_or_is_not_a_journal(tmp_path):
    ws = Workspace(tmp_path)
    missing = ws.staal("journal", "show", "nothing.journal")
    assert missing.code == 2 and missing.stderr.strip() == "nothing.journal: no such file"
    (tmp_path / "manifest.json").write_text(json.dumps({"server": {"name": "x"}}, indent=2))
    manifest = ws.staal("journal", "show", "manifest.json")
    assert manifest.code == 2
    assert manifest.stderr.startswith("manifest.json: not a staal journal: its first line is not "
                                      "a journal header"), manifest.stderr
    (tmp_path / "other.jsonl").write_text('{"v": 1, "type": "reserve"}\n')
    other = ws.staal("journal", "show", "other.jsonl")
    assert other.code == 2 and "other.jsonl: not a staal journal" in other.stderr
    assert "Traceback" not in missing.stderr + manifest.stderr + other.stderr


def test_a_new_attempt_whose_answer_is_lost_is_resent_under_its_own_key(tmp_path, payments):
    ws, _ = workspace(tmp_path, payments)
    payments.fault("/v1/refunds", "fail_saved")
    assert ws.run(env=secret(payments)).code == 3
    assert ws.staal("resolve", "--journal", "run.journal", "--op", "2", "--happened", "no").code == 0
    # The new attempt's intent is written, then the worker dies before sending it.
    killed = ws.resume(env={**secret(payments), "STAAL_TEST_KILL_POINTS": "1",
                            "STAAL_KILL_AT": "worker:intent"})
    assert killed.code == -9
    key = f"{run_id(ws)}-2"
    assert [r["idempotency_key"] for r in ws.records("intent") if r["op"] == 2] == [key, f"{key}-2"]

    done = ws.resume(env=secret(payments))
    assert done.code == 0, done.stderr
    assert payments.requests("POST")[-1]["headers"]["idempotency-key"] == f"{key}-2"
    assert len(payments.refunds()) == 1


def test_a_run_killed_before_the_refund_is_sent_refunds_exactly_once_on_resume(tmp_path, payments):
    ws, _ = workspace(tmp_path, payments)
    killed = ws.run(env={**secret(payments), **KILL_AT_REFUND_INTENT})
    assert killed.code == -9 and killed.stdout == ""
    assert payments.requests("POST") == []

    done = ws.resume(env=secret(payments))
    assert done.code == 0, done.stderr
    [post] = payments.requests("POST")
    assert post["headers"]["idempotency-key"] == f"{run_id(ws)}-2"
    assert len(payments.refunds()) == 1
    assert len(payments.requests("GET")) == 1  # the read was replayed from the journal
    assert done.outcome["usage"]["pay"] == {"actions": 2, "charged": [USD20]}


def test_a_run_killed_while_the_service_holds_the_refund_resends_it_with_the_same_key(tmp_path, payments):
    ws, _ = workspace(tmp_path, payments)
    kill_while_the_service_holds_the_refund(ws, payments)
    payments.release()
    payments.wait(refunds=1)

    done = ws.resume(env=secret(payments))
    assert done.code == 0, done.stderr
    [refund] = payments.refunds()
    assert done.outcome["result"] == {"refund": refund["id"], "status": "succeeded"}
    posts = payments.requests("POST")
    assert len(posts) == 2
    assert [p["headers"]["idempotency-key"] for p in posts] == [f"{run_id(ws)}-2"] * 2
    assert done.outcome["usage"]["pay"]["charged"] == [USD20]


def test_a_key_still_in_use_when_the_deadline_passes_is_in_doubt_never_a_failure(tmp_path, payments):
    ws, _ = workspace(tmp_path, payments, run_limits={"deadline_ms": 3000})
    kill_while_the_service_holds_the_refund(ws, payments)

    # The service is still working on the first request (held for 60 s):
    # 409 idempotency_key_in_use to every attempt until the run's deadline.
    stopped = ws.resume(env=secret(payments))
    assert stopped.code == 3, stopped.stderr
    assert stopped.outcome["outcome"] == "stopped" and stopped.outcome["op"] == 2
    assert "failure" not in stopped.outcome
    assert "may or may not have happened" in stopped.outcome["message"]
    assert "409 (idempotency_key_in_use)" in stopped.outcome["message"]
    assert "the run's deadline (3000 ms from its start) passed" in stopped.outcome["message"]
    assert [o for o in ws.records("outcome") if o["op"] == 2] == []
    assert payments.refunds() == []

    payments.release()
    payments.wait(refunds=1)
    done = ws.resume(env=secret(payments))
    assert done.code == 0, done.stderr
    [refund] = payments.refunds()
    assert done.outcome["result"]["refund"] == refund["id"]


def test_a_resend_that_cannot_reach_the_service_leaves_the_refund_in_doubt(tmp_path, payments):
    # No deadline: the resend is tried again for the run's max_wait.
    ws, _ = workspace(tmp_path, payments, run_limits={"wait_ms": 2000})
    kill_while_the_service_holds_the_refund(ws, payments)
    payments.stop()  # the service, with the first request in hand, goes away too

    stopped = ws.resume(env=secret(payments))
    assert stopped.code == 3, stopped.stderr
    assert stopped.outcome["outcome"] == "stopped" and stopped.outcome["op"] == 2
    assert "may have happened" in stopped.outcome["message"]
    assert "could not be sent" in stopped.outcome["message"]
    assert "max_wait (2 s)" in stopped.outcome["message"]
    assert [o for o in ws.records("outcome") if o["op"] == 2] == []


def test_a_resend_refused_with_401_leaves_the_refund_in_doubt_until_the_key_is_right(tmp_path, payments):
    ws, _ = workspace(tmp_path, payments)
    kill_while_the_service_holds_the_refund(ws, payments)
    payments.release()
    payments.wait(refunds=1)

    stopped = ws.resume(env={ENV: "sk_test_rotated_meanwhile"})
    assert stopped.code == 3, stopped.stderr
    assert "answered 401" in stopped.outcome["message"]
    done = ws.resume(env=secret(payments))
    assert done.code == 0, done.stderr
    assert len(payments.refunds()) == 1


def age_refund_intent(ws: Workspace, hours: int = 25) -> None:
    journal = ws.root / "run.journal"
    lines = journal.read_text().splitlines()
    for i, line in enumerate(lines):
        record = json.loads(line)
        if record["type"] == "intent" and record["op"] == 2:
            record["time"] -= hours * 3_600_000
            lines[i] = json.dumps(record, separators=(",", ":"), sort_keys=True)
    journal.write_text("\n".join(lines) + "\n")


def test_a_resume_more_than_a_day_after_the_intent_does_not_resend_and_waits(tmp_path, payments):
    ws, _ = workspace(tmp_path, payments)
    assert ws.run(env={**secret(payments), **KILL_AT_REFUND_INTENT}).code == -9
    age_refund_intent(ws)

    stopped = ws.resume(env=secret(payments))
    assert stopped.code == 3
    assert stopped.outcome["outcome"] == "stopped" and stopped.outcome["op"] == 2
    assert "staal resolve --journal run.journal --op 2" in stopped.outcome["message"]
    assert payments.requests("POST") == []
    assert payments.refunds() == []


def test_resolving_that_it_happened_finishes_with_usage_from_that_result_and_no_request(tmp_path, payments):
    ws, _ = workspace(tmp_path, payments)
    assert ws.run(env={**secret(payments), **KILL_AT_REFUND_INTENT}).code == -9
    age_refund_intent(ws)
    assert ws.resume(env=secret(payments)).code == 3

    found = {"id": "re_found", "object": "refund", "amount": 1500, "currency": "usd",
             "status": "succeeded"}
    resolved = ws.staal("resolve", "--journal", "run.journal", "--op", "2", "--happened", "yes",
                        "--result", json.dumps(found))
    assert resolved.code == 0, resolved.stderr
    done = ws.resume(env=secret(payments))
    assert done.code == 0, done.stderr
    assert done.outcome["result"] == {"refund": "re_found", "status": "succeeded"}
    assert done.outcome["usage"] == {"pay": {"actions": 2, "charged": [
        {"amount": "15.00", "currency": "USD"}]}}
    assert payments.requests("POST") == []
    assert payments.refunds() == []


def test_resolving_that_it_did_not_happen_sends_it_once_on_resume(tmp_path, payments):
    ws, _ = workspace(tmp_path, payments)
    assert ws.run(env={**secret(payments), **KILL_AT_REFUND_INTENT}).code == -9
    age_refund_intent(ws)
    resolved = ws.staal("resolve", "--journal", "run.journal", "--op", "2", "--happened", "no")
    assert resolved.code == 0, resolved.stderr
    done = ws.resume(env=secret(payments))
    assert done.code == 0, done.stderr
    assert len(payments.requests("POST")) == 1 and len(payments.refunds()) == 1


BAD_RESULTS = [
    {"id": "re_1", "amount": "20.00", "currency": "usd"},
    {"id": "re_1", "amount": 2000},
    {"id": "re_1", "amount": 2000, "currency": "dollars"},
    {"amount": 2000, "currency": "usd"},
    {"id": "re_1", "object": "payment_intent", "amount": 2000, "currency": "usd"},
    [2000, "usd"],
]


def test_an_answer_that_it_happened_needs_a_refund_object(tmp_path, payments):
    ws, _ = workspace(tmp_path, payments)
    assert ws.run(env={**secret(payments), **KILL_AT_REFUND_INTENT}).code == -9
    age_refund_intent(ws)
    for result in BAD_RESULTS:
        resolved = ws.staal("resolve", "--journal", "run.journal", "--op", "2", "--happened", "yes",
                            "--result", json.dumps(result))
        assert resolved.code == 2, result
        assert "--result" in resolved.stderr
    assert ws.records("resolved") == []
    assert payments.requests("POST") == []


# -- the secret --------------------------------------------------------------------


def test_the_secret_key_never_appears_in_output_or_the_journal(tmp_path, payments):
    ws, _ = workspace(tmp_path, payments)
    payments.fault("/v1/refunds", "close_after")
    done = ws.run(env=secret(payments))
    assert done.code == 0, done.stderr
    assert payments.key in payments.requests("POST")[0]["headers"]["authorization"]
    kept_secret(ws, payments, done)
    shown = ws.staal("journal", "show", "run.journal")
    assert payments.key not in shown.stdout + shown.stderr
