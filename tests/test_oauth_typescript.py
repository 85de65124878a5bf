"""The TypeScript clients' own OAuth providers (`@modelcontextprotocol/client`
2.x and `@modelcontextprotocol/sdk` 1.x, an OAuthClientProvider on
StreamableHTTPClientTransport, then `finishAuth`) against `serve --http` and
the tests' authorization server, nothing minted by hand (issue 24 items 3
and 1): authorization code + PKCE with dynamic registration or a
pre-registered client, the token's `aud` the server; and, from a token too
narrow for the server, the 403's scope followed by one re-authorization."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.authorization import claims_of
from tests.oauth_site import ADMITTED, PROFILE, REDIRECT, REQUIRED, oauth_site, runs_of, serve
from tests.test_client_typescript import JS, TIMEOUT, node, require_node_modules

SCRIPT = JS / "oauth_session.mjs"
SDKS = ["client", "sdk1"]


def oauth_session(sdk: str, url: str, **plan: Any) -> dict[str, Any]:
    require_node_modules()
    done = subprocess.run([node(), str(SCRIPT), json.dumps(
        {"sdk": sdk, "url": url, "redirectUrl": REDIRECT, **plan})], cwd=JS,
        capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert "fatal" not in out, out["fatal"]
    return out


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
    issued = [grant for grant in authorization.issued() if grant["client_id"] == f"tests-{sdk}"]
    assert issued == [{"grant_type": "authorization_code", "client_id": f"tests-{sdk}",
                       "scope": ADMITTED, "aud": server.url}]


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
