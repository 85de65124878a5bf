"""The credential headers of a request, sans I/O (seed 002, "A provider
that does not use bearer tokens"; issue 14, item 3).

The headers that carry a credential (`Authorization`, or those an
operator's verifier reads: `auth.credential.headers`) are taken out of a
request's head before the MCP layer sees it (`without_credentials`), and
their values are cut out of any detail that is logged (`redact_credentials`,
over the values `credential_values` collects). Authentication is answered
with `refused`: 401 or 403 carry the OAuth error, 503 says the server could
not decide and the client may try again.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import MappingProxyType

import orjson

from staal.protocol.http import Head, HttpResponse
from staal.redaction import redact

__all__ = ["AUTHORIZATION", "credential_values", "only_credentials", "redact_credentials", "refused",
           "without_credentials"]

AUTHORIZATION = "authorization"


def without_credentials(head: Head, names: Iterable[str]) -> Head:
    """`head` without the headers `names` (any case): what the MCP layer sees."""
    drop = {name.lower() for name in names}
    kept = {name: values for name, values in head.headers.items() if name not in drop}
    return Head(head.method, head.path, MappingProxyType(kept))


def only_credentials(head: Head, names: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """The headers `names` that `head` holds, and nothing else: what a
    verifier is shown."""
    wanted = {name.lower() for name in names}
    return {name: values for name, values in head.headers.items() if name in wanted}


def credential_values(head: Head, names: Iterable[str]) -> tuple[str, ...]:
    """Every value the credential headers hold, each whole and, for one of
    the form "<scheme> <token>" (a bearer token), its token alone too, so
    that a detail quoting only the token is redacted as well."""
    values: set[str] = set()
    for items in only_credentials(head, names).values():
        for value in items:
            value = value.strip()
            if value:
                values.add(value)
            scheme, _, token = value.partition(" ")
            if scheme and token.strip():
                values.add(token.strip())
    return tuple(sorted(values, key=len, reverse=True))  # longest first, as redact cuts


def redact_credentials(text: str, head: Head, names: Iterable[str]) -> str:
    """`text` with every value of `head`'s credential headers cut out."""
    return redact(text, credential_values(head, names))


def refused(status: int, error: str | None, description: str,
            challenge: str | None = None) -> HttpResponse:
    """The answer to a request refused by authentication: a JSON body with
    the OAuth error (RFC 6750 section 3), `WWW-Authenticate` with the
    challenge given for 401 and 403, and `Retry-After` for a 503 (the
    verifier could not decide: nothing is wrong with the credential)."""
    # RFC 6750 section 3.1: a request that carried no credential gets no error code.
    body = orjson.dumps({**({"error": error} if error else {}), "error_description": description})
    headers: list[tuple[str, str]] = [("content-type", "application/json"),
                                      ("content-length", str(len(body)))]
    if status == 503:
        headers.append(("retry-after", "1"))
    elif challenge is not None:
        headers.append(("www-authenticate", challenge))
    return HttpResponse(status, tuple(headers), body)
