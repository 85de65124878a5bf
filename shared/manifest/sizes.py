"""Memory sizes as the manifest writes them: a whole number and a binary unit.

`"256MiB"`, `"1GiB"`, in the manifest's style for durations (`"120s"`): a
string that says its unit, so `512` can never be read as bytes by one reader
and MiB by another. A tool's `max_memory` takes them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from staal.errors import SizeError

MIB = 1 << 20
UNIT_MIB = {"MiB": 1, "GiB": 1024}
_SIZE = re.compile(r"^([0-9]{1,7})(MiB|GiB)$")
EXPECTED = 'a whole number followed by MiB or GiB, e.g. "512MiB" or "1GiB"'


def machine_mib() -> int:
    """The machine's physical memory, in whole MiB."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // MIB


def show_mib(mib: int) -> str:
    """A size in MiB as the manifest would write it."""
    return f"{mib // 1024}GiB" if mib % 1024 == 0 else f"{mib}MiB"


@dataclass(frozen=True, slots=True)
class Size:
    """A positive memory size, kept with the text it was written as."""

    mib: int
    text: str

    @classmethod
    def parse(cls, text: object, least_mib: int, most_mib: int) -> Size:
        if not isinstance(text, str):
            raise SizeError(f"expected a size as a string ({EXPECTED}), not {text!r}")
        match = _SIZE.fullmatch(text)
        if match is None:
            raise SizeError(f'"{text}" is not a size ({EXPECTED})')
        mib = int(match.group(1)) * UNIT_MIB[match.group(2)]
        if mib < least_mib:
            raise SizeError(f'"{text}" is less than {show_mib(least_mib)}, too little to run a program in')
        if mib > most_mib:
            raise SizeError(f'"{text}" is more than this machine has ({show_mib(most_mib)})')
        return cls(mib, text)

    def __str__(self) -> str:
        return self.text
