"""The Python SDK's own OAuth providers against `serve --http` and the tests'
authorization server, nothing minted by hand (issue 24 items 3 and 1): it
discovers the server from the 401, registers or uses its client id, goes
through authorization code + PKCE (the person's consent automated: the
authorize URL fetched and its 302 read), sends the RFC 8707 resource and is
given a token whose `aud` is the server; or gets one by client credentials;
refreshes a token that expired; and, holding a token too narrow for the
server, reads the 403's scope, re-authorizes once for it and is admitted."""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

from tests.helpers.authorization import AuthorizationServer, claims_of
from tests.helpers.http_servers import sdk_refused_by_status
from tests.helpers.oauth_site import ADMITTED, PROFILE, REDIRECT, REQUIRED, oauth_site, runs_of, serve
from tests.helpers.servers import WAIT

MODES = ["auto", "legacy"]


class Storage:
    """The SDK's TokenStorage, in memory; a test may start it with a client
    and a token."""

    def __init__(self, client: OAuthClientInformationFull | None = None,
                 tokens: OAuthToken | None = None) -> None:
        self.client, self.tokens = client, tokens

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class Consent:
    """The person at the browser, automated: the authorize URL is fetched,
    its 302 read (not followed) and the code handed back to the SDK."""

    def __init__(self) -> None:
        self.asked: list[dict[str, list[str]]] = []
        self.redirect: dict[str, list[str]] = {}

    async def open(self, url: str) -> None:
        self.asked.append(parse_qs(urlsplit(url).query))
        async with httpx.AsyncClient(timeout=WAIT, trust_env=False) as client:
            answer = await client.get(url)
        assert answer.status_code == 302, answer.text
        self.redirect = parse_qs(urlsplit(answer.headers["location"]).query)

    async def callback(self) -> AuthorizationCodeResult:
        return AuthorizationCodeResult(code=self.redirect["code"][0],
                                       state=self.redirect.get("state", [None])[0])


def metadata(scope: str | None = None) -> OAuthClientMetadata:
    return OAuthClientMetadata(client_name="staal tests", redirect_uris=[REDIRECT], scope=scope,
                               grant_types=["authorization_code", "refresh_token"],
                               token_endpoint_auth_method="none")


def code_provider(url: str, storage: Storage, consent: Consent) -> OAuthClientProvider:
    return OAuthClientProvider(url, metadata(), storage, redirect_handler=consent.open,
                               callback_handler=consent.callback)


def session(url: str, auth: httpx.Auth, mode: str = "auto", calls: int = 1,
            between=None) -> list[dict]:
    """tools/list, then `calls` calls of echo (`between` awaited before each
    after the first); each call's structured result."""
    async def run() -> list[dict]:
        transport = streamable_http_client(url, http_client=create_mcp_http_client(auth=auth))
        async with Client(transport, mode=mode) as client:
            assert [tool.name for tool in (await client.list_tools()).tools] == \
                ["echo", "staal_run_status"]
            results = []
            for n in range(calls):
                if n and between is not None:
                    await between()
                called = await client.call_tool("echo", {"text": f"call {n}"})
                results.append(called.structured_content)
            return results
    return anyio.run(run)


@pytest.fixture
def site(tmp_path, authorization):
    return oauth_site(tmp_path, authorization.issuer)


@pytest.fixture
def server(site) -> Iterator:
    with serve(*site) as server:
        yield server


def last_token(authorization: AuthorizationServer, client: str) -> dict:
    return [grant for grant in authorization.issued() if grant["client_id"] == client][-1]


@pytest.mark.parametrize("mode", MODES)
def test_authorization_code_with_dynamic_registration_gets_a_token_for_the_server(
        server, authorization, mode):
    storage, consent = Storage(), Consent()
    results = session(server.url, code_provider(server.url, storage, consent), mode)
    assert results == [{"result": {"echo": "call 0"}}]
    (asked,) = consent.asked  # one consent, for what the 401 named
    assert asked["scope"] == [ADMITTED] and asked["resource"] == [server.url]
    assert asked["code_challenge_method"] == ["S256"]
    registered = storage.client.client_id
    assert registered != "" and storage.client.issuer == authorization.issuer
    claims = claims_of(storage.tokens.access_token)
    assert claims["aud"] == server.url and claims["scope"] == ADMITTED
    assert last_token(authorization, registered)["grant_type"] == "authorization_code"
    assert runs_of(server) == [("echo", "readers")]


def test_a_preregistered_client_needs_no_registration(server, authorization):
    client = OAuthClientInformationFull(client_id="tests-app", redirect_uris=[REDIRECT],
                                        token_endpoint_auth_method="none")
    storage = Storage(client)
    session(server.url, code_provider(server.url, storage, Consent()))
    assert storage.client.client_id == "tests-app"
    assert last_token(authorization, "tests-app") == {
        "grant_type": "authorization_code", "client_id": "tests-app", "scope": ADMITTED,
        "aud": server.url}


def test_client_credentials_of_a_registered_client_get_a_token_for_the_server(
        server, authorization):
    registered = httpx.post(f"{authorization.issuer}/register", timeout=WAIT, json={
        "client_name": "an agent", "grant_types": ["client_credentials"],
        "token_endpoint_auth_method": "client_secret_basic", "scope": ADMITTED}).json()
    storage = Storage()
    provider = ClientCredentialsOAuthProvider(server.url, storage, registered["client_id"],
                                              registered["client_secret"], scope=ADMITTED,
                                              issuer=authorization.issuer)
    assert session(server.url, provider) == [{"result": {"echo": "call 0"}}]
    assert last_token(authorization, registered["client_id"]) == {
        "grant_type": "client_credentials", "client_id": registered["client_id"],
        "scope": ADMITTED, "aud": server.url}
    assert claims_of(storage.tokens.access_token)["aud"] == server.url


def test_a_token_that_expired_is_refreshed_with_its_scope_and_audience(tmp_path):
    short = AuthorizationServer(token_ttl=1)  # a second: the SDK refreshes after it
    try:
        site, url = oauth_site(tmp_path, short.issuer)
        with serve(site, url) as server:
            storage, consent = Storage(), Consent()
            provider = code_provider(url, storage, consent)

            async def expired() -> None:
                # Waits on the SDK's own clock for the token's end (a second).
                deadline = time.monotonic() + WAIT
                while time.time() <= provider.context.token_expiry_time:
                    assert time.monotonic() < deadline
                    await anyio.sleep(0.05)

            assert session(url, provider, calls=2, between=expired) == \
                [{"result": {"echo": "call 0"}}, {"result": {"echo": "call 1"}}]
            grants = [(g["grant_type"], g["scope"], g["aud"]) for g in short.issued()]
            assert grants[0] == ("authorization_code", ADMITTED, url)
            assert ("refresh_token", ADMITTED, url) in grants[1:]
            assert len(consent.asked) == 1  # refreshed, never asked the person again
            assert runs_of(server) == [("echo", "readers")] * 2
    finally:
        short.stop()


@pytest.mark.parametrize("narrow", [REQUIRED, PROFILE])
def test_a_token_too_narrow_steps_up_once_for_the_challenges_scope_and_is_admitted(
        server, authorization, narrow):
    client = OAuthClientInformationFull(client_id="narrow-app", redirect_uris=[REDIRECT],
                                        token_endpoint_auth_method="none")
    granted = authorization.authorized("narrow-app", narrow, server.url, REDIRECT)
    refused = server.modern("tools/list", headers={
        "authorization": f"Bearer {granted['access_token']}"})
    assert refused.status_code == 403
    assert f'scope="{ADMITTED}"' in refused.headers["www-authenticate"]
    storage, consent = Storage(client, OAuthToken(**granted)), Consent()
    assert session(server.url, code_provider(server.url, storage, consent)) == \
        [{"result": {"echo": "call 0"}}]
    (asked,) = consent.asked
    assert set(asked["scope"][0].split()) == set(ADMITTED.split())
    assert claims_of(storage.tokens.access_token)["scope"] == asked["scope"][0]
    assert runs_of(server) == [("echo", "readers")]


def test_the_401_without_a_token_names_the_least_a_profile_needs_not_every_scope(server):
    answer = server.modern("tools/list")
    assert answer.status_code == 401
    challenge = answer.headers["www-authenticate"]
    assert f'scope="{ADMITTED}"' in challenge and "admin" not in challenge
    assert runs_of(server) == []


def test_a_principal_no_scope_could_admit_is_refused_without_a_challenge_and_no_client_loops(
        tmp_path, authorization):
    only_ops = [{"name": "ops", "when": {"client_id": "ops-bot"}, "tools": {"echo": {}}}]
    with serve(*oauth_site(tmp_path, authorization.issuer, only_ops)) as server:
        granted = authorization.authorized("stranger", REQUIRED, server.url, REDIRECT)
        answer = server.modern("tools/list", headers={
            "authorization": f"Bearer {granted['access_token']}"})
        assert answer.status_code == 403 and "www-authenticate" not in answer.headers
        assert answer.json()["error"] == "access_denied"
        assert "whatever its scopes" in answer.json()["error_description"]
        client = OAuthClientInformationFull(client_id="stranger", redirect_uris=[REDIRECT],
                                            token_endpoint_auth_method="none")
        consent = Consent()
        with sdk_refused_by_status():
            session(server.url, code_provider(server.url, Storage(client, OAuthToken(**granted)),
                                              consent))
        assert consent.asked == []  # never sent to re-authorize for nothing
        server.stderr.wait_event("auth_refused", status=403, error="access_denied")
        assert runs_of(server) == []
