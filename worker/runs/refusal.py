"""Broker sections, and what happens to an action refused outside one.

The tripwire (`worker/confinement/confine.py`), the refused standard input
(`worker/confinement/inherited.py`) and the guards over calls that raise no audit event
all refuse the same way: `refuse(message)` tells the run (through the
`on_violation` callback the tripwire was installed or narrowed with), then
raises `CapabilityRefused`. Inside a `broker_section` nothing is refused: the
broker wraps its own work (HTTP connections, journal writes) in one.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import NoReturn

from staal.program import CapabilityRefused

__all__ = ["broker_section", "in_broker_section", "refuse", "report_violations_to"]

# A context variable rather than a thread-local: each thread starts with an
# empty context (so a section covers only the thread that entered it), and an
# asyncio task started inside a section inherits it while one started outside
# does not.
IN_BROKER: contextvars.ContextVar[bool] = contextvars.ContextVar("staal_in_broker", default=False)


class BrokerSection:
    __slots__ = ("_token",)

    def __enter__(self) -> None:
        self._token = IN_BROKER.set(True)

    def __exit__(self, *exc_info: object) -> None:
        IN_BROKER.reset(self._token)


def broker_section() -> BrokerSection:
    """A context manager: while it is active in the current thread (and
    context), the tripwire allows everything. The broker wraps its own work
    (HTTP connections, journal writes) in it. Sections nest."""
    return BrokerSection()


def in_broker_section() -> bool:
    return IN_BROKER.get()


class _Report:
    """Where a refusal is reported: one callback per process, set when the
    tripwire is installed and replaced when it is narrowed to one run."""

    on_violation: Callable[[str], None] | None = None


def report_violations_to(on_violation: Callable[[str], None]) -> None:
    _Report.on_violation = on_violation


def refuse(message: str) -> NoReturn:
    """Report `message` to the installed `on_violation` (inside a broker
    section, so the callback may write the journal) and raise."""
    callback = _Report.on_violation
    if callback is not None:
        try:
            with broker_section():
                callback(message)
        except BaseException as error:  # a broken callback must not unblock the action
            raise CapabilityRefused(message) from error
    raise CapabilityRefused(message)
