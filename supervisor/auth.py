"""Authentication in front of the MCP endpoint (issue 14): the manifest's
`auth` section made into an `Authenticator`, and the `Guard` every HTTP
request passes before its body is read.

`authenticator_for` is the one place a credential presence becomes an
authenticator: "bearer" is the JWT check (auth_jwt.py); "provider" is the
operator's verifier program in its own confined worker (plugged in here).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from staal.errors import StaalError
from staal.manifest import AuthConfig, Manifest
from staal.protocol.http import Head, HttpResponse
from staal.protocol.http_auth import ProtectedResource, without_headers
from staal.supervisor.callers import Admitted, admit
from staal.supervisor.principal import Authenticator, AuthRefusal

Log = Callable[..., None]


class AuthUnavailable(StaalError):
    """The manifest's `auth` asks for what this server cannot do."""

    kind = "auth"


def authenticator_for(auth: AuthConfig, log: Log) -> Authenticator:
    """The authenticator of `auth.credential.presence`."""
    if auth.credential.presence == "provider":
        # Item 3 of issue 14 (the verifier program in its own confined,
        # long-lived worker) plugs in here.
        raise AuthUnavailable('auth.credential: presence "provider" (an operator verifier '
                              "program) is not available in this build; use \"bearer\"")
    from staal.supervisor.auth_jwt import JwtAuthenticator

    return JwtAuthenticator(auth, log)


def resource_of(manifest: Manifest) -> ProtectedResource:
    """The RFC 9728 metadata: the audience is the resource; the scopes it
    knows are those it requires and those caller profiles are chosen by."""
    assert manifest.auth is not None
    scopes = list(manifest.auth.required_scopes)
    for caller in manifest.callers or ():
        if caller.when[0] == "scope" and caller.when[1] not in scopes:
            scopes.append(caller.when[1])
    return ProtectedResource(manifest.auth.audience, (manifest.auth.issuer,), tuple(scopes))


@dataclass(frozen=True, slots=True)
class Passed:
    """A request let through: who it is from, and the head the MCP layer
    sees (no credential header in it)."""

    admitted: Admitted
    head: Head


class Guard:
    """Every request to an `auth` server: its metadata answered, or its
    credential checked and its caller profile chosen, before anything else
    of it is read. A refusal is a 401 or 403 pointing at the metadata."""

    def __init__(self, manifest: Manifest, authenticator: Authenticator, log: Log) -> None:
        assert manifest.auth is not None
        self.manifest = manifest
        self.authenticator = authenticator
        self.resource = resource_of(manifest)
        self.credential_headers = manifest.auth.credential.headers
        self.log = log

    def metadata(self, head: Head) -> HttpResponse | None:
        return self.resource.metadata(head)

    async def check(self, head: Head) -> Passed | HttpResponse:
        principal = await self.authenticator.authenticate(head)
        if isinstance(principal, AuthRefusal):
            return self.refuse(principal)
        # Whichever presence authenticated it, the scopes this resource requires.
        missing = [s for s in self.manifest.auth.required_scopes if s not in principal.scopes]
        if missing:
            return self.refuse(AuthRefusal(403, "insufficient_scope", "the credential lacks "
                                           f"the scope this resource requires: {' '.join(missing)}"),
                               caller=principal.identity)
        admitted = admit(self.manifest, principal)
        if isinstance(admitted, AuthRefusal):
            return self.refuse(admitted, caller=principal.identity)
        return Passed(admitted, without_headers(head, self.credential_headers))

    def refuse(self, refusal: AuthRefusal, caller: str | None = None) -> HttpResponse:
        self.log("auth_refused", level="info", status=refusal.status, error=refusal.error,
                 message=refusal.description, caller=caller)
        scope = self.manifest.auth.required_scopes if refusal.error == "insufficient_scope" else ()
        return self.resource.challenge(refusal.status, refusal.error, refusal.description, scope)
