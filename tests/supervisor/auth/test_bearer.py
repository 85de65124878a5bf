"""The JWKS cache of the bearer-token check (supervisor/auth/bearer.py), in
process: one refresh at a time however many tokens wait on an unknown kid,
none again within the cooldown, the keys held kept when a refresh fails,
and no shared-secret key ever used. The issuer here is an httpx transport
held open by the test, so "at the same time" is certain, not timed."""

from __future__ import annotations

import asyncio

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from staal.supervisor.auth.bearer import Jwks, metadata_urls

ISSUER = "https://auth.example.com/tenant"


def jwk(kid: str, **extra) -> dict:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    return {**jwt.algorithms.RSAAlgorithm.to_jwk(key, as_dict=True), "kid": kid, **extra}


class Issuer:
    """Answers the metadata and the JWKS; a JWKS answer waits for `release`."""

    def __init__(self, keys: list[dict]) -> None:
        self.keys = keys
        self.fetches = 0
        self.fetching = asyncio.Event()
        self.release = asyncio.Event()
        self.release.set()
        self.fail = False

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/.well-known/oauth-authorization-server"):
            return httpx.Response(200, json={"issuer": ISSUER, "jwks_uri": "https://auth.example.com/keys"})
        self.fetches += 1
        self.fetching.set()
        await self.release.wait()
        if self.fail:
            return httpx.Response(503)
        return httpx.Response(200, json={"keys": self.keys})


def jwks_for(issuer: Issuer, log: list | None = None, cooldown_s: float = 3600.0) -> Jwks:
    client = httpx.AsyncClient(transport=httpx.MockTransport(issuer.handle))
    return Jwks(ISSUER, None, client, lambda event, **fields: (log if log is not None else []).append(event),
                cooldown_s=cooldown_s)


def test_the_issuers_metadata_is_looked_for_where_rfc_8414_then_openid_connect_put_it():
    assert metadata_urls(ISSUER) == (
        "https://auth.example.com/.well-known/oauth-authorization-server/tenant",
        "https://auth.example.com/tenant/.well-known/openid-configuration")


def test_many_tokens_naming_a_new_kid_at_once_make_one_fetch():
    async def scenario() -> tuple[int, list]:
        issuer = Issuer([jwk("old")])
        jwks = jwks_for(issuer, cooldown_s=0.0)  # only the one-at-a-time rule holds them back
        await jwks.load()
        issuer.keys = [jwk("old"), jwk("new")]
        issuer.release.clear()
        issuer.fetching.clear()
        waiting = [asyncio.ensure_future(jwks.key("new")) for _ in range(8)]
        await asyncio.wait_for(issuer.fetching.wait(), 30)  # the refresh is under way, held open
        issuer.release.set()
        found = await asyncio.gather(*waiting)
        return issuer.fetches, found

    fetches, found = asyncio.run(scenario())
    assert fetches == 2  # the load at start, then one refresh for all eight
    assert all(key is not None for key in found)


def test_an_unknown_kid_within_the_cooldown_fetches_nothing_and_finds_nothing():
    async def scenario() -> tuple[int, object, object]:
        issuer = Issuer([jwk("a")])
        jwks = jwks_for(issuer)
        await jwks.load()
        first = await jwks.key("forged-1")  # a refresh: the cooldown starts
        second = await jwks.key("forged-2")
        return issuer.fetches, first, second

    fetches, first, second = asyncio.run(scenario())
    assert (fetches, first, second) == (2, None, None)


def test_a_failed_refresh_keeps_the_keys_already_held():
    async def scenario() -> tuple[object, object, list]:
        log: list = []
        issuer = Issuer([jwk("a")])
        jwks = jwks_for(issuer, log, cooldown_s=0.0)
        await jwks.load()
        issuer.fail = True
        missing = await jwks.key("b")
        held = await jwks.key("a")
        return missing, held, log

    missing, held, log = asyncio.run(scenario())
    assert missing is None and held is not None
    assert log == ["jwks_fetched", "jwks_unavailable"]


def test_a_shared_secret_or_encryption_key_in_the_jwks_is_never_a_signing_key():
    async def scenario() -> dict:
        secret = {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"}
        issuer = Issuer([secret, jwk("enc", use="enc"), jwk("sig", alg="RS256")])
        jwks = jwks_for(issuer)
        await jwks.load()
        return jwks.keys

    keys = asyncio.run(scenario())
    assert set(keys) == {"sig"} and keys["sig"].alg == "RS256"
