"""The protected resource's rules, sans I/O (protocol/http/auth.py): where
the metadata is, how a bearer token is read, what a refusal says, and the
head the MCP layer is given."""

from __future__ import annotations

import orjson
import pytest

from staal.protocol.http.auth import Malformed, ProtectedResource, bearer_of, without_headers
from staal.protocol.http.messages import Head

RESOURCE = ProtectedResource("https://mcp.example.com/tools/mcp", ("https://auth.example.com",),
                             ("support",))


def head(*pairs: tuple[str, str], method: str = "POST", path: str = "/mcp") -> Head:
    return Head.of(method, path, pairs)


def test_the_metadata_is_at_the_well_known_path_before_the_resource_path_and_at_the_root():
    assert RESOURCE.metadata_paths == {"/.well-known/oauth-protected-resource",
                                       "/.well-known/oauth-protected-resource/tools/mcp"}
    assert RESOURCE.metadata_url == \
        "https://mcp.example.com/.well-known/oauth-protected-resource/tools/mcp"
    answer = RESOURCE.metadata(head(method="GET", path="/.well-known/oauth-protected-resource"))
    assert answer is not None and answer.status == 200
    assert orjson.loads(answer.body) == {
        "resource": "https://mcp.example.com/tools/mcp",
        "authorization_servers": ["https://auth.example.com"],
        "bearer_methods_supported": ["header"], "scopes_supported": ["support"]}
    assert RESOURCE.metadata(head(path="/mcp")) is None
    assert RESOURCE.metadata(head(path="/.well-known/oauth-protected-resource")).status == 405


def test_a_bearer_token_is_read_from_one_authorization_header_only():
    assert bearer_of(head()) is None
    assert bearer_of(head(("Authorization", "Bearer abc.def-_~+/=="))) == "abc.def-_~+/=="
    assert bearer_of(head(("authorization", "bearer   tok"))) == "tok"
    twice = head(("Authorization", "Bearer a"), ("Authorization", "Bearer b"))
    assert isinstance(bearer_of(twice), Malformed)


@pytest.mark.parametrize("value", ["Basic dXNlcjpwdw==", 'Digest username="u"', "Negotiate abc",
                                   "Bearer-ish abc"])
def test_credentials_of_another_scheme_are_no_bearer_token_at_all(value):
    # RFC 6750 section 3.1: answered as a request without credentials (no error code).
    assert bearer_of(head(("Authorization", value))) is None


@pytest.mark.parametrize(("value", "why"), [
    ("Bearer", "the Authorization header's Bearer scheme carries no token"),
    ("bearer   ", "the Authorization header's Bearer scheme carries no token"),
    ("", "the Authorization header is empty"),
    ("Bearer a b", "the Authorization header's bearer token is not one token68 value"),
    ("Bearer ä", "the Authorization header's bearer token is not one token68 value"),
    ("Bearer a=b", "the Authorization header's bearer token is not one token68 value"),
    ("Bearer a,b", "the Authorization header's bearer token is not one token68 value")])
def test_an_authorization_header_that_cannot_be_read_is_malformed_naming_why(value, why):
    malformed = bearer_of(head(("Authorization", value)))
    assert isinstance(malformed, Malformed) and malformed.why.startswith(why)


def test_the_mcp_layer_sees_no_credential_header():
    given = head(("Authorization", "Bearer secret-zq7"), ("X-Attestation", "att-zq7"),
                 ("Accept", "application/json"))
    seen = without_headers(given, ("x-attestation",))
    assert dict(seen.headers) == {"accept": ("application/json",)}
    assert "zq7" not in repr(seen)


def test_no_token_is_401_with_the_metadata_url_and_no_error():
    answer = RESOURCE.challenge(401, None, "this resource needs a bearer token")
    challenge = dict(answer.headers)["www-authenticate"]
    assert challenge == ('Bearer resource_metadata="https://mcp.example.com/.well-known/'
                         'oauth-protected-resource/tools/mcp"')
    assert answer.status == 401


@pytest.mark.parametrize(("status", "error", "scope"), [(401, "invalid_token", ()),
                                                        (403, "insufficient_scope", ("a", "b"))])
def test_a_refusal_names_its_error_and_the_scopes_needed(status, error, scope):
    answer = RESOURCE.challenge(status, error, 'say "why"\\\n', scope)
    challenge = dict(answer.headers)["www-authenticate"]
    assert answer.status == status
    assert f'error="{error}"' in challenge
    assert 'error_description="say why"' in challenge  # quotes, backslash and newline cut out
    assert ('scope="a b"' in challenge) is bool(scope)
    assert orjson.loads(answer.body)["error"] == error
