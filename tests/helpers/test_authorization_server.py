"""The tests' authorization server (tests/js/authorization_server.mjs)
behaves like a real one where a client's step-up depends on it: a refresh
may ask for less than its grant's scope, never more (RFC 6749 section 6),
so a client cannot widen a narrow token by refreshing it."""

from __future__ import annotations

from typing import Any

import httpx

from tests.helpers.authorization import AuthorizationServer, claims_of

RESOURCE = "http://127.0.0.1:9/mcp"


def refresh(authorization: AuthorizationServer, client: str, token: str,
            scope: str) -> httpx.Response:
    return authorization.client.post(f"{authorization.issuer}/token", data={
        "grant_type": "refresh_token", "refresh_token": token, "client_id": client,
        "scope": scope})


def scopes_issued(authorization: AuthorizationServer, client: str) -> list[Any]:
    return [grant["scope"] for grant in authorization.issued() if grant["client_id"] == client]


def test_a_refresh_may_narrow_its_grants_scope_but_never_widen_it(authorization):
    client = "refresher"
    wider = refresh(authorization, client,
                    authorization.authorized(client, "staal reader", RESOURCE)["refresh_token"],
                    "staal reader admin")
    assert wider.status_code == 400, wider.text
    assert wider.json() == {"error": "invalid_scope", "error_description": "not granted: admin"}
    narrower = refresh(authorization, client,
                       authorization.authorized(client, "staal reader", RESOURCE)["refresh_token"],
                       "staal")
    assert narrower.status_code == 200, narrower.text
    assert claims_of(narrower.json()["access_token"])["scope"] == "staal"
    # The grant is still what was authorized: a later refresh may ask for all of it again.
    whole = refresh(authorization, client, narrower.json()["refresh_token"], "staal reader")
    assert whole.status_code == 200, whole.text
    assert claims_of(whole.json()["access_token"])["scope"] == "staal reader"
    assert scopes_issued(authorization, client) == ["staal reader", "staal reader", "staal",
                                                    "staal reader"]
