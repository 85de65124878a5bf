"""Authentication in front of the MCP endpoint (issue 14): the manifest's
`auth` section made into an `Authenticator`, and the `Guard` every HTTP
request passes before its body is read.

`authenticator_for` is the one place a credential presence becomes an
authenticator: "bearer" is the JWT check (auth_jwt.py); "provider" is the
operator's verifier program in its own confined worker (verifier.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from staal.manifest.model import AuthConfig, Manifest
from staal.protocol.http.auth import ProtectedResource, challenge, denied, without_headers
from staal.protocol.http.messages import Head, HttpResponse
from staal.protocol.http.step_up import Asker, When, least_scopes, step_up_scopes
from staal.supervisor.auth.callers import Admitted, admit
from staal.supervisor.auth.principal import Authenticator, AuthRefusal, Principal
from staal.supervisor.telemetry.log import Log


def authenticator_for(manifest: Manifest, log: Log) -> Authenticator:
    """The authenticator of `auth.credential.presence`, not yet started:
    the HTTP server starts it (a `Lifecycle`) and closes it when it ends."""
    assert manifest.auth is not None
    if manifest.auth.credential.presence == "provider":
        from staal.supervisor.auth.verifier import ProviderAuthenticator

        return ProviderAuthenticator(manifest, log)
    from staal.supervisor.auth.bearer import JwtAuthenticator

    return JwtAuthenticator(manifest.auth, log)


def known_scopes(manifest: Manifest) -> tuple[str, ...]:
    """The scopes this resource knows: those it requires and those caller
    profiles are chosen by, in the manifest's order."""
    assert manifest.auth is not None
    scopes = list(manifest.auth.required_scopes)
    for caller in manifest.callers or ():
        if caller.when[0] == "scope" and caller.when[1] not in scopes:
            scopes.append(caller.when[1])
    return tuple(scopes)


def resource_of(manifest: Manifest) -> ProtectedResource | None:
    """The RFC 9728 metadata: the audience is the resource; its scopes are
    the ones it knows. None with the operator's verifier: no authorization
    server issues its credentials, so there is no metadata to point a client at."""
    assert manifest.auth is not None
    if manifest.auth.issuer is None or manifest.auth.audience is None:
        return None
    return ProtectedResource(manifest.auth.audience, (manifest.auth.issuer,), known_scopes(manifest))


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
        self.auth: AuthConfig = manifest.auth
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
        missing = [s for s in self.auth.required_scopes if s not in principal.scopes]
        admitted = admit(self.manifest, principal)
        if missing or isinstance(admitted, AuthRefusal):
            return self.step_up(principal)
        return Passed(admitted, without_headers(head, self.credential_headers))

    def step_up(self, principal: Principal) -> HttpResponse:
        """A valid credential this request needs more scopes for: the 403
        names every scope that, held, admits it (protocol/http/step_up.py). One
        that no scope could admit is told so without a challenge: RFC 6750
        defines `insufficient_scope` as a token lacking privileges another
        token could carry, and MCP clients answer it by re-authorizing for
        the challenge's scope, which here would loop (re-authorizing for
        the same scopes, or for none) and bother the person each time;
        `invalid_token` would be false (the token is valid) and make them
        discard it. A 403 with no challenge is RFC 9110's "refuses to
        fulfill it; do not repeat with the same credentials", which every
        client reports as it is."""
        auth = self.auth
        scopes = step_up_scopes(auth.required_scopes, self.whens, known_scopes(self.manifest),
                                Asker(principal.subject, principal.client_id, principal.scopes))
        if scopes is None:
            why = "no caller profile of this server admits this principal, whatever its scopes"
            self.log("auth_refused", level="info", status=403, error="access_denied", message=why,
                     caller=principal.identity)
            return denied(why)
        return self.refuse(AuthRefusal(403, "insufficient_scope",
                                       f"this request needs a token with the scopes {' '.join(scopes)}"),
                           caller=principal.identity, scope=scopes)

    @property
    def whens(self) -> tuple[When, ...] | None:
        callers = self.manifest.callers
        return None if callers is None else tuple(caller.when for caller in callers)

    def refuse(self, refusal: AuthRefusal, caller: str | None = None,
               scope: tuple[str, ...] | None = None) -> HttpResponse:
        """The 401, 403 or 503 of `refusal`. Unless `scope` is given, a
        401 (no credential, or one not valid here: expired, say) or the
        verifier's own 403 `insufficient_scope` (no principal to step up)
        names the least any profile needs, not every scope the resource
        knows: a client told no scope asks for every scope in the metadata's
        `scopes_supported` (MCP's scope selection), as the TypeScript client
        2.4 does for a new token after an expired one."""
        self.log("auth_refused", level="info", status=refusal.status, error=refusal.error,
                 message=refusal.description, caller=caller)
        if scope is None:
            asked = refusal.status == 401 or (refusal.status, refusal.error) == (403, "insufficient_scope")
            scope = least_scopes(self.auth.required_scopes, self.whens) if asked else ()
        if self.resource is None:  # the operator's verifier: 401, 403 or 503
            return challenge(refusal.status, refusal.error, refusal.description, scope,
                             headers=self.credential_headers)
        return self.resource.challenge(refusal.status, refusal.error, refusal.description, scope)
