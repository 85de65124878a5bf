"""The broker's book-keeping for one grant: its limits, what has been used
against them, and narrowing (DESIGN.md section 4).

A grant's state lives for one run. Narrowing makes a child state with
tighter limits; an action through the child is checked against the child
and every ancestor, and counted in all of them, so narrowing can never
widen. Usage is reported per capability parameter of the entry function,
whatever was narrowed from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from staal.errors import CurrencyMismatch
from staal.manifest.model import Grant
from staal.money import Money
from staal.program import CapabilityRefused
from staal.records.outcomes import Usage
from staal.worker.runs.urls import UrlRefused, allowed, compile_pattern

NARROWABLE = ("uses", "each", "max", "only")


@dataclass
class ParamUsage:
    """What one capability parameter did: actions attempted and money
    charged, per currency, replayed ops included (seed 000 section 6)."""

    actions: int = 0
    charged: dict[str, Money] = field(default_factory=dict)

    def add(self, charged: tuple[Money, ...]) -> None:
        self.actions += 1
        for money in charged:
            before = self.charged.get(money.currency, Money.zero(money.currency))
            self.charged[money.currency] = before + money

    def frozen(self) -> Usage:
        return Usage(actions=self.actions,
                     charged=tuple(self.charged[c] for c in sorted(self.charged)))


@dataclass
class Limits:
    uses: int | None = None
    each: Money | None = None
    max: Money | None = None
    only: tuple[str, ...] | None = None


class GrantState:
    def __init__(self, param: str, grant: Grant, usage: ParamUsage,
                 limits: Limits | None = None, parent: GrantState | None = None) -> None:
        self.param = param
        self.grant = grant
        self.cap = grant.cap
        self.usage = usage
        self.parent = parent
        self.limits = limits or Limits(grant.uses, grant.each, grant.max, grant.only)
        self.used = 0
        self.asked: dict[str, Money] = {}
        # A narrowed composite acts through its parent's needs, and their counts.
        self.needs: dict[str, GrantState] = parent.needs if parent is not None else {
            name: GrantState(f"{param}.{name}", need, usage)
            for name, need in grant.needs.items() if isinstance(need, Grant)
        }

    @classmethod
    def for_param(cls, param: str, grant: Grant) -> GrantState:
        return cls(param, grant, ParamUsage())

    def chain(self) -> list[GrantState]:
        states: list[GrantState] = []
        state: GrantState | None = self
        while state is not None:
            states.append(state)
            state = state.parent
        return states

    # -- checks --------------------------------------------------------

    def check(self, money: Money | None = None, url: str | None = None) -> None:
        """Refuse, with a message naming the limit and what the action
        needed, an action that any limit in the chain does not allow."""
        for state in self.chain():
            state._check_own(money, url)

    def _check_own(self, money: Money | None, url: str | None) -> None:
        limits, cap = self.limits, f"'{self.cap}'"
        if limits.uses is not None and self.used + 1 > limits.uses:
            noun = "action" if limits.uses == 1 else "actions"
            raise CapabilityRefused(
                f"{cap} allows {limits.uses} {noun} per run; this would be action {self.used + 1}")
        if url is not None and limits.only is not None:
            try:
                ok = allowed(limits.only, url)
            except UrlRefused as exc:
                raise CapabilityRefused(f"{cap} refuses {exc}") from None
            if not ok:
                raise CapabilityRefused(
                    f"{cap} does not allow {url}; it allows {', '.join(limits.only)}")
        if money is not None:
            self._check_money(money, cap)

    def _check_money(self, money: Money, cap: str) -> None:
        limits = self.limits
        if limits.each is not None:
            _same_currency(cap, limits.each, money)
            if money > limits.each:
                raise CapabilityRefused(
                    f"{cap} allows at most {limits.each} per action; this action needs {money}")
        if limits.max is not None:
            _same_currency(cap, limits.max, money)
            asked = self.asked.get(money.currency, Money.zero(money.currency))
            if asked + money > limits.max:
                raise CapabilityRefused(
                    f"{cap} allows at most {limits.max} per run; {asked} is already asked "
                    f"for and this action needs {money}")
        if money.minor <= 0:
            raise CapabilityRefused(f"{cap} acts only on amounts above zero; this action has {money}")

    # -- counting ------------------------------------------------------

    def count(self, money: Money | None, charged: tuple[Money, ...], usage: bool = True) -> None:
        """An action was attempted through this state (performed or replayed).
        `usage=False` for a composite's lower grant: the composite's own
        count already reports the action in its parameter's usage."""
        for state in self.chain():
            state.used += 1
            if money is not None:
                before = state.asked.get(money.currency, Money.zero(money.currency))
                state.asked[money.currency] = before + money
        if usage:
            self.usage.add(charged)

    # -- narrowing -----------------------------------------------------

    def narrow(self, **limits: Any) -> GrantState:
        unknown = sorted(set(limits) - set(NARROWABLE))
        if unknown:
            raise TypeError(f"narrow() takes {', '.join(NARROWABLE)}, not {', '.join(unknown)}")
        narrowed = Limits(
            uses=self._narrower_count(limits.get("uses")),
            each=self._narrower_money("each", limits.get("each")),
            max=self._narrower_money("max", limits.get("max")),
            only=self._narrower_only(limits.get("only")),
        )
        return GrantState(self.param, self.grant, self.usage, narrowed, parent=self)

    def _nearest(self, name: str) -> Any:
        """The limit that binds here: this state's, or the nearest ancestor's."""
        for state in self.chain():
            value = getattr(state.limits, name)
            if value is not None:
                return value
        return None

    def _narrower_count(self, uses: Any) -> int | None:
        if uses is None:
            return None
        if isinstance(uses, bool) or not isinstance(uses, int) or uses < 0:
            raise CapabilityRefused(f"narrow(uses=...) takes a count, not {uses!r}")
        current = self._nearest("uses")
        if current is not None and uses > current:
            raise CapabilityRefused(
                f"narrowing may not widen '{self.cap}': uses {uses} is more than {current}")
        return uses

    def _narrower_money(self, name: str, value: Any) -> Money | None:
        if value is None:
            return None
        if not isinstance(value, Money):
            raise CapabilityRefused(f"narrow({name}=...) takes Money, not {value!r}")
        current = self._nearest(name)
        if current is not None:
            try:
                wider = value > current
            except CurrencyMismatch:
                wider = True
            if wider:
                raise CapabilityRefused(
                    f"narrowing may not widen '{self.cap}': {name} {value} is more than {current}")
        return value

    def _narrower_only(self, only: Any) -> tuple[str, ...] | None:
        if only is None:
            return None
        if isinstance(only, str) or not all(isinstance(p, str) for p in only):
            raise CapabilityRefused("narrow(only=...) takes a list of URL patterns")
        for pattern in only:
            try:
                compile_pattern(pattern)
            except ValueError as exc:
                raise CapabilityRefused(
                    f"narrow(only=...): {pattern!r} is not a URL pattern: {exc}") from None
        # Checked together with every ancestor's own list, so it can only narrow.
        return tuple(only)


def _same_currency(cap: str, limit: Money, money: Money) -> None:
    """Refuse an action in another currency than the limit it is checked against."""
    if limit.currency != money.currency:
        raise CapabilityRefused(
            f"{cap} limits are in {limit.currency}; this action is in {money.currency}")
