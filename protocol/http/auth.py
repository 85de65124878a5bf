"""An OAuth 2.1 protected resource's rules over HTTP, sans I/O (issue 14;
RFC 9728, RFC 6750): where its metadata is answered and what it holds, how
a bearer token is read from a request's head, the 401 and 403 a request is
refused with (`WWW-Authenticate`; a 503 when the operator's verifier could
not decide), and the head the MCP layer is given, without the headers that
carry a credential (Authorization, and those a verifier reads).

Nothing here checks a token: that takes the issuer's keys, which take I/O
(supervisor/auth/bearer.py). Nothing here ever quotes a token either: a
refusal's text is written by the server, never from the credential.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import orjson

from staal.protocol.http.messages import Head, HttpResponse
from staal.records.record import Json

WELL_KNOWN = "/.well-known/oauth-protected-resource"
CREDENTIAL_HEADER = "authorization"
# The challenge scheme of a 401 or 403 refused by the operator's verifier.
VERIFIER_SCHEME = "Staal-Verifier"
# RFC 6750 section 2.1: b64token.
_TOKEN68 = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
_UNSAFE = re.compile(r'[^\x20-\x7e]|["\\]')

__all__ = ["CREDENTIAL_HEADER", "VERIFIER_SCHEME", "WELL_KNOWN", "Malformed", "ProtectedResource",
           "bearer_of", "challenge", "denied", "without_headers"]


@dataclass(frozen=True, slots=True)
class Malformed:
    """An Authorization header that cannot be read: RFC 6750 section 3.1's
    `invalid_request` (400), as against a token that is not valid (401)."""

    why: str


def bearer_of(head: Head) -> str | Malformed | None:
    """The request's bearer token. None when it sent none: no Authorization
    header, or one of another scheme (`Basic ...`), which RFC 6750 section
    3.1 answers as a request without credentials, with no error code.
    Malformed: more than one Authorization header, an empty one, or a
    Bearer one without exactly one token68 token."""
    values = head.headers.get(CREDENTIAL_HEADER)
    if values is None:
        return None
    if len(values) != 1:
        return Malformed("more than one Authorization header")
    scheme, _, token = values[0].strip().partition(" ")
    if not scheme:
        return Malformed("the Authorization header is empty")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    if not token:
        return Malformed("the Authorization header's Bearer scheme carries no token")
    if not _TOKEN68.fullmatch(token):
        return Malformed("the Authorization header's bearer token is not one token68 value "
                         "(RFC 6750 section 2.1)")
    return token


def without_headers(head: Head, names: Iterable[str]) -> Head:
    """`head` without these (lower-case) headers: what the MCP layer sees."""
    drop = {CREDENTIAL_HEADER, *names}
    return Head(head.method, head.path,
                {name: values for name, values in head.headers.items() if name not in drop})


def _quoted(text: str) -> str:
    """An auth-param value (RFC 9110 quoted-string), ASCII only."""
    return '"' + _UNSAFE.sub("", text)[:300] + '"'


@dataclass(frozen=True, slots=True)
class ProtectedResource:
    """The resource's identifier (its URL, the tokens' audience), the
    authorization servers that issue tokens for it, and the scopes it knows."""

    resource: str
    authorization_servers: tuple[str, ...]
    scopes: tuple[str, ...] = ()

    def _split(self) -> tuple[str, str]:
        """The resource URL's origin and path (the manifest checked its shape)."""
        scheme, _, rest = self.resource.partition("://")
        netloc, _, path = rest.partition("/")
        return f"{scheme}://{netloc}", ("/" + path).rstrip("/")

    @property
    def metadata_paths(self) -> frozenset[str]:
        """RFC 9728 section 3.1: the well-known path inserted before the
        resource's own path; the bare one too, for clients that look there."""
        return frozenset({WELL_KNOWN, WELL_KNOWN + self._split()[1]})

    @property
    def metadata_url(self) -> str:
        origin, path = self._split()
        return origin + WELL_KNOWN + path

    def document(self) -> dict[str, Json]:
        document: dict[str, Json] = {
            "resource": self.resource,
            "authorization_servers": list(self.authorization_servers),
            "bearer_methods_supported": ["header"],
        }
        if self.scopes:
            document["scopes_supported"] = list(self.scopes)
        return document

    def metadata(self, head: Head) -> HttpResponse | None:
        """The answer to a request for the metadata; None for any other path."""
        if head.path not in self.metadata_paths:
            return None
        if head.method not in ("GET", "HEAD"):
            return HttpResponse(405, (("allow", "GET, HEAD"), ("content-length", "0")))
        body = orjson.dumps(self.document())
        return HttpResponse(200, (("content-type", "application/json"),
                                  ("cache-control", "max-age=300"),
                                  ("content-length", str(len(body)))),
                            b"" if head.method == "HEAD" else body)

    def challenge(self, status: int, error: str | None, description: str,
                  scope: Iterable[str] = ()) -> HttpResponse:
        return challenge(status, error, description, scope, metadata_url=self.metadata_url)


def challenge(status: int, error: str | None, description: str, scope: Iterable[str] = (), *,
              metadata_url: str | None = None, headers: Iterable[str] = ()) -> HttpResponse:
    """401 (no credential, or one not valid here: `error` "invalid_token"
    when one was given) or 403 ("insufficient_scope", naming the scopes
    needed, or a caller no profile admits). With `metadata_url` (a bearer
    token's resource), the Bearer challenge points the client at the
    resource's metadata (RFC 9728 section 5.1); without it (the operator's
    verifier), the challenge's scheme is VERIFIER_SCHEME, naming the
    `headers` the credential goes in, so that no client starts an OAuth
    flow this server does not take part in. 503 (the verifier could not
    decide: nothing is wrong with the credential) has no challenge but
    `Retry-After: 1`."""
    if metadata_url is not None:
        scheme, params = "Bearer", [f"resource_metadata={_quoted(metadata_url)}"]
    else:
        scheme, params = VERIFIER_SCHEME, [f"headers={_quoted(' '.join(headers))}"]
    if error is not None:
        params += [f"error={_quoted(error)}", f"error_description={_quoted(description)}"]
    scopes = " ".join(scope)
    if scopes:
        params.append(f"scope={_quoted(scopes)}")
    asked = (("retry-after", "1") if status == 503
             else ("www-authenticate", f"{scheme} {', '.join(params)}"))
    return _error_answer(status, error or "unauthorized", description, asked)


def denied(description: str) -> HttpResponse:
    """403 to a valid credential whose principal no scope could admit: no
    challenge, so no client re-authorizes for it (supervisor/auth/guard.py,
    `Guard.step_up`, says why); the body says what was refused."""
    return _error_answer(403, "access_denied", description)


def _error_answer(status: int, error: str, description: str,
                  *first: tuple[str, str]) -> HttpResponse:
    """An OAuth error body (RFC 6749 section 5.2's fields), never cached,
    after the `first` headers."""
    body = orjson.dumps({"error": error, "error_description": description})
    return HttpResponse(status, (*first, ("content-type", "application/json"),
                                 ("cache-control", "no-store"),
                                 ("content-length", str(len(body)))), body)
