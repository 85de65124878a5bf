"""The one exception base of the `staal` package.

Every error raised by the shared core carries a stable, machine-readable
`kind`; tests and boundaries match on it, never on message text. Across a
process boundary an error travels as `to_data()`, never as a pickled object.
"""

from __future__ import annotations

from typing import ClassVar


class StaalError(Exception):
    """Base of every error the shared core raises on purpose."""

    kind: ClassVar[str] = "internal"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_data(self) -> dict[str, str]:
        return {"kind": self.kind, "message": self.message}


class MoneyError(StaalError):
    """An amount or currency that cannot be a `Money`.

    `field` is "amount" or "currency" when the problem is in one of the two
    fields of the wire form, so a caller can name the exact key path.
    """

    kind = "money"

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class CurrencyMismatch(MoneyError):
    """Ordering or arithmetic across two currencies."""

    kind = "currency_mismatch"


class DurationError(StaalError):
    kind = "duration"


class SizeError(StaalError):
    """A memory size the manifest writes wrongly ("512MB", 512, "0MiB")."""

    kind = "size"


class CanonicalError(StaalError):
    """A value that has no canonical JSON form (NaN, a set, a non-string key...)."""

    kind = "canonical"


class ContentError(StaalError):
    """A result's content part that cannot be answered: a MIME type that is
    not of its kind, bytes that are not bytes, a URI that is not one. The
    message names the part by its index."""

    kind = "content"


class RecordError(StaalError):
    """A ledger event, journal record or worker message of the wrong shape."""

    kind = "record"

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.reason = message


class LogDamaged(StaalError):
    """An append-only log with damage other than a torn last line."""

    kind = "log_damaged"

    def __init__(self, path: str, line: int, reason: str) -> None:
        super().__init__(f"{path} line {line}: {reason}")
        self.path = path
        self.line = line
        self.reason = reason


class LogExists(StaalError):
    kind = "log_exists"


class ManifestError(StaalError):
    """Every problem found in a manifest, reported together."""

    kind = "manifest"

    def __init__(self, source: str, problems: list[str]) -> None:
        count = len(problems)
        noun = "problem" if count == 1 else "problems"
        body = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"{source}: {count} {noun}\n{body}")
        self.source = source
        self.problems = tuple(problems)
