"""What a verifier program answered, judged: the one place its data
becomes a `Principal` or an `AuthRefusal` (seed 002, "A provider that does
not use bearer tokens"; docs/programs.md, "Verifier programs").

The verifier is operator code in another process; its answer is checked
here as untrusted data, strictly. An answer that does not hold together
(an unknown key, a subject that is not a string, a scope with a space, a
principal that quotes the credential) is a `Failure` of the verifier, not a
principal: the request is refused, as it is when the verifier raised, hung
or died (`unavailable`).
"""

from __future__ import annotations

from typing import Any

from staal.records.messages import Verified
from staal.records.outcomes import Failure
from staal.runtime.redaction import redact
from staal.supervisor.auth.principal import AuthRefusal, Principal

# The issuer of a principal whose verifier names none: the operator's own.
VERIFIER_ISSUER = "staal:verifier"
PRINCIPAL_KEYS = ("subject", "issuer", "client_id", "scopes")
MAX_TEXT = 1024
MAX_SCOPES = 256

__all__ = ["PRINCIPAL_KEYS", "VERIFIER_ISSUER", "judge", "unavailable"]


def judge(verified: Verified, credentials: tuple[str, ...]) -> Principal | AuthRefusal | Failure:
    """The verifier's answer to a request whose credential headers held
    `credentials` (their values, to be kept out of everything)."""
    if verified.failure is not None:
        return verified.failure
    if verified.refusal is not None:
        return _refusal(verified.refusal, credentials)
    return _principal(verified.principal, credentials)


def unavailable() -> AuthRefusal:
    """The answer when the verifier could not decide (it failed, hung, died
    or is being replaced). 503, not 401: a 401 tells a client its credential
    is bad, and it would throw a good one away and ask its user again; the
    truth is that the server failed, and trying again later may succeed.
    Either way the request is refused before anything is parsed or run."""
    return AuthRefusal(503, "temporarily_unavailable",
                       "the server could not verify the credential; try again later")


def _refusal(data: Any, credentials: tuple[str, ...]) -> AuthRefusal | Failure:
    if not isinstance(data, dict) or set(data) != {"status", "description"}:
        return _bad("a refusal that is not {status, description}")
    status, description = data["status"], data["description"]
    if status not in (401, 403) or isinstance(status, bool):
        return _bad(f"a refusal with status {status!r} (401 or 403)")
    if not isinstance(description, str) or len(description) > MAX_TEXT:
        return _bad(f"a refusal whose description is not a string of at most {MAX_TEXT} characters")
    description = redact(description, credentials) or "refused"
    if status == 403:
        return AuthRefusal(403, "insufficient_scope", description)
    # RFC 6750 section 3.1: a request with no credential gets no error code.
    return AuthRefusal(401, "invalid_token" if credentials else None, description)


def _principal(data: Any, credentials: tuple[str, ...]) -> Principal | Failure:
    if not isinstance(data, dict):
        return _bad(f"a {_json_kind(data)}, not a dict of the principal or a Refusal")
    unknown = sorted(set(data) - set(PRINCIPAL_KEYS))
    if unknown:
        return _bad(f"a principal with the unknown key {unknown[0]!r} "
                    f"(allowed: {', '.join(PRINCIPAL_KEYS)})")
    subject = data.get("subject")
    issuer = data.get("issuer", VERIFIER_ISSUER)
    client_id = data.get("client_id")
    scopes = data.get("scopes", [])
    for name, value, optional in (("subject", subject, False), ("issuer", issuer, False),
                                  ("client_id", client_id, True)):
        if value is None and optional:
            continue
        if not isinstance(value, str) or not value.strip() or len(value) > MAX_TEXT:
            return _bad(f"a principal whose {name} is not a non-empty string of at most "
                        f"{MAX_TEXT} characters")
    if (not isinstance(scopes, list) or len(scopes) > MAX_SCOPES
            or not all(_is_scope(s) for s in scopes)):
        return _bad("a principal whose scopes are not a list of scope tokens (strings without spaces)")
    assert isinstance(subject, str)  # the loop above refused anything else
    texts = [subject, issuer, client_id or "", *scopes]
    if any(value and value in text for value in credentials for text in texts):
        # The identity is kept (hashed) and shown: it must never carry the secret.
        return _bad("a principal that holds the credential itself")
    return Principal(issuer=issuer, subject=subject, client_id=client_id, scopes=frozenset(scopes))


def _is_scope(value: Any) -> bool:
    """RFC 6749 section 3.3: a scope token is printable ASCII, no space, `"` or `\\`."""
    return (isinstance(value, str) and 0 < len(value) <= MAX_TEXT
            and all(0x21 <= ord(c) <= 0x7E and c not in '"\\' for c in value))


def _json_kind(value: Any) -> str:
    return {list: "list", str: "string", bool: "boolean", int: "number",
            float: "number"}.get(type(value), type(value).__name__)


def _bad(what: str) -> Failure:
    return Failure("value", f"the verifier returned {what}")
