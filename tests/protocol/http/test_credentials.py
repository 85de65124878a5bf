"""The credential headers of a request, sans I/O (issue 14, item 3): taken
out of the head before the MCP layer sees it (protocol/http/auth.py, as
Authorization is), shown alone to a verifier, and their values cut out of
what is logged; a verifier's refusal as the client sees it."""

from __future__ import annotations

import orjson

from staal.protocol.http.auth import challenge, without_headers
from staal.protocol.http.credentials import credential_values, only_credentials, redact_credentials
from staal.protocol.http.messages import Head

KEY = "sk-vrf-5c1a9e7d03"
HEAD = Head.of("POST", "/mcp?x=1", [
    ("Content-Type", "application/json"), ("X-Api-Key", KEY), ("Authorization", f"Bearer tok-{KEY}"),
    ("mcp-method", "tools/call"), ("x-api-key", "second-value-77"),
])


def test_the_named_credential_headers_are_removed_in_any_case_and_the_rest_kept():
    head = without_headers(HEAD, ["x-api-key"])  # the manifest keeps them in lower case
    assert dict(head.headers) == {"content-type": ("application/json",), "mcp-method": ("tools/call",)}
    assert (head.method, head.path) == ("POST", "/mcp")
    assert KEY not in repr(head)


def test_a_verifier_is_shown_only_the_named_headers_with_every_value():
    assert only_credentials(HEAD, ["x-api-key"]) == {"x-api-key": (KEY, "second-value-77")}
    assert only_credentials(HEAD, ["x-other"]) == {}


def test_credential_values_hold_each_value_and_a_schemes_token_alone():
    values = credential_values(HEAD, ["x-api-key", "authorization"])
    assert set(values) == {KEY, "second-value-77", f"Bearer tok-{KEY}", f"tok-{KEY}"}
    assert values[0] == f"Bearer tok-{KEY}"  # longest first


def test_every_credential_value_is_cut_out_of_a_detail_even_inside_a_longer_one():
    detail = f"rejected Bearer tok-{KEY} then tok-{KEY} then {KEY} and second-value-77"
    text = redact_credentials(detail, HEAD, ["x-api-key", "authorization"])
    assert KEY not in text and "second-value-77" not in text
    assert text == "rejected [redacted] then [redacted] then [redacted] and [redacted]"


def test_a_head_without_credentials_redacts_nothing():
    assert redact_credentials("nothing to hide", Head.of("POST", "/mcp", []), ["x-api-key"]) == \
        "nothing to hide"


def test_a_verifiers_refusal_carries_the_oauth_error_and_a_503_says_when_to_try_again():
    bad = challenge(401, "invalid_token", "unknown API key", headers=("x-api-key",))
    assert bad.status == 401
    assert orjson.loads(bad.body) == {"error": "invalid_token", "error_description": "unknown API key"}
    # No metadata to point at: the challenge names where the credential goes, and no Bearer
    # scheme sends a client into an OAuth flow.
    assert ("www-authenticate", 'Staal-Verifier headers="x-api-key", error="invalid_token", '
            'error_description="unknown API key"') in bad.headers
    none = challenge(401, None, "no credential", headers=("x-api-key", "x-signature"))
    assert ("www-authenticate", 'Staal-Verifier headers="x-api-key x-signature"') in none.headers
    down = challenge(503, "temporarily_unavailable", "try again later", headers=("x-api-key",))
    assert down.status == 503 and ("retry-after", "1") in down.headers
    assert not any(name == "www-authenticate" for name, _ in down.headers)
