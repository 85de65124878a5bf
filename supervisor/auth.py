"""Authentication in front of the MCP endpoint (issue 14): the manifest's
`auth` section made into an `Authenticator`, and the `Guard` every HTTP
request passes before its body is read.

`authenticator_for` is the one place a credential presence becomes an
authenticator: "bearer" is the JWT check (auth_jwt.py); "provider" is the
operator's verifier program in its own confined worker (verifier.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from staal.manifest import Manifest
from staal.protocol.http import Head, HttpResponse
from staal.protocol.http_auth import ProtectedResource, challenge, without_headers
from staal.supervisor.callers import Admitted, admit
from staal.supervisor.principal import Authenticator, AuthRefusal

Log = Callable[..., None]


def authenticator_for(manifest: Manifest, log: Log) -> Authenticator:
    """The authenticator of `auth.credential.presence`, not yet started:
    the HTTP server starts it (a `Lifecycle`) and closes it when it ends."""
    assert manifest.auth is not None
    if manifest.auth.credential.presence == "provider":
        from staal.supervisor.verifier import ProviderAuthenticator

        return ProviderAuthenticator(manifest, log)
    from staal.supervisor.auth_jwt import JwtAuthenticator

    return JwtAuthenticator(manifest.auth, log)


def resource_of(manifest: Manifest) -> ProtectedResource | None:
    """The RFC 9728 metadata: the audience is the resource; the scopes it
    knows are those it requires and those caller profiles are chosen by.
    None with the operator's verifier: no authorization server issues its
    credentials, so there is no metadata to point a client at."""
    assert manifest.auth is not None
    if manifest.auth.issuer is None or manifest.auth.audience is None:
        return None
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
    of it is read. A refusal is a 401 or 403 pointing at the metadata (a
    bearer token's) or naming the verifier's headers, or a 503 when the
    verifier could not decide."""

    def __init__(self, manifest: Manifest, authenticator: Authenticator, log: Log) -> None:
        assert manifest.auth is not None
        self.manifest = manifest
        self.authenticator = authenticator
        self.resource = resource_of(manifest)
        self.credential_headers = manifest.auth.credential.headers
        self.log = log

    def metadata(self, head: Head) -> HttpResponse | None:
        return None if self.resource is None else self.resource.metadata(head)

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
        if self.resource is None:  # the operator's verifier: 401, 403 or 503
            return challenge(refusal.status, refusal.error, refusal.description, scope,
                             headers=self.credential_headers)
        return self.resource.challenge(refusal.status, refusal.error, refusal.description, scope)
