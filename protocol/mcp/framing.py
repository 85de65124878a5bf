"""Newline-delimited framing and the limits applied before anything is parsed
(seed 000 section 3, "Limits on what crosses the stream").

`LineReader` is fed the bytes read from the client and gives back each
complete line, or `Oversized` for a line longer than `MAX_LINE`; it never holds
more than `MAX_LINE` bytes (plus one for a trailing carriage return) of a line,
so an endless line costs no memory: the rest of it is discarded up to the next
newline. `too_deep` looks for nesting deeper than `MAX_DEPTH` without parsing.
`encode_line` turns an outgoing message into its one line.
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass
from itertools import accumulate

import orjson

from staal.records.record import Json

MAX_LINE = 4 * 1024 * 1024
MAX_DEPTH = 64

_NEWLINE = b"\n"
_CARRIAGE_RETURN = b"\r"


@dataclass(frozen=True, slots=True)
class Line:
    """One complete incoming line, without its line ending."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Oversized:
    """An incoming line longer than MAX_LINE; its bytes were not kept."""


class LineReader:
    """Splits a byte stream into lines, refusing those over the limit."""

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._max_line = max_line
        self._pending = bytearray()
        self._discarding = False

    def feed(self, data: bytes) -> list[Line | Oversized]:
        """Every line completed by `data`, in order."""
        lines: list[Line | Oversized] = []
        start = 0
        while True:
            end = data.find(_NEWLINE, start)
            if end < 0:
                self._keep(data[start:], lines)
                return lines
            self._keep(data[start:end], lines)
            self._end_line(lines)
            start = end + 1

    def finish(self) -> list[Line | Oversized]:
        """At the end of the stream: a last line that had no newline."""
        lines: list[Line | Oversized] = []
        if self._pending.strip():
            self._end_line(lines)
        self._pending.clear()
        self._discarding = False
        return lines

    def _keep(self, part: bytes, lines: list[Line | Oversized]) -> None:
        if self._discarding or not part:
            return
        # One byte over the limit is allowed for a "\r" that "\r\n" ends with.
        if len(self._pending) + len(part) > self._max_line + 1:
            self._pending.clear()
            self._discarding = True
            lines.append(Oversized())
            return
        self._pending += part

    def _end_line(self, lines: list[Line | Oversized]) -> None:
        if self._discarding:
            self._discarding = False
            return
        data = bytes(self._pending)
        self._pending.clear()
        if data.endswith(_CARRIAGE_RETURN):
            data = data[:-1]
        lines.append(Oversized() if len(data) > self._max_line else Line(data))


# A JSON string, escapes included; an unterminated one runs to the end.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_A_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
# Openers become 1 and closers -1 once read as signed bytes.
_BRACKET_SIGNS = bytes.maketrans(b"[]{}", b"\x01\xff\x01\xff")


def _openers(data: bytes) -> int:
    return data.count(b"[") + data.count(b"{")


def too_deep(line: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether `line` opens more than `limit` arrays and objects inside one
    another, counting brackets outside strings only. Nothing is parsed: a
    line this says is not too deep may still be invalid JSON."""
    if _openers(line) <= limit:
        return False
    brackets = _STRING.sub(b"", line).translate(None, _NOT_A_BRACKET)
    if _openers(brackets) <= limit:
        return False
    depths = accumulate(array("b", brackets.translate(_BRACKET_SIGNS)))
    return max(depths) > limit


def encode_line(message: dict[str, Json]) -> bytes:
    """`message` as one line: compact JSON (which never holds a raw newline)
    and the newline that ends it."""
    return orjson.dumps(message) + _NEWLINE
