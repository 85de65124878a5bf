"""Money: an exact amount in an ISO 4217 currency.

Held as an integer number of minor units, so arithmetic is exact and there is
no rounding anywhere. On the wire (DESIGN.md section 3) money is
`{"amount": "<decimal string>", "currency": "<ISO 4217>"}`; `"35"` and
`"35.00"` are the same amount, and the runtime always writes the currency's
minor units (`"35.00"` USD, `"500"` JPY).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from staal.currencies import MINOR_UNITS
from staal.errors import CurrencyMismatch, MoneyError

# Beyond a signed 64-bit count of minor units an amount cannot be stored in
# the databases and services staal talks to, so it is not held at all.
MAX_MINOR = 2**63 - 1

AMOUNT_PATTERN = r"^-?[0-9]+(\.[0-9]+)?$"
_AMOUNT = re.compile(AMOUNT_PATTERN)
_WIRE_KEYS = frozenset({"amount", "currency"})


def currency_exponent(code: str) -> int:
    """The number of minor-unit digits of an ISO 4217 code (USD: 2, JPY: 0)."""
    try:
        return MINOR_UNITS[code]
    except KeyError:
        raise MoneyError(f"{_show(code)} is not an ISO 4217 currency code", "currency") from None


def _show(value: Any) -> str:
    """A value as it would appear in JSON, cut short, for a message."""
    if isinstance(value, str):
        text = value if len(value) <= 40 else value[:37] + "..."
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def _check_currency(code: Any) -> str:
    if not isinstance(code, str):
        raise MoneyError(f"currency must be a string such as \"USD\", not {_show(code)}", "currency")
    if code not in MINOR_UNITS and code.upper() in MINOR_UNITS:
        raise MoneyError(
            f"{_show(code)} is not an ISO 4217 currency code (codes are upper case: "
            f"\"{code.upper()}\")",
            "currency",
        )
    currency_exponent(code)
    return code


def _minor_from_text(text: str, currency: str) -> int:
    if not _AMOUNT.fullmatch(text):
        raise MoneyError(f"{_show(text)} is not a decimal amount", "amount")
    exponent = MINOR_UNITS[currency]
    whole, _, fraction = text.lstrip("-").partition(".")
    if len(fraction) > exponent:
        places = "no decimals" if exponent == 0 else f"{exponent} decimals"
        raise MoneyError(
            f"{_show(text)} has {len(fraction)} decimals; {currency} has {places}", "amount"
        )
    # Checked before int() so a huge digit string costs nothing to refuse.
    if len(whole.lstrip("0")) + exponent > len(str(MAX_MINOR)):
        raise _too_large(text, currency)
    minor = int(whole + fraction.ljust(exponent, "0"))
    return -minor if text.startswith("-") else minor


def _minor_from_decimal(value: Decimal, currency: str) -> int:
    if not value.is_finite():
        raise MoneyError(f"{value} is not a decimal amount", "amount")
    exponent = MINOR_UNITS[currency]
    if value.adjusted() > 19:
        raise _too_large(str(value), currency)
    scaled = value.scaleb(exponent)
    if scaled != scaled.to_integral_value():
        raise MoneyError(f"{value} has more decimals than {currency} has ({exponent})", "amount")
    return int(scaled)


def _too_large(text: str, currency: str) -> MoneyError:
    return MoneyError(
        f"{_show(text)} is too large to hold exactly (at most "
        f"{_format_minor(MAX_MINOR, MINOR_UNITS[currency])} {currency})",
        "amount",
    )


def _format_minor(minor: int, exponent: int) -> str:
    sign = "-" if minor < 0 else ""
    digits = str(abs(minor)).rjust(exponent + 1, "0")
    if exponent == 0:
        return sign + digits
    return f"{sign}{digits[:-exponent]}.{digits[-exponent:]}"


def _bounded(minor: int, currency: str) -> int:
    if abs(minor) > MAX_MINOR:
        raise _too_large(_format_minor(minor, MINOR_UNITS[currency]), currency)
    return minor


class Money:
    """An exact amount of one currency. Immutable and hashable.

    `Money("35", "USD") == Money("35.00", "USD")`. Ordering and arithmetic
    across currencies raise `CurrencyMismatch`; equality across currencies
    is simply false.
    """

    __slots__ = ("_currency", "_minor")
    _minor: int
    _currency: str

    def __init__(self, amount: str | Decimal | int, currency: str) -> None:
        code = _check_currency(currency)
        if isinstance(amount, bool) or not isinstance(amount, (str, Decimal, int)):
            raise MoneyError(
                f"amount must be a decimal string such as \"35.00\", not {_show(amount)}", "amount"
            )
        if isinstance(amount, str):
            minor = _minor_from_text(amount, code)
        elif isinstance(amount, Decimal):
            minor = _minor_from_decimal(amount, code)
        else:
            minor = amount * 10 ** MINOR_UNITS[code]
        object.__setattr__(self, "_minor", _bounded(minor, code))
        object.__setattr__(self, "_currency", code)

    @classmethod
    def from_minor(cls, minor: int, currency: object) -> Money:
        """Money from a count of minor units, as payment services report it.

        The currency may be lower case (Stripe writes "usd").
        """
        if isinstance(minor, bool) or not isinstance(minor, int):
            raise MoneyError(f"minor units must be a whole number, not {_show(minor)}", "amount")
        code = currency.upper() if isinstance(currency, str) else currency
        code = _check_currency(code)
        money = cls.__new__(cls)
        object.__setattr__(money, "_minor", _bounded(minor, code))
        object.__setattr__(money, "_currency", code)
        return money

    @classmethod
    def zero(cls, currency: str) -> Money:
        return cls.from_minor(0, currency)

    @classmethod
    def from_wire(cls, value: Any) -> Money:
        """Read the wire form, refusing everything DESIGN.md section 3 refuses."""
        if not isinstance(value, dict):
            raise MoneyError(
                f"money must be an object {{\"amount\": \"35.00\", \"currency\": \"USD\"}}, "
                f"not {type(value).__name__}"
            )
        extra = sorted(set(value) - _WIRE_KEYS)
        if extra:
            raise MoneyError(f"unknown key {_show(extra[0])} (money has amount and currency)", extra[0])
        for key in ("amount", "currency"):
            if key not in value:
                raise MoneyError(f"{key} is required", key)
        amount = value["amount"]
        if isinstance(amount, (int, float)) and not isinstance(amount, bool):
            raise MoneyError(
                f"amount must be a string such as \"{amount}\", not a JSON number "
                "(numbers lose cents)",
                "amount",
            )
        if not isinstance(amount, str):
            raise MoneyError(f"amount must be a decimal string, not {_show(amount)}", "amount")
        currency = value["currency"]
        _check_currency(currency)
        return cls(amount, currency)

    # -- reading ---------------------------------------------------------

    @property
    def minor(self) -> int:
        return self._minor

    @property
    def currency(self) -> str:
        return self._currency

    @property
    def exponent(self) -> int:
        return MINOR_UNITS[self._currency]

    @property
    def amount(self) -> Decimal:
        return Decimal(self._minor).scaleb(-self.exponent)

    def canonical_amount(self) -> str:
        """The amount as the runtime writes it: exactly the minor-unit digits."""
        return _format_minor(self._minor, self.exponent)

    def to_wire(self) -> dict[str, str]:
        return {"amount": self.canonical_amount(), "currency": self._currency}

    def is_zero(self) -> bool:
        return self._minor == 0

    def __str__(self) -> str:
        return f"{self.canonical_amount()} {self._currency}"

    def __repr__(self) -> str:
        return f"Money({self.canonical_amount()!r}, {self._currency!r})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Money is immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        return (Money.from_minor, (self._minor, self._currency))

    # -- comparing and arithmetic ---------------------------------------

    def _same(self, other: Money, verb: str) -> None:
        if self._currency != other._currency:
            raise CurrencyMismatch(f"cannot {verb} {self} and {other}: different currencies")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Money):
            return NotImplemented
        return self._currency == other._currency and self._minor == other._minor

    def __hash__(self) -> int:
        return hash((self._minor, self._currency))

    def __lt__(self, other: Money) -> bool:
        if not isinstance(other, Money):
            return NotImplemented
        self._same(other, "compare")
        return self._minor < other._minor

    def __le__(self, other: Money) -> bool:
        if not isinstance(other, Money):
            return NotImplemented
        self._same(other, "compare")
        return self._minor <= other._minor

    def __gt__(self, other: Money) -> bool:
        if not isinstance(other, Money):
            return NotImplemented
        self._same(other, "compare")
        return self._minor > other._minor

    def __ge__(self, other: Money) -> bool:
        if not isinstance(other, Money):
            return NotImplemented
        self._same(other, "compare")
        return self._minor >= other._minor

    def __add__(self, other: Money) -> Money:
        if not isinstance(other, Money):
            return NotImplemented
        self._same(other, "add")
        return Money.from_minor(self._minor + other._minor, self._currency)

    def __sub__(self, other: Money) -> Money:
        if not isinstance(other, Money):
            return NotImplemented
        self._same(other, "subtract")
        return Money.from_minor(self._minor - other._minor, self._currency)

    def __neg__(self) -> Money:
        return Money.from_minor(-self._minor, self._currency)

    def __mul__(self, times: int) -> Money:
        if isinstance(times, bool) or not isinstance(times, int):
            return NotImplemented
        return Money.from_minor(self._minor * times, self._currency)

    __rmul__ = __mul__
