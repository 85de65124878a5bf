"""What a verifier answered becomes a principal or a refusal in one place
(supervisor/auth/verdict.py), checked as untrusted data: anything that does not
hold together is a failure of the verifier, and refuses the request."""

from __future__ import annotations

import pytest

from staal.records.messages import Verified
from staal.records.outcomes import Failure
from staal.supervisor.auth.principal import AuthRefusal, Principal
from staal.supervisor.auth.verdict import VERIFIER_ISSUER, judge, unavailable

KEY = "sk-vrf-0d9f2b71aa"


def principal(data) -> Verified:
    return Verified(id=1, principal=data)


def test_a_dict_with_a_subject_is_a_principal_of_the_verifiers_own_issuer_by_default():
    got = judge(principal({"subject": "ops", "scopes": ["tools", "read:runs"]}), (KEY,))
    assert got == Principal(VERIFIER_ISSUER, "ops", None, frozenset({"tools", "read:runs"}))
    full = judge(principal({"subject": "s", "issuer": "https://id.example", "client_id": "c"}), ())
    assert full == Principal("https://id.example", "s", "c", frozenset())


@pytest.mark.parametrize("data, says", [
    ({"subject": 5}, "subject is not a non-empty string"),
    ({"subject": " "}, "subject is not a non-empty string"),
    ({}, "subject is not a non-empty string"),
    ({"subject": "s", "role": "admin"}, "unknown key 'role'"),
    ({"subject": "s", "scopes": "tools"}, "scopes are not a list"),
    ({"subject": "s", "scopes": ["two words"]}, "scopes are not a list"),
    ({"subject": "s", "client_id": 7}, "client_id is not a non-empty string"),
    (["subject"], "a list, not a dict"),
    ("ops", "a string, not a dict"),
    ({"subject": f"user-{KEY}"}, "holds the credential itself"),
    ({"subject": "s", "scopes": [KEY]}, "holds the credential itself"),
])
def test_an_answer_that_does_not_hold_together_is_a_failure_that_never_quotes_the_credential(data, says):
    got = judge(principal(data), (KEY,))
    assert isinstance(got, Failure) and got.kind == "value"
    assert says in got.message
    assert KEY not in got.message


def test_a_refusal_is_401_invalid_token_or_403_with_the_credential_cut_out_of_its_description():
    got = judge(Verified(id=1, refusal={"status": 401, "description": f"unknown key {KEY}"}), (KEY,))
    assert got == AuthRefusal(401, "invalid_token", "unknown key [redacted]")
    assert judge(Verified(id=1, refusal={"status": 401, "description": "none given"}), ()) == \
        AuthRefusal(401, None, "none given")
    assert judge(Verified(id=1, refusal={"status": 403, "description": "not you"}), (KEY,)) == \
        AuthRefusal(403, "insufficient_scope", "not you")


@pytest.mark.parametrize("refusal", [{"status": 200, "description": "x"}, {"status": 401},
                                     {"status": 403, "description": 3}, "no"])
def test_a_refusal_that_is_not_status_and_description_is_a_failure(refusal):
    assert isinstance(judge(Verified(id=1, refusal=refusal), ()), Failure)


def test_a_failure_stays_a_failure_and_the_answer_to_one_is_503_that_blames_no_credential():
    failure = Failure("value", "the verifier raised ValueError: x")
    assert judge(Verified(id=1, failure=failure), ()) is failure
    down = unavailable()
    assert (down.status, down.error) == (503, "temporarily_unavailable")
