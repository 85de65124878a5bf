"""What a verifier program sees of staal (`auth.credential.presence`
"provider"; docs/programs.md, "Verifier programs").

A verifier is the operator's own check of a request's credential: its entry
function takes a `VerifierRequest` (the method, the path and only the
credential headers the manifest names; never the body) and returns who is
asking, as a plain dict, or why not, as a `Refusal`:

    from staal.verifier import Refusal, VerifierRequest

    def verify(request: VerifierRequest) -> dict | Refusal:
        if request.header("x-api-key") == KEYS.get("ops"):
            return {"subject": "ops", "scopes": ["tools"]}
        return Refusal("unknown API key")

What it returns crosses to the supervisor as data and is checked there
(supervisor/auth/verdict.py); anything else, an exception, a hang or a crash
refuses the request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = ["Refusal", "VerifierRequest"]


@dataclass(frozen=True, slots=True)
class VerifierRequest:
    """A request's head as a verifier sees it: `headers` holds only the
    credential headers the manifest names (`auth.credential.headers`), in
    lower case, each with every value the request gave it."""

    method: str
    path: str
    headers: Mapping[str, tuple[str, ...]]

    def header(self, name: str) -> str | None:
        """The header's value (several joined with ", ", as HTTP folds
        them); None when the request did not send it."""
        values = self.headers.get(name.lower())
        return None if values is None else ", ".join(values)

    def __repr__(self) -> str:
        # A credential never shows in a repr, and so in no traceback's locals.
        return f"VerifierRequest({self.method} {self.path}, headers={sorted(self.headers)})"


@dataclass(frozen=True, slots=True)
class Refusal:
    """The request is refused: 401, the credential is missing or not valid
    for this server; 403, it is valid but does not admit this caller.
    `description` is shown to the client, so it must not quote the
    credential (the server cuts credential values out of it anyway)."""

    description: str
    status: Literal[401, 403] = 401
