"""The guard's refusals name the step-up rule's scopes (issue 24 item 1),
for a bearer token's challenge and for the operator's verifier's alike: the
403 names every scope that admits the request, the 401 without a credential
the least any profile needs, and a principal no scope could admit is refused
without a challenge. In process, with an authenticator that returns what
the test says (the HTTP tests with real clients are test_oauth_*.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import orjson
import pytest

from staal.protocol.http.messages import Head
from staal.supervisor.auth.guard import Guard
from staal.supervisor.auth.principal import AuthRefusal, Principal

VERIFIER = {"issuer": None, "audience": None}
BEARER = {"issuer": "https://id.example", "audience": "https://tools.example/mcp"}


class Says:
    """An authenticator that answers `answer` to every request."""

    def __init__(self, answer: Principal | AuthRefusal) -> None:
        self.answer = answer

    async def authenticate(self, head: Head) -> Principal | AuthRefusal:
        return self.answer


def guard(presence: dict, answer: Principal | AuthRefusal, callers: list[tuple[str, str]]) -> Guard:
    manifest = SimpleNamespace(auth=SimpleNamespace(
        **presence, required_scopes=("staal",),
        credential=SimpleNamespace(headers=("x-api-key",))),
        callers=[SimpleNamespace(name=f"p{n}", when=when) for n, when in enumerate(callers)])
    return Guard(manifest, Says(answer), lambda *_, **__: None)  # type: ignore[arg-type]


def refused(presence: dict, answer: Principal | AuthRefusal,
            callers: list[tuple[str, str]]) -> tuple[int, dict[str, str]]:
    response = asyncio.run(guard(presence, answer, callers).check(Head("POST", "/mcp", {})))
    return response.status, dict(response.headers)


def holding(*scopes: str, client: str = "app") -> Principal:
    return Principal("https://id.example", client, client, frozenset(scopes))


PROFILES = [("scope", "reader"), ("scope", "admin")]


@pytest.mark.parametrize("presence", [VERIFIER, BEARER], ids=["verifier", "bearer"])
@pytest.mark.parametrize("held", [("reader",), ("staal",), ("staal", "other")])
def test_a_403_names_every_scope_that_admits_the_request(presence, held):
    status, headers = refused(presence, holding(*held), PROFILES)
    assert status == 403
    challenge = headers["www-authenticate"]
    assert 'error="insufficient_scope"' in challenge and 'scope="staal reader"' in challenge


@pytest.mark.parametrize("presence", [VERIFIER, BEARER], ids=["verifier", "bearer"])
def test_a_401_without_a_credential_names_the_least_a_profile_needs(presence):
    status, headers = refused(presence, AuthRefusal(401, None, "no credential"), PROFILES)
    assert status == 401 and 'scope="staal reader"' in headers["www-authenticate"]


@pytest.mark.parametrize("presence", [VERIFIER, BEARER], ids=["verifier", "bearer"])
def test_a_401_for_a_credential_not_valid_here_names_the_least_a_profile_needs_too(presence):
    status, headers = refused(presence, AuthRefusal(401, "invalid_token", "expired"), PROFILES)
    challenge = headers["www-authenticate"]
    assert status == 401 and 'error="invalid_token"' in challenge
    assert 'scope="staal reader"' in challenge and "admin" not in challenge


@pytest.mark.parametrize("presence", [VERIFIER, BEARER], ids=["verifier", "bearer"])
def test_a_principal_no_scope_could_admit_gets_a_403_without_a_challenge(presence):
    response = asyncio.run(guard(presence, holding("staal"), [("client_id", "ops-bot")])
                           .check(Head("POST", "/mcp", {})))
    assert response.status == 403 and "www-authenticate" not in dict(response.headers)
    assert orjson.loads(response.body)["error"] == "access_denied"
