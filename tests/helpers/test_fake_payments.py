"""The fake payment service on its own: Stripe's shapes, authentication,
refunds, idempotency and the faults tests use to put an action in doubt."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
import pytest

from tests.helpers.payments import WAIT, Payments


def client(service: Payments, key: str | None = None) -> httpx.Client:
    headers = {} if key == "" else {"Authorization": f"Bearer {key or service.key}"}
    return httpx.Client(base_url=service.base, headers=headers, timeout=WAIT, trust_env=False)


def refund(service: Payments, key: str | None = None, **form: Any) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key else {}
    with client(service) as http:
        return http.post("/v1/refunds", data={k: str(v) for k, v in form.items()}, headers=headers)


def error_of(answer: httpx.Response) -> dict:
    return answer.json()["error"]


# -- authentication -------------------------------------------------------------


def test_a_request_without_a_key_is_401_and_says_so(payments):
    intent = payments.intent()
    with client(payments, key="") as http:
        answer = http.get(f"/v1/payment_intents/{intent['id']}")
    assert answer.status_code == 401
    assert error_of(answer)["type"] == "invalid_request_error"
    assert "did not provide an API key" in error_of(answer)["message"]


def test_a_request_with_another_key_is_401_and_the_key_is_masked(payments):
    intent = payments.intent()
    wrong = "sk_test_" + "x" * 20 + "abcd"
    with client(payments, key=wrong) as http:
        answer = http.get(f"/v1/payment_intents/{intent['id']}")
    assert answer.status_code == 401
    assert wrong not in answer.text and answer.text.count("abcd") == 1


def test_basic_auth_with_the_key_as_user_name_is_accepted(payments):
    intent = payments.intent()
    with httpx.Client(base_url=payments.base, auth=(payments.key, ""), trust_env=False) as http:
        assert http.get(f"/v1/payment_intents/{intent['id']}").status_code == 200


# -- payment intents ------------------------------------------------------------


def test_a_payment_intent_is_read_in_stripes_shape(payments):
    made = payments.intent(amount=12_345, currency="eur")
    with client(payments) as http:
        answer = http.get(f"/v1/payment_intents/{made['id']}")
    assert answer.status_code == 200
    intent = answer.json()
    assert intent["id"].startswith("pi_") and intent["object"] == "payment_intent"
    assert (intent["amount"], intent["amount_received"], intent["currency"], intent["status"]) == (
        12_345, 12_345, "eur", "succeeded")


def test_an_unknown_payment_intent_is_404_resource_missing(payments):
    with client(payments) as http:
        answer = http.get("/v1/payment_intents/pi_nope")
    assert answer.status_code == 404
    assert error_of(answer)["code"] == "resource_missing"
    assert error_of(answer)["message"] == "No such payment_intent: 'pi_nope'"


# -- refunds ------------------------------------------------------------------------


def test_a_refund_is_made_from_a_form_and_answered_as_a_refund_object(payments):
    intent = payments.intent(amount=5000)
    answer = refund(payments, payment_intent=intent["id"], amount=2000, reason="duplicate")
    assert answer.status_code == 200
    made = answer.json()
    assert made["id"].startswith("re_") and made["object"] == "refund"
    assert (made["amount"], made["currency"], made["payment_intent"], made["status"], made["reason"]) == (
        2000, "usd", intent["id"], "succeeded", "duplicate")
    assert payments.refunds() == [made]


def test_a_refund_without_an_amount_refunds_what_is_left(payments):
    intent = payments.intent(amount=5000)
    assert refund(payments, payment_intent=intent["id"], amount=1500).status_code == 200
    rest = refund(payments, payment_intent=intent["id"])
    assert rest.json()["amount"] == 3500


def test_refunds_beyond_what_was_received_are_refused_as_amount_too_large(payments):
    intent = payments.intent(amount=5000)
    assert refund(payments, payment_intent=intent["id"], amount=3000).status_code == 200
    over = refund(payments, payment_intent=intent["id"], amount=2001)
    assert over.status_code == 400
    assert error_of(over)["code"] == "amount_too_large"
    assert error_of(over)["param"] == "amount"
    assert error_of(over)["message"] == (
        "Refund amount ($20.01) is greater than unrefunded amount on charge ($20.00)")
    assert len(payments.refunds()) == 1


def test_a_fully_refunded_payment_is_refused_as_charge_already_refunded(payments):
    intent = payments.intent(amount=5000)
    assert refund(payments, payment_intent=intent["id"]).status_code == 200
    again = refund(payments, payment_intent=intent["id"], amount=1)
    assert again.status_code == 400 and error_of(again)["code"] == "charge_already_refunded"
    assert len(payments.refunds()) == 1


@pytest.mark.parametrize("form, code", [
    ({"amount": "0"}, "parameter_invalid_integer"),
    ({"amount": "12.50"}, "parameter_invalid_integer"),
    ({"reason": "because"}, None),
    ({"currency": "usd"}, "parameter_unknown"),
])
def test_bad_refund_parameters_are_400_and_refund_nothing(payments, form, code):
    intent = payments.intent()
    answer = refund(payments, payment_intent=intent["id"], **form)
    assert answer.status_code == 400
    assert error_of(answer)["type"] == "invalid_request_error"
    assert error_of(answer).get("code") == code
    assert payments.refunds() == []


def test_a_refund_of_an_unknown_payment_intent_is_404(payments):
    answer = refund(payments, payment_intent="pi_nope", amount=100)
    assert answer.status_code == 404 and error_of(answer)["code"] == "resource_missing"


def test_a_payment_that_did_not_succeed_cannot_be_refunded(payments):
    intent = payments.intent(status="requires_payment_method")
    answer = refund(payments, payment_intent=intent["id"], amount=100)
    assert answer.status_code == 400 and error_of(answer)["code"] == "payment_intent_unexpected_state"


def test_every_request_is_recorded_with_its_headers_and_body(payments):
    intent = payments.intent()
    refund(payments, key="k1", payment_intent=intent["id"], amount=100)
    [seen] = payments.requests("POST", "/v1/refunds")
    assert seen["headers"]["idempotency-key"] == "k1"
    assert seen["headers"]["authorization"] == f"Bearer {payments.key}"
    assert seen["headers"]["content-type"] == "application/x-www-form-urlencoded"
    assert seen["body"] == f"payment_intent={intent['id']}&amount=100"
    assert payments.requests("GET") == []


# -- idempotency ----------------------------------------------------------------


def test_the_same_key_and_parameters_get_the_first_answer_again_and_one_refund(payments):
    intent = payments.intent(amount=5000)
    first = refund(payments, key="k1", payment_intent=intent["id"], amount=2000)
    second = refund(payments, key="k1", payment_intent=intent["id"], amount=2000)
    assert (second.status_code, second.json()) == (first.status_code, first.json())
    assert second.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert len(payments.refunds()) == 1


def test_a_saved_error_is_answered_again_too(payments):
    intent = payments.intent(amount=1000)
    first = refund(payments, key="k1", payment_intent=intent["id"], amount=2000)
    assert first.status_code == 400
    payments.intent()  # nothing changes what the key answers
    second = refund(payments, key="k1", payment_intent=intent["id"], amount=2000)
    assert (second.status_code, second.json()) == (400, first.json())


def test_the_same_key_with_other_parameters_is_400_idempotency_error(payments):
    intent = payments.intent(amount=5000)
    assert refund(payments, key="k1", payment_intent=intent["id"], amount=2000).status_code == 200
    other = refund(payments, key="k1", payment_intent=intent["id"], amount=2500)
    assert other.status_code == 400
    assert error_of(other)["type"] == "idempotency_error"
    assert len(payments.refunds()) == 1


def test_a_request_refused_before_the_endpoint_ran_saves_nothing_under_its_key(payments):
    intent = payments.intent(amount=5000)
    assert refund(payments, key="k1", payment_intent=intent["id"], amount="x").status_code == 400
    fixed = refund(payments, key="k1", payment_intent=intent["id"], amount=2000)
    assert fixed.status_code == 200 and len(payments.refunds()) == 1


def test_the_same_key_while_the_first_request_is_processed_is_409_key_in_use(payments):
    intent = payments.intent(amount=5000)
    payments.fault("/v1/refunds", "hang")
    answers: list[httpx.Response] = []
    first = threading.Thread(target=lambda: answers.append(
        refund(payments, key="k1", payment_intent=intent["id"], amount=2000)))
    first.start()
    try:
        payments.wait("/v1/refunds", held=1)
        second = refund(payments, key="k1", payment_intent=intent["id"], amount=2000)
        assert second.status_code == 409
        assert error_of(second)["code"] == "idempotency_key_in_use"
        assert payments.refunds() == []
    finally:
        payments.release()
        first.join(WAIT)
    assert answers[0].status_code == 200
    third = refund(payments, key="k1", payment_intent=intent["id"], amount=2000)
    assert third.json() == answers[0].json()
    assert len(payments.refunds()) == 1


# -- faults ---------------------------------------------------------------------


def test_fail_answers_500_api_error_and_does_nothing(payments):
    intent = payments.intent(amount=5000)
    payments.fault("/v1/refunds", "fail")
    failed = refund(payments, key="k1", payment_intent=intent["id"], amount=2000)
    assert failed.status_code == 500 and error_of(failed)["type"] == "api_error"
    assert payments.refunds() == []
    retried = refund(payments, key="k1", payment_intent=intent["id"], amount=2000)
    assert retried.status_code == 200 and len(payments.refunds()) == 1


def test_fail_saved_answers_500_and_the_key_gets_that_500_again_as_stripe_saves_it(payments):
    intent = payments.intent(amount=5000)
    payments.fault("/v1/refunds", "fail_saved")
    failed = refund(payments, key="k1", payment_intent=intent["id"], amount=2000)
    assert failed.status_code == 500 and error_of(failed)["type"] == "api_error"
    retried = refund(payments, key="k1", payment_intent=intent["id"], amount=2000)
    assert retried.status_code == 500 and retried.headers["idempotent-replayed"] == "true"
    assert retried.json() == failed.json()
    assert payments.refunds() == []
    # Another key is another request: the fault is spent, so it refunds.
    other = refund(payments, key="k2", payment_intent=intent["id"], amount=2000)
    assert other.status_code == 200 and len(payments.refunds()) == 1


def test_fail_after_refunds_then_answers_500_and_the_key_gets_the_refund(payments):
    intent = payments.intent(amount=5000)
    payments.fault("/v1/refunds", "fail_after")
    failed = refund(payments, key="k1", payment_intent=intent["id"], amount=2000)
    assert failed.status_code == 500
    [made] = payments.refunds()
    retried = refund(payments, key="k1", payment_intent=intent["id"], amount=2000)
    assert retried.status_code == 200 and retried.json() == made
    assert len(payments.refunds()) == 1


def test_close_drops_the_connection_without_an_answer_or_a_refund(payments):
    intent = payments.intent(amount=5000)
    payments.fault("/v1/refunds", "close")
    with pytest.raises(httpx.RemoteProtocolError):
        refund(payments, key="k1", payment_intent=intent["id"], amount=2000)
    assert payments.refunds() == []


def test_close_after_refunds_then_drops_the_connection(payments):
    intent = payments.intent(amount=5000)
    payments.fault("/v1/refunds", "close_after")
    with pytest.raises(httpx.RemoteProtocolError):
        refund(payments, key="k1", payment_intent=intent["id"], amount=2000)
    [made] = payments.refunds()
    retried = refund(payments, key="k1", payment_intent=intent["id"], amount=2000)
    assert retried.json() == made and len(payments.refunds()) == 1


def test_hang_holds_a_request_until_it_is_released(payments):
    intent = payments.intent()
    payments.fault(f"/v1/payment_intents/{intent['id']}", "hang")
    answers: list[httpx.Response] = []

    def read() -> None:
        with client(payments) as http:
            answers.append(http.get(f"/v1/payment_intents/{intent['id']}"))

    reader = threading.Thread(target=read)
    reader.start()
    payments.wait(f"/v1/payment_intents/{intent['id']}", held=1)
    assert answers == []
    payments.release()
    reader.join(WAIT)
    assert answers[0].status_code == 200


def test_a_held_refund_whose_client_hung_up_is_still_made_and_the_service_says_nobody_heard(payments):
    """As a real service does when its client dies mid-request: the work is
    done, the answer goes nowhere, and the key keeps it for a retry."""
    import socket

    intent = payments.intent(amount=5000)
    payments.fault("/v1/refunds", "hang")
    form = f"payment_intent={intent['id']}&amount=2000".encode()
    with socket.create_connection(("127.0.0.1", payments.port), timeout=WAIT) as raw:
        raw.sendall(b"POST /v1/refunds HTTP/1.1\r\nHost: x\r\n"
                    + f"Authorization: Bearer {payments.key}\r\nIdempotency-Key: k1\r\n".encode()
                    + b"Content-Type: application/x-www-form-urlencoded\r\n"
                    + f"Content-Length: {len(form)}\r\n\r\n".encode() + form)
        payments.wait("/v1/refunds", held=1)
        [held] = payments.requests("POST")
        assert not held["finished"] and not held["hung_up"]
    payments.release()
    payments.wait("/v1/refunds", finished=1)
    [made] = payments.refunds()
    [held] = payments.requests("POST")
    assert held["finished"] and held["hung_up"]
    retried = refund(payments, key="k1", payment_intent=intent["id"], amount=2000)
    assert retried.json() == made and retried.headers["idempotent-replayed"] == "true"
    answered = payments.requests("POST")[1]
    assert answered["finished"] and not answered["hung_up"]


def test_a_hang_that_is_never_released_ends_after_its_hold(payments):
    intent = payments.intent()
    payments.fault(f"/v1/payment_intents/{intent['id']}", "hang", hold_ms=50)
    with client(payments) as http:
        assert http.get(f"/v1/payment_intents/{intent['id']}").status_code == 200


def test_a_fault_lasts_for_the_number_of_requests_it_was_set_for(payments):
    intent = payments.intent()
    path = f"/v1/payment_intents/{intent['id']}"
    payments.fault(path, "fail", times=2)
    with client(payments) as http:
        assert [http.get(path).status_code for _ in range(3)] == [500, 500, 200]


def test_waiting_for_what_never_comes_is_answered_408_in_bounded_time(payments):
    answer = payments.client.get("/_control/wait", params={"requests": 1, "timeout_ms": 50})
    assert answer.status_code == 408


# -- the power-loss test's controls -------------------------------------------------


def test_reset_forgets_every_intent_refund_request_and_key(payments):
    intent = payments.intent()
    assert refund(payments, key="k1", payment_intent=intent["id"], amount=100).status_code == 200
    payments.reset()
    assert payments.refunds() == [] and payments.requests() == []
    again = payments.intent(id=intent["id"])
    # The key is forgotten too: the same key makes a new refund.
    assert refund(payments, key="k1", payment_intent=again["id"], amount=100).status_code == 200
    assert len(payments.refunds()) == 1


def test_with_record_it_marks_each_new_refund_post_as_it_arrives_and_each_refund_made(tmp_path):
    recording = tmp_path / "recording.jsonl"
    service = Payments(record=recording)
    try:
        intent = service.intent()
        for _ in range(2):  # the second is answered from the key: no new mark
            refund(service, key="k1", payment_intent=intent["id"], amount=100)
        refund(service, key="k2", payment_intent=intent["id"], amount=10**9)  # refused
    finally:
        service.stop()
    marks = [json.loads(line) for line in recording.read_text().splitlines()]
    assert [(m["op"], m["what"], m["key"]) for m in marks] == [
        ("mark", "post", "k1"), ("mark", "refund", "k1"), ("mark", "post", "k2")]
    assert marks[1]["body"] == f"payment_intent={intent['id']}&amount=100"
