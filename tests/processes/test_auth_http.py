"""An `auth` server against a real authorization server (oauth2-mock-server,
RS256 tokens by client credentials; tests/helpers/authorization.py): the RFC 9728
metadata, and every request without a valid token for this resource refused
401 or 403, with `WWW-Authenticate`, before anything is parsed or run, under
both revisions. Each refusal proves that nothing ran: the fake service saw
nothing and the ledger holds nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from staal.supervisor.store.ledger import read_ledger
from tests.helpers.authorization import AuthorizationServer, claims_of, forged, header_of
from tests.helpers.http_servers import HttpServer, modern_headers
from tests.helpers.pg_cluster import free_port
from tests.helpers.recorder import Recorder
from tests.helpers.servers import Site, modern_meta

LOOKUP = """
from staal.caps import HttpGet

def main(url: str, get: HttpGet) -> dict:
    return {"status": get.get(url).status_code}
"""


def auth_site(tmp_path, service: Recorder, issuer: str, **auth) -> Site:
    service.route("GET", "/orders/1")
    site = Site(tmp_path)
    site.program("lookup.py", LOOKUP)
    site.write([{"name": "lookup", "program": "lookup.py",
                 "grants": {"get": {"cap": "net.http.get", "only": [service.base + "/**"]}}}],
               sections={"auth": {"issuer": issuer, **auth}})
    return site


@pytest.fixture
def guarded(tmp_path, service, authorization) -> Iterator[HttpServer]:
    with HttpServer(auth_site(tmp_path, service, authorization.issuer,
                              required_scopes=["mcp"])) as server:
        yield server


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def lookup(http: HttpServer, service: Recorder, era: str, headers: dict[str, str]) -> httpx.Response:
    params = {"name": "lookup", "arguments": {"url": service.base + "/orders/1"}}
    if era == "modern":
        return http.modern("tools/call", params, headers=headers)
    return http.legacy("tools/call", params, headers=headers)


def assert_nothing_ran(http: HttpServer, service: Recorder) -> None:
    assert service.requests == []
    assert read_ledger(http.site.ledger_path).runs() == ()


def challenge_of(answer: httpx.Response) -> str:
    value = answer.headers["www-authenticate"]
    url = answer.request.url  # the resource is the URL the client used: its metadata is there
    metadata = f"{url.scheme}://{url.netloc.decode()}/.well-known/oauth-protected-resource{url.path}"
    assert value.startswith(f'Bearer resource_metadata="{metadata}"')
    return value


# -- RFC 9728 --------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/.well-known/oauth-protected-resource",
                                  "/.well-known/oauth-protected-resource/mcp"])
def test_the_protected_resource_metadata_is_answered_without_a_token(guarded, authorization, path):
    answer = guarded.client.get(guarded.base + path)
    assert answer.status_code == 200
    assert answer.json() == {"resource": guarded.url, "authorization_servers": [authorization.issuer],
                             "bearer_methods_supported": ["header"], "scopes_supported": ["mcp"]}


# -- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_a_call_without_a_token_is_401_pointing_at_the_metadata_and_nothing_runs(guarded, service,
                                                                                 era):
    answer = lookup(guarded, service, era, {})
    assert answer.status_code == 401
    assert "error=" not in challenge_of(answer)
    assert_nothing_ran(guarded, service)


def _public_pem(authorization: AuthorizationServer) -> bytes:
    (jwk,) = authorization.jwks()["keys"]
    return jwt.PyJWK(jwk).key.public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)


def bad_token(authorization: AuthorizationServer, case: str, audience: str) -> str:
    if case == "wrong audience":
        return authorization.token("ops", "mcp", audience="https://elsewhere.test/mcp")
    if case == "no audience":
        return authorization.token("ops", "mcp", audience=None)
    if case == "wrong issuer":
        return authorization.token("ops", "mcp", iss="https://impostor.test", audience=audience)
    if case == "expired":
        return authorization.token("ops", "mcp", exp_in=-3600, audience=audience)
    if case == "not yet valid":
        return authorization.token("ops", "mcp", nbf_in=3600, audience=audience)
    good = authorization.token("ops", "mcp", audience=audience)
    if case == "alg none":
        return forged({"alg": "none", "typ": "JWT", "kid": header_of(good)["kid"]},
                      claims_of(good), None)
    if case == "HS256 signed with the public key":
        return forged({"alg": "HS256", "typ": "JWT", "kid": header_of(good)["kid"]},
                      claims_of(good), _public_pem(authorization))
    if case == "signature altered":
        head, body, signature = good.split(".")
        return f"{head}.{body}.{signature[::-1]}"
    assert case == "not a JWT"
    return "zz9-not-a-jwt-at-all"


BAD = ["wrong audience", "no audience", "wrong issuer", "expired", "not yet valid", "alg none",
       "HS256 signed with the public key", "signature altered", "not a JWT"]


@pytest.mark.parametrize("case", BAD)
@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_a_token_not_valid_for_this_resource_is_401_invalid_token_and_nothing_runs(
        guarded, service, authorization, case, era):
    answer = lookup(guarded, service, era, bearer(bad_token(authorization, case, guarded.url)))
    assert answer.status_code == 401
    assert 'error="invalid_token"' in challenge_of(answer)
    assert_nothing_ran(guarded, service)


@pytest.mark.parametrize("header", ["Basic b3BzOnNlY3JldA==", 'Digest username="ops"',
                                    "Negotiate YIIBhgYGKwYBBQUCoII="])
@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_an_authorization_scheme_other_than_bearer_is_401_with_no_error_code(guarded, service,
                                                                             header, era):
    # RFC 6750 section 3.1: credentials of a method not supported here are
    # answered as none at all, with the challenge that says what is.
    answer = lookup(guarded, service, era, {"authorization": header})
    assert answer.status_code == 401 and "error=" not in challenge_of(answer)
    assert answer.json()["error"] == "unauthorized"
    assert_nothing_ran(guarded, service)


MALFORMED = {"no token": [("authorization", "Bearer")], "empty": [("authorization", "")],
             "two tokens": [("authorization", "Bearer abc def")],
             "not token68": [("authorization", "Bearer abc!def")],
             "two headers": [("authorization", "Bearer abc"), ("authorization", "Bearer def")]}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_authorization_header_is_400_invalid_request_and_nothing_runs(guarded, service,
                                                                                  case):
    params = {"name": "lookup", "arguments": {"url": service.base + "/orders/1"},
              "_meta": modern_meta()}
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    answer = guarded.post(message, [*modern_headers("tools/call", params).items(), *MALFORMED[case]])
    assert answer.status_code == 400  # RFC 6750 section 3.1: not a token to judge
    assert 'error="invalid_request"' in challenge_of(answer)
    assert answer.json()["error"] == "invalid_request"
    guarded.stderr.wait_event("auth_refused", status=400)
    assert_nothing_ran(guarded, service)


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_a_token_without_a_required_scope_is_403_insufficient_scope_and_nothing_runs(
        guarded, service, authorization, era):
    token = authorization.token("ops", "other", guarded.url)
    answer = lookup(guarded, service, era, bearer(token))
    assert answer.status_code == 403
    challenge = challenge_of(answer)
    assert 'error="insufficient_scope"' in challenge and 'scope="mcp"' in challenge
    assert_nothing_ran(guarded, service)


# -- accepted --------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_a_valid_token_with_the_required_scope_calls_the_tool(guarded, service, authorization, era):
    token = authorization.token("ops", "mcp extra", guarded.url)
    answer = lookup(guarded, service, era, bearer(token))
    assert answer.status_code == 200
    assert answer.json()["result"]["structuredContent"] == {"result": {"status": 200}}
    assert len(service.requests) == 1
    (entry,) = read_ledger(guarded.site.ledger_path).runs()
    assert entry.state == "settled"


def test_a_token_within_the_clock_skew_of_its_expiry_is_accepted(guarded, service, authorization):
    token = authorization.token("ops", "mcp", guarded.url, exp_in=-5)  # the skew allowed is a minute
    assert lookup(guarded, service, "modern", bearer(token)).status_code == 200


def test_a_new_signing_key_is_fetched_once_and_its_tokens_accepted(tmp_path, service):
    authorization = AuthorizationServer()
    try:
        with HttpServer(auth_site(tmp_path, service, authorization.issuer)) as http:
            first = authorization.token("a", audience=http.url)
            assert lookup(http, service, "modern", bearer(first)).status_code == 200
            old = authorization.kid
            new = authorization.rotate()
            token = authorization.token("a", audience=http.url)
            assert header_of(token)["kid"] == new != old
            assert lookup(http, service, "modern", bearer(token)).status_code == 200
            # The log line is written before the answer; the reader may not have it yet.
            http.stderr.wait_for(lambda line: "jwks_fetched" in line and new in line,
                                 what="the refresh that found the new key")
            fetched = http.stderr.events("jwks_fetched")
            assert [sorted(e["kids"]) for e in fetched] == [[old], sorted([old, new])]
            # A kid it has never seen, within the cooldown: refused, and no
            # fetch again (forged kids cannot make it hammer the issuer).
            unknown = forged({"alg": "RS256", "kid": "kid-nobody-issued"}, claims_of(token), b"x")
            answer = lookup(http, service, "modern", bearer(unknown))
            assert answer.status_code == 401
            assert len(http.stderr.events("jwks_fetched")) == 2
            assert len(http.stderr.events("jwks_unavailable")) == 0
    finally:
        authorization.stop()
    assert len(service.requests) == 2


def test_with_auth_the_server_may_listen_beyond_loopback(tmp_path, service, authorization):
    site = auth_site(tmp_path, service, authorization.issuer)
    # On every interface the URL clients use is not known to the server: the manifest names it.
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    data = json.loads(site.manifest.read_text())
    data["server"]["http"] = {"public_url": url}
    site.manifest.write_text(json.dumps(data))
    with HttpServer(site, address=f"0.0.0.0:{port}") as http:
        http.url = url
        assert lookup(http, service, "modern", {}).status_code == 401
        token = authorization.token("a", audience=url)
        assert lookup(http, service, "modern", bearer(token)).status_code == 200
