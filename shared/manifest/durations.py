"""Durations as the manifest writes them: a whole number and a unit.

`"120s"`, `"90m"`, `"24h"`, `"30d"`. Each field says which units it takes:
a deadline is naturally in seconds, a once key's keep "a whole number and m,
h or d" (seed 000 section 5).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from staal.errors import DurationError

UNIT_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_UNIT_NAMES = {"s": "s", "m": "m", "h": "h", "d": "d"}
_DURATION = re.compile(r"^([0-9]{1,9})([smhd])$")
# A hundred years: longer than anything an operator means, short enough that
# arithmetic on wall-clock milliseconds never leaves 64 bits.
MAX_MS = 36_500 * UNIT_MS["d"]


def _units_text(units: str) -> str:
    names = [_UNIT_NAMES[u] for u in units]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


@dataclass(frozen=True, slots=True)
class Duration:
    """A positive span of time, kept with the text it was written as."""

    ms: int
    text: str

    @classmethod
    def parse(cls, text: object, units: str = "smhd") -> Duration:
        example = {"s": "120s", "m": "90m", "h": "24h", "d": "30d"}[units[0]]
        expected = f"a whole number followed by {_units_text(units)}, e.g. \"{example}\""
        if not isinstance(text, str):
            raise DurationError(f"expected a duration as a string ({expected}), not {text!r}")
        match = _DURATION.fullmatch(text)
        if match is None:
            raise DurationError(f"\"{text}\" is not a duration ({expected})")
        count, unit = int(match.group(1)), match.group(2)
        if unit not in units:
            raise DurationError(f"\"{text}\": this duration takes {_units_text(units)}, not {unit}")
        if count < 1:
            raise DurationError(f"\"{text}\" must be longer than zero")
        ms = count * UNIT_MS[unit]
        if ms > MAX_MS:
            raise DurationError(f"\"{text}\" is longer than 36500d")
        return cls(ms, text)

    @classmethod
    def of_days(cls, days: int) -> Duration:
        return cls(days * UNIT_MS["d"], f"{days}d")

    @property
    def seconds(self) -> float:
        return self.ms / 1000

    def __str__(self) -> str:
        return self.text
