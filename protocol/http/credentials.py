"""The credential headers of a request, sans I/O (seed 002, "A provider
that does not use bearer tokens"; issue 14, item 3).

The headers an operator's verifier reads (`auth.credential.headers`) are
all it is shown of a request (`only_credentials`), and their values are cut
out of any detail that is logged (`redact_credentials`, over the values
`credential_values` collects). Taking them out of the head the MCP layer
sees, and the 401, 403 or 503 a refused request gets, are
protocol/http/auth.py's, as for a bearer token.
"""

from __future__ import annotations

from collections.abc import Iterable

from staal.protocol.http.messages import Head
from staal.runtime.redaction import redact

__all__ = ["credential_values", "only_credentials", "redact_credentials"]


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
