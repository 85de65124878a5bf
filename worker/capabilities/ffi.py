"""`ffi.c`: a granted C library, loaded through ctypes.

The parameter acts as the loaded `ctypes.CDLL` (`libc.printf(b"hi\\n")`).
Calls into C cannot be brokered or journaled one by one, which is why the
catalogue counts this capability as a write that reaches the open world: an
operator grants it only for code they trust as much as staal itself. What C
writes to standard output lands on standard error: descriptor 1 of a run
never reaches the protocol stream or the outcome.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any, NoReturn

from staal.caps import Ffi
from staal.worker.capabilities import Bound
from staal.worker.runs.refusal import broker_section

if TYPE_CHECKING:
    from staal.worker.capabilities.services import Services
    from staal.worker.runs.broker import GrantState
    from staal.worker.runs.engine import RunContext


class FfiCapability(Bound, Ffi):
    def __init__(self, ctx: RunContext, state: GrantState, services: Services) -> None:
        super().__init__(ctx, state, services)
        library = state.grant.library
        try:
            with broker_section():
                self._library = ctypes.CDLL(library)
        except OSError as exc:
            ctx.refuse(f"'ffi.c' cannot load {library}: {exc}")

    def narrow(self, **limits: object) -> NoReturn:
        self._ctx.refuse("'ffi.c' has no limits to narrow")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._library, name)
