"""Which caller profile an authenticated principal gets (manifest section
`callers`, issue 14): the first whose `when` matches decides the tools it
sees and may call, the grant set each runs with and its quotas and rate.
Seed 000 section 10's third place for choosing grants: by the principal,
which is trusted input, never by anything in the request.

stdio, and HTTP without `auth`, have no principal: every
tool with its own grants and no per-caller limits (`LOCAL`).
"""

from __future__ import annotations

from dataclasses import dataclass

from staal.manifest.model import Caller, CallerTool, Manifest, QuotaConfig, RateConfig
from staal.supervisor.auth.principal import AuthRefusal, Principal
from staal.supervisor.store.entries import Admission, RunEntry

EVERY_TOOL = CallerTool()


@dataclass(frozen=True, slots=True)
class Admitted:
    """Who a call is from: its principal (None: the local client) and its
    profile (None: no `callers` section, so every tool as the manifest has it)."""

    principal: Principal | None
    profile: Caller | None

    @property
    def identity(self) -> str | None:
        """The SHA-256 of the caller's identity: what the ledger keeps (None: local)."""
        return None if self.principal is None else self.principal.identity

    @property
    def profile_name(self) -> str | None:
        return None if self.profile is None else self.profile.name

    @property
    def rate(self) -> RateConfig | None:
        return None if self.profile is None else self.profile.rate

    def owns(self, entry: RunEntry) -> bool:
        """Whether run `entry` is this caller's: the ledger's reserve records
        the caller's identity hash (None for the local client). The one rule
        for `staal_run_status` and runs as resources: another caller's run is
        as unknown as one that never existed."""
        return entry.caller == self.identity

    def may_call(self, tool: str) -> bool:
        return self.profile is None or tool in self.profile.tools

    def tool(self, tool: str) -> CallerTool:
        """How this caller runs `tool` (its grant set and its own quota)."""
        if self.profile is None or tool not in self.profile.tools:
            return EVERY_TOOL
        return self.profile.tools[tool]

    def grants(self, tool: str) -> str | None:
        """The name of the grant set this caller's runs of `tool` run with."""
        return self.tool(tool).grants

    def admission(self, tool: str) -> Admission | None:
        """What the ledger records of this caller with a run of `tool`, and
        the limits of its own it must fit (None: the local client)."""
        if self.principal is None:
            return None
        allowed = self.tool(tool)
        rate = self.rate
        return Admission(caller=self.principal.identity, profile=self.profile_name,
                         grants=allowed.grants, quota=allowed.quota,
                         rate=None if rate is None else QuotaConfig(rate.window, calls=rate.calls))


LOCAL = Admitted(None, None)


def matches(caller: Caller, principal: Principal) -> bool:
    key, wanted = caller.when
    if key == "scope":
        return wanted in principal.scopes
    if key == "client_id":
        return principal.client_id == wanted
    return principal.subject == wanted


def admit(manifest: Manifest, principal: Principal) -> Admitted | AuthRefusal:
    """The principal's profile: the first that matches; every tool when the
    manifest has no `callers`; 403 when none matches."""
    if manifest.callers is None:
        return Admitted(principal, None)
    for caller in manifest.callers:
        if matches(caller, principal):
            return Admitted(principal, caller)
    return AuthRefusal(403, "insufficient_scope",
                       "no caller profile of this server admits this token")
