"""The TypeScript clients' own OAuth providers (`@modelcontextprotocol/client`
2.x and `@modelcontextprotocol/sdk` 1.x, an OAuthClientProvider on
StreamableHTTPClientTransport, then `finishAuth`) against `serve --http` and
the tests' authorization server, nothing minted by hand (issue 24 items 3
and 1): authorization code + PKCE with dynamic registration or a
pre-registered client, the token's `aud` the server; the SDKs' own
client-credentials providers; a token that reached the server expired,
refused and refreshed; and, from a token too narrow for the server, the
403's scope followed by one re-authorization."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from staal.supervisor.auth.bearer import SKEW_S
from tests.clients.test_client_typescript import JS, TIMEOUT, node, require_node_modules
from tests.helpers.authorization import AuthorizationServer, claims_of
from tests.helpers.oauth_site import ADMITTED, PROFILE, REDIRECT, REQUIRED, oauth_site, runs_of, serve

SCRIPT = JS / "oauth_session.mjs"
SDKS = ["client", "sdk1"]
# Past the clock skew the server tolerates: refused, not let through.
EXPIRED_BY = SKEW_S + 60
# The scope each SDK's ClientCredentialsProvider is given: client 2.4 asks for
# the 401 challenge's scope; sdk 1.32 asks for its own metadata's scope only,
# none unless given one (its token would then be refused 403 for good).
CREDENTIALS_SCOPE = {"client": None, "sdk1": ADMITTED}


def oauth_session(sdk: str, url: str, fails: bool = False, **plan: Any) -> dict[str, Any]:
    """What the session printed; `fails`: it ends in the client's error."""
    require_node_modules()
    done = subprocess.run([node(), str(SCRIPT)], input=json.dumps(  # a secret: never in argv
        {"sdk": sdk, "url": url, "redirectUrl": REDIRECT, **plan}), cwd=JS,
        capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert ("fatal" in out) == fails, out.get("fatal", out)
    return out


def grants_to(authorization: AuthorizationServer, client: str) -> list[dict[str, Any]]:
    return [grant for grant in authorization.issued() if grant["client_id"] == client]


def agent(authorization: AuthorizationServer, name: str, scope: str | None = None) -> dict:
    """A client registered for client credentials: the plan's clientCredentials."""
    registered = authorization.register(client_name=name, grant_types=["client_credentials"],
                                        token_endpoint_auth_method="client_secret_basic")
    return {"clientId": registered["client_id"], "clientSecret": registered["client_secret"],
            "issuer": authorization.issuer, **({} if scope is None else {"scope": scope})}


@pytest.fixture
def server(tmp_path, authorization) -> Iterator:
    with serve(*oauth_site(tmp_path, authorization.issuer)) as server:
        yield server


@pytest.mark.parametrize("sdk", SDKS)
def test_authorization_code_with_dynamic_registration_gets_a_token_for_the_server(
        server, authorization, sdk):
    out = oauth_session(sdk, server.url)
    assert out["tools"] == ["echo", "staal_run_status"]
    assert out["result"] == {"result": {"echo": sdk}}
    (asked,) = out["asked"]  # one consent, for what the 401 named
    assert asked["scope"] == ADMITTED and asked["resource"] == server.url
    assert asked["code_challenge_method"] == "S256" and asked["client_id"] == out["clientId"]
    claims = claims_of(out["tokens"]["access_token"])
    assert claims["aud"] == server.url and claims["scope"] == ADMITTED
    assert claims["client_id"] == out["clientId"]
    assert runs_of(server) == [("echo", "readers")]


@pytest.mark.parametrize("sdk", SDKS)
def test_a_preregistered_client_gets_its_token_without_registering(server, authorization, sdk):
    out = oauth_session(sdk, server.url, clientId=f"tests-{sdk}")
    assert out["result"] == {"result": {"echo": sdk}}
    assert grants_to(authorization, f"tests-{sdk}") == [
        {"grant_type": "authorization_code", "client_id": f"tests-{sdk}", "scope": ADMITTED,
         "aud": server.url}]


@pytest.mark.parametrize("narrow", [REQUIRED, PROFILE])
@pytest.mark.parametrize("sdk", SDKS)
def test_a_token_too_narrow_steps_up_once_for_the_challenges_scope_and_is_admitted(
        server, authorization, sdk, narrow):
    client = f"narrow-{sdk}-{narrow}"
    granted = authorization.authorized(client, narrow, server.url, REDIRECT)
    # sdk 1.x, holding a refresh token, refreshes the narrow grant instead of
    # re-authorizing: the token it starts with is one without.
    granted.pop("refresh_token")
    out = oauth_session(sdk, server.url, clientId=client, tokens=granted)
    assert out["result"] == {"result": {"echo": sdk}}
    (asked,) = out["asked"]
    assert set(asked["scope"].split()) == set(ADMITTED.split())
    assert claims_of(out["tokens"]["access_token"])["scope"] == asked["scope"]
    assert runs_of(server) == [("echo", "readers")]


@pytest.mark.parametrize("sdk", SDKS)
def test_the_sdks_client_credentials_provider_gets_a_token_for_the_server_by_itself(
        server, authorization, sdk):
    credentials = agent(authorization, f"agent-{sdk}", CREDENTIALS_SCOPE[sdk])
    client = credentials["clientId"]
    out = oauth_session(sdk, server.url, clientCredentials=credentials)
    assert out["result"] == {"result": {"echo": sdk}}
    assert out["asked"] == [] and out["clientId"] == client
    assert grants_to(authorization, client) == [
        {"grant_type": "client_credentials", "client_id": client, "scope": ADMITTED,
         "aud": server.url}]
    claims = claims_of(out["tokens"]["access_token"])
    assert claims["aud"] == server.url and claims["scope"] == ADMITTED
    assert runs_of(server) == [("echo", "readers")]


def test_sdk1s_client_credentials_provider_given_no_scope_is_refused_for_good_and_nothing_runs(
        server, authorization):
    """sdk 1.32 asks for its metadata's scope even after the 403 names
    another, so with none it gets the same scopeless token again and gives up."""
    credentials = agent(authorization, "agent-no-scope")
    out = oauth_session("sdk1", server.url, fails=True, clientCredentials=credentials)
    assert "403 after trying upscoping" in out["fatal"]
    assert [grant["scope"] for grant in grants_to(authorization, credentials["clientId"])] == \
        [None, None]  # asked twice, for nothing each time
    server.stderr.wait_event("auth_refused", status=403, error="insufficient_scope")
    assert runs_of(server) == []


@pytest.mark.parametrize("sdk", SDKS)
def test_a_token_that_reached_the_server_expired_is_refused_then_refreshed_and_the_call_runs_once(
        server, authorization, sdk):
    """Neither SDK reads `expires_in` (client 2.4 and sdk 1.32 keep no
    expiry): each refreshes only when the server answers 401. So the
    authorization server hands out a token already expired past the
    server's skew, as one outlived by its client reaches it; the client
    sends it, is refused 401 `invalid_token`, refreshes with its refresh
    token (no second consent) and is admitted with the refreshed token."""
    client = f"expiring-{sdk}"
    authorization.expire_next(client, "authorization_code", by=EXPIRED_BY)
    out = oauth_session(sdk, server.url, clientId=client)
    assert out["result"] == {"result": {"echo": sdk}}
    assert len(out["asked"]) == 1  # refreshed, never sent to the person again
    assert grants_to(authorization, client) == [
        {"grant_type": "authorization_code", "client_id": client, "scope": ADMITTED,
         "aud": server.url},
        {"grant_type": "refresh_token", "client_id": client, "scope": ADMITTED,
         "aud": server.url}]
    expired, refreshed = out["saved"]
    assert claims_of(expired["access_token"])["exp"] < time.time() - SKEW_S
    assert out["tokens"]["access_token"] == refreshed["access_token"] != expired["access_token"]
    assert claims_of(refreshed["access_token"])["exp"] > time.time()
    server.stderr.wait_event("auth_refused", status=401, error="invalid_token")
    assert len(server.stderr.events("auth_refused", error="invalid_token")) == 1
    assert runs_of(server) == [("echo", "readers")]  # nothing ran with the expired token


@pytest.mark.parametrize("sdk", SDKS)
def test_a_client_credentials_token_that_expired_is_refused_and_replaced_by_a_new_grant(
        server, authorization, sdk):
    """Client credentials give no refresh token: on the 401 each provider
    asks for a new token. A token that is already expired when first got is
    not retried (each SDK stops at a 401 right after authenticating), so
    the session that got it ends refused; the next session, starting with
    it, is refused once, gets a new one and is admitted."""
    credentials = agent(authorization, f"agent-expiring-{sdk}", ADMITTED)
    client = credentials["clientId"]
    authorization.expire_next(client, "client_credentials", by=EXPIRED_BY)
    first = oauth_session(sdk, server.url, fails=True, clientCredentials=credentials)
    assert "401" in first["fatal"]
    (expired,) = first["saved"]
    assert claims_of(expired["access_token"])["exp"] < time.time() - SKEW_S
    out = oauth_session(sdk, server.url, clientCredentials=credentials, tokens=expired)
    assert out["result"] == {"result": {"echo": sdk}}
    (renewed,) = out["saved"]
    assert out["tokens"]["access_token"] == renewed["access_token"] != expired["access_token"]
    assert claims_of(renewed["access_token"])["exp"] > time.time()
    assert [(g["grant_type"], g["scope"], g["aud"]) for g in grants_to(authorization, client)] == \
        [("client_credentials", ADMITTED, server.url)] * 2
    server.stderr.wait_event("auth_refused", status=401, error="invalid_token")
    assert len(server.stderr.events("auth_refused", error="invalid_token")) == 2
    assert runs_of(server) == [("echo", "readers")]  # nothing ran with the expired token
