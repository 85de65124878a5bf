"""Who is asking: the authenticated principal of an HTTP request.

The seam between authentication (a bearer token checked against the issuer's
keys, or the operator's verifier program: `auth.credential.presence`) and
everything that decides by the caller (which tools it sees, which grant set a
tool runs with, its once keys, its runs, its quotas and rate). Authentication
produces a `Principal` or an `AuthRefusal`; nothing downstream ever sees a
token or a credential header.

stdio has no principal (one local client): code that decides by the caller
takes `Principal | None`, and None means "the local client".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from staal.protocol.http.messages import Head
from staal.records.canonical import canonical_json, sha256_hex

__all__ = ["AuthRefusal", "Authenticator", "Lifecycle", "Principal"]


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller: (issuer, subject, client_id) is its identity;
    scopes are what its credential grants, as given."""

    issuer: str
    subject: str
    client_id: str | None
    scopes: frozenset[str] = frozenset()

    @property
    def identity(self) -> str:
        """The SHA-256 of the identity, what the ledger and `status` keep:
        never the identity itself."""
        return sha256_hex(canonical_json([self.issuer, self.subject, self.client_id]))


@dataclass(frozen=True, slots=True)
class AuthRefusal:
    """Why a request is refused before anything is parsed or run.

    status 400 ("invalid_request"): an Authorization header that cannot be
    read (RFC 6750 section 3.1); status 401: no credential (or one of a
    scheme not taken here), or one that is not valid for this resource
    (`error` "invalid_token" when one was given, None when none was);
    status 403: a valid credential without a required scope
    ("insufficient_scope") or that no caller profile admits; status 503
    ("temporarily_unavailable"): the authenticator could not decide (the
    operator's verifier failed, hung or died), so the request is refused
    without blaming the credential (supervisor/auth/verdict.py, `unavailable`).
    `description` is safe to show the client: it never quotes the credential."""

    status: Literal[400, 401, 403, 503]
    error: str | None
    description: str


class Authenticator(Protocol):
    """Turns a request head into a principal or a refusal. Implementations:
    the bearer-token check (JWT against the issuer's JWKS) and the operator's
    verifier program (in its own confined worker process)."""

    async def authenticate(self, head: Head) -> Principal | AuthRefusal: ...


@runtime_checkable
class Lifecycle(Protocol):
    """An authenticator with something to start before the first request
    (the issuer's keys, a verifier's worker) and to let go of at the end;
    the HTTP server calls both when it has them."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...
