"""Capability implementations: the objects a program's capability
parameters receive. Each subclasses the class the program annotated with
(`staal.caps`) and acts only through the run context."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

from staal.caps import Capability
from staal.manifest.model import SecretRef
from staal.money import Money
from staal.program import CapabilityRefused
from staal.records.record import Json
from staal.worker.runs.broker import GrantState

if TYPE_CHECKING:
    from staal.worker.capabilities.services import Services
    from staal.worker.runs.engine import RunContext

# Imported when a run uses the capability, so a run loads only what it needs.
IMPLEMENTATIONS: dict[str, str] = {
    "net.http.get": "staal.worker.capabilities.http:HttpGetCapability",
    "net.http.post": "staal.worker.capabilities.http:HttpPostCapability",
    "clock.now": "staal.worker.capabilities.values:ClockCapability",
    "random.bytes": "staal.worker.capabilities.values:RandomCapability",
    "payments.stripe.refund": "staal.worker.capabilities.stripe:StripeRefundCapability",
    "model.complete": "staal.worker.capabilities.model:ModelCapability",
    "db.sqlite.read": "staal.worker.capabilities.sqlite:SqliteReadCapability",
    "db.sqlite.write": "staal.worker.capabilities.sqlite:SqliteWriteCapability",
    "db.postgres.read": "staal.worker.capabilities.postgres:PostgresReadCapability",
    "db.postgres.write": "staal.worker.capabilities.postgres:PostgresWriteCapability",
    "ffi.c": "staal.worker.capabilities.ffi:FfiCapability",
}


class Bound:
    """What every implementation holds: the run, its grant state, and the
    run-wide services (an HTTP client, the clock, the config, secrets)."""

    def __init__(self, ctx: RunContext, state: GrantState, services: Services) -> None:
        self._ctx = ctx
        self._state = state
        self._services = services

    def narrow(self, **limits: Any) -> Self:
        try:
            narrowed = self._state.narrow(**limits)
        except CapabilityRefused as exc:
            self._ctx.refuse(exc.message)
        return type(self)(self._ctx, narrowed, self._services)

    def _secret(self, name: str) -> str:
        """A secret the grant names, read from the server's environment when
        the run began; never handed to program code."""
        value = self._services.secrets.get(name)
        if not value:
            self._ctx.refuse(f"'{self._state.cap}' needs the secret {name}, which is not set "
                             "in the server's environment")
        return value

    def _secret_env(self, ref: object, what: str) -> str:
        """The environment variable of the secret the grant names as `what`
        (the manifest checked that it names one)."""
        if not isinstance(ref, SecretRef):
            self._ctx.refuse(f"'{self._state.cap}' names no secret as its {what}")
        return ref.env

    @staticmethod
    def prepare() -> None:
        """Make, once per process, what this capability needs that does not
        depend on the run (modules, SSL contexts, clients): the zygote calls
        it before it forks, so no run pays for it. The default: nothing."""

    @staticmethod
    def check_result(action: str, result: Json) -> None:
        """Raise ValueError if an operator's --result is not what `action`
        returns; the default accepts any JSON."""

    @staticmethod
    def charged_of(action: str, result: Json) -> tuple[Money, ...]:
        """The money an action that an operator says happened charged, read
        from its (checked) result; the default: none."""
        return ()

    def __repr__(self) -> str:
        return f"<{self._state.cap} '{self._state.param}'>"


Factory = Callable[["RunContext", GrantState, "Services"], Capability]


def implementation(cap: str) -> type[Bound]:
    """The class implementing `cap` (ImportError if this staal has none)."""
    module, _, name = IMPLEMENTATIONS[cap].partition(":")
    found = getattr(importlib.import_module(module), name)
    if not (isinstance(found, type) and issubclass(found, Bound)):
        raise TypeError(f"{IMPLEMENTATIONS[cap]} implements {cap} but is not a capability class")
    return found
