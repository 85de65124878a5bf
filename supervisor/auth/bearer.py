"""The bearer-token `Authenticator` (issue 14, `auth.credential.presence`
"bearer"): a JWT access token checked with PyJWT against the issuer's JWKS.

What a token must be: signed by a key of the issuer's JWKS with an allowed
algorithm (never `none`, never HMAC: the allowlist is asymmetric only, and
the key's own `alg`, if it names one, must agree), issued by `auth.issuer`,
for `auth.audience` (always checked: nothing turns it off), within its
`exp` and `nbf` give or take SKEW_S, naming a subject. The JWKS is fetched
with httpx (its URL from `auth.jwks_url`, or the issuer's RFC 8414 metadata)
at start and cached; a token naming an unknown `kid` refreshes it, one
refresh at a time and at most once per REFRESH_COOLDOWN_S, so a stream of
forged kids cannot make the server hammer its issuer.

No token, nor any part of one, is ever logged or put in a refusal.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import jwt

from staal.manifest.model import AuthConfig
from staal.protocol.http.auth import Malformed, bearer_of
from staal.protocol.http.messages import Head
from staal.records.record import Json
from staal.supervisor.auth.principal import AuthRefusal, Principal
from staal.supervisor.errors import SupervisorError
from staal.supervisor.telemetry.log import Log

SKEW_S = 60
REFRESH_COOLDOWN_S = 30.0
FETCH_TIMEOUT_S = 5.0
MAX_JWKS_BYTES = 256 * 1024


NO_TOKEN = AuthRefusal(401, None, "this resource needs a bearer token")


def _invalid(why: str) -> AuthRefusal:
    return AuthRefusal(401, "invalid_token", why)


@dataclass(frozen=True, slots=True)
class SigningKey:
    """A key of the issuer's JWKS, and the algorithm it says it is for, if it does."""

    key: Any  # the public key object PyJWT verifies with
    alg: str | None


class KeysUnavailable(SupervisorError):
    """The issuer's keys could not be fetched (no token is checked without them)."""

    kind = "keys_unavailable"


class Jwks:
    """The issuer's signing keys by `kid`, fetched at start (`load`) and
    again when a token names a kid not among them (one refresh at a time,
    none within REFRESH_COOLDOWN_S of the last)."""

    def __init__(self, issuer: str, jwks_url: str | None, client: httpx.AsyncClient, log: Log,
                 cooldown_s: float = REFRESH_COOLDOWN_S) -> None:
        self.issuer = issuer
        self.url = jwks_url
        self.client = client
        self.log = log
        self.cooldown_s = cooldown_s
        self.keys: dict[str | None, SigningKey] = {}
        self.refreshes = 0
        self._last: float | None = None
        self._lock = asyncio.Lock()

    async def load(self) -> None:
        """The keys at start, before any token asks for them (not a refresh:
        the first unknown kid after it may refresh at once). A failure is
        logged; the first token then fetches them."""
        try:
            await self._fetch()
        except KeysUnavailable:
            pass

    async def key(self, kid: str | None) -> SigningKey | None:
        """The key named `kid` (None: the only key, if there is one)."""
        found = self._find(kid)
        if found is not None:
            return found
        # A refresh that ended while this one waited for the lock is the one
        # it would have made: the tokens waiting on one rotation share a fetch.
        seen = self.refreshes
        async with self._lock:
            if self.refreshes == seen and self._find(kid) is None and self._may_refresh():
                self._last = time.monotonic()
                try:
                    await self._fetch()
                finally:
                    self.refreshes += 1
        return self._find(kid)

    def _find(self, kid: str | None) -> SigningKey | None:
        if kid is None:
            return next(iter(self.keys.values())) if len(self.keys) == 1 else None
        return self.keys.get(kid)

    def _may_refresh(self) -> bool:
        return self._last is None or time.monotonic() - self._last >= self.cooldown_s

    async def _fetch(self) -> None:
        try:
            url = self.url or await self._discover()
            self.url = url
            document = await self._get_json(url)
            keys = _keys_of(document)
        except (httpx.HTTPError, ValueError, KeysUnavailable) as exc:
            self.log("jwks_unavailable", level="error", issuer=self.issuer,
                     message=f"{type(exc).__name__}: {exc}"[:300])
            if not self.keys:
                raise KeysUnavailable("the issuer's keys could not be fetched") from None
            return  # the keys already held stay in use
        self.keys = keys
        self.log("jwks_fetched", issuer=self.issuer, url=url, kids=sorted(k or "" for k in keys))

    async def _discover(self) -> str:
        """The JWKS URL from the issuer's metadata: RFC 8414's, then OpenID
        Connect's; the metadata must name this issuer (RFC 8414 section 3.3)."""
        for url in metadata_urls(self.issuer):
            try:
                document = await self._get_json(url)
            except (httpx.HTTPError, ValueError):
                continue
            if document.get("issuer") != self.issuer:
                raise KeysUnavailable(f"the metadata at {url} is not the issuer's own")
            jwks = document.get("jwks_uri")
            if isinstance(jwks, str) and urlsplit(jwks).scheme in ("http", "https"):
                return jwks
            raise KeysUnavailable(f"the metadata at {url} names no jwks_uri")
        raise KeysUnavailable(f"no authorization server metadata for {self.issuer}")

    async def _get_json(self, url: str) -> dict[str, Any]:
        response = await self.client.get(url, headers={"accept": "application/json"})
        response.raise_for_status()
        if len(response.content) > MAX_JWKS_BYTES:
            raise ValueError(f"{url} answered more than {MAX_JWKS_BYTES} bytes")
        document = response.json()
        if not isinstance(document, dict):
            raise ValueError(f"{url} did not answer a JSON object")
        return document


def metadata_urls(issuer: str) -> tuple[str, str]:
    """RFC 8414 section 3.1 (the well-known path before the issuer's path)
    and OpenID Connect Discovery (after it)."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    origin = f"{parts.scheme}://{parts.netloc}"
    return (f"{origin}/.well-known/oauth-authorization-server{path}",
            f"{origin}{path}/.well-known/openid-configuration")


def _keys_of(document: dict[str, Any]) -> dict[str | None, SigningKey]:
    """The signing keys of a JWKS; one that cannot be read is left out."""
    keys: dict[str | None, SigningKey] = {}
    for item in document.get("keys") or ():
        if not isinstance(item, dict) or item.get("use", "sig") != "sig":
            continue
        if item.get("kty") == "oct":
            continue  # a shared secret is never a signing key here
        try:
            alg = item.get("alg")
            keys[item.get("kid")] = SigningKey(jwt.PyJWK(item).key, alg if isinstance(alg, str) else None)
        except jwt.PyJWTError:
            continue
    return keys


class JwtAuthenticator:
    """`Authenticator` for bearer JWTs (supervisor/auth/principal.py)."""

    def __init__(self, auth: AuthConfig, log: Log, client: httpx.AsyncClient | None = None) -> None:
        assert auth.issuer is not None  # a bearer token's auth always names it (AuthConfig)
        self.auth = auth
        self.client = client or httpx.AsyncClient(timeout=FETCH_TIMEOUT_S, trust_env=False,
                                                  follow_redirects=False)
        self.jwks = Jwks(auth.issuer, auth.jwks_url, self.client, log)

    async def authenticate(self, head: Head) -> Principal | AuthRefusal:
        token = bearer_of(head)
        if token is None:
            return NO_TOKEN
        if isinstance(token, Malformed):  # RFC 6750 section 3.1: not a token to judge
            return AuthRefusal(400, "invalid_request", token.why)
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return _invalid("the bearer token is not a JWT")
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self.auth.algorithms:
            return _invalid(f"the token's algorithm is not one this resource accepts "
                            f"({', '.join(self.auth.algorithms)})")
        kid = header.get("kid")
        try:
            key = await self.jwks.key(kid if isinstance(kid, str) else None)
        except KeysUnavailable:
            return _invalid("the issuer's keys could not be fetched to check the token")
        if key is None:
            return _invalid("the token is not signed by a key of the issuer")
        if key.alg not in (None, alg):
            return _invalid("the token's algorithm is not its key's")
        return self._claims(token, key, alg)

    def _claims(self, token: str, key: SigningKey, alg: str) -> Principal | AuthRefusal:
        try:
            claims = jwt.decode(
                token, key=key.key, algorithms=[alg], audience=self.auth.audience,
                issuer=self.auth.issuer, leeway=SKEW_S,
                options={"require": ["exp", "iss", "aud", "sub"], "verify_signature": True})
        except jwt.ExpiredSignatureError:
            return _invalid("the token has expired")
        except jwt.ImmatureSignatureError:
            return _invalid("the token is not valid yet")
        except jwt.InvalidAudienceError:
            return _invalid("the token is not for this resource (its audience)")
        except jwt.InvalidIssuerError:
            return _invalid("the token is not from this resource's issuer")
        except jwt.MissingRequiredClaimError as exc:
            return _invalid(f"the token has no {exc.claim} claim")
        except jwt.PyJWTError:
            return _invalid("the token's signature or claims are not valid")
        principal = principal_of(claims)
        if principal is None:
            return _invalid("the token's subject or scopes are not strings")
        return principal

    async def start(self) -> None:
        await self.jwks.load()

    async def close(self) -> None:
        await self.client.aclose()


def principal_of(claims: dict[str, Json]) -> Principal | None:
    """The principal a checked token names: `scope` (space-separated, RFC
    9068) or `scp` (a list); `client_id`, else `azp`."""
    subject, issuer = claims.get("sub"), claims.get("iss")
    client = claims.get("client_id", claims.get("azp"))
    scope = claims.get("scope", claims.get("scp", ""))
    scopes = scope.split() if isinstance(scope, str) else scope
    if (not isinstance(subject, str) or not isinstance(issuer, str)
            or not (client is None or isinstance(client, str))
            or not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes)):
        return None
    return Principal(issuer, subject, client, frozenset(scopes))
