"""Capability implementations: the objects a program's capability
parameters receive. Each subclasses the class the program annotated with
(`staal.caps`) and acts only through the run context."""

from __future__ import annotations

from typing import Any, Callable

from staal.caps import Capability
from staal.program import CapabilityRefused
from staal.worker.broker import GrantState


class Bound:
    """What every implementation holds: the run, its grant state, and the
    run-wide services (an HTTP client, the clock, secrets)."""

    def __init__(self, ctx: Any, state: GrantState, services: Any) -> None:
        self._ctx = ctx
        self._state = state
        self._services = services

    def narrow(self, **limits: Any) -> Capability:
        try:
            narrowed = self._state.narrow(**limits)
        except CapabilityRefused as exc:
            self._ctx.refuse(exc.message)
        return type(self)(self._ctx, narrowed, self._services)  # type: ignore[call-arg]

    def __repr__(self) -> str:
        return f"<{type(self).__mro__[2].__name__} '{self._state.param}'>"


Factory = Callable[[Any, GrantState, Any], Capability]


def registry() -> dict[str, Factory]:
    from staal.worker.capabilities.http import HttpGetCapability, HttpPostCapability
    from staal.worker.capabilities.values import ClockCapability, RandomCapability

    return {
        "net.http.get": HttpGetCapability,
        "net.http.post": HttpPostCapability,
        "clock.now": ClockCapability,
        "random.bytes": RandomCapability,
    }
