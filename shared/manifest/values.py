"""Reading one manifest value at a key path, collecting problems instead of
stopping at the first. Each reader returns the value, or None after
recording why it was refused."""

from __future__ import annotations

import builtins
import difflib
import keyword
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar
from urllib.parse import SplitResult, urlsplit

from staal.errors import DurationError, MoneyError, SizeError
from staal.inputs.types import show
from staal.manifest.durations import Duration
from staal.manifest.model import SecretRef
from staal.manifest.sizes import Size
from staal.money import Money
from staal.records.record import Json

T = TypeVar("T")
# An object of the manifest as parsed (TOML or JSON): its values are of any
# kind until a reader here checks them.
Table = dict[str, Json]
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def kind_of(value: Json) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class ValueReader:
    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.problems: list[str] = []
        self._refused: list[str] = []
        # Required keys already reported absent: reading their (missing)
        # value later adds nothing, since the absence is the one problem.
        self._absent: set[str] = set()

    def add(self, path: str, message: str) -> None:
        if path in self._absent:
            return
        self.problems.append(f"{path}: {message}" if path else message)
        self._refused.append(path)

    def failed(self, obj: Table, path: str, *keys: str) -> bool:
        """Whether any of these keys of `obj` was present and refused."""
        for key in keys:
            if key not in obj:
                continue
            where = join(path, key)
            if any(p == where or p.startswith((where + ".", where + "["))
                   for p in self._refused):
                return True
        return False

    def optional(self, obj: Table, key: str, path: str,
                 reader: Callable[[Json, str], T | None]) -> T | None:
        if key not in obj:
            return None
        return reader(obj[key], join(path, key))

    # -- shapes ---------------------------------------------------------

    def obj(self, value: Json, path: str, keys: Iterable[str],
            required: Iterable[str] = ()) -> Table | None:
        keys = tuple(keys)
        if not isinstance(value, dict):
            self.add(path or "manifest", f"expected an object, not {kind_of(value)}")
            return None
        for key in getattr(value, "duplicates", ()):
            self.add(join(path, key), "appears more than once in this object")
        missing = [key for key in required if key not in value]
        for key in value:
            if key not in keys:
                meant = self.meant(key, keys)
                self.add(join(path, key), self.unknown_key(key, keys, path))
                if meant in missing:  # a misspelt required key: one problem, not two
                    missing.remove(meant)
                    self._absent.add(join(path, meant))
        for key in missing:
            self.add(join(path, key), "is required")
            self._absent.add(join(path, key))
        return value

    @staticmethod
    def meant(key: str, keys: tuple[str, ...]) -> str | None:
        close = difflib.get_close_matches(key, keys, n=1)
        return close[0] if close else None

    @classmethod
    def unknown_key(cls, key: str, keys: tuple[str, ...], path: str) -> str:
        meant = cls.meant(key, keys)
        hint = f"; did you mean '{meant}'?" if meant else ""
        return f"unknown key (allowed here: {', '.join(sorted(keys))}){hint}"

    def list(self, value: Json, path: str) -> builtins.list[Json] | None:
        if not isinstance(value, list):
            self.add(path, f"expected a list, not {kind_of(value)}")
            return None
        return value

    def string(self, value: Json, path: str) -> str | None:
        if not isinstance(value, str):
            self.add(path, f"expected a string, not {kind_of(value)}")
            return None
        if not value.strip():
            self.add(path, "must not be empty")
            return None
        return value

    def matching(self, value: Json, path: str, pattern: re.Pattern[str], what: str) -> str | None:
        """A string `pattern` matches whole; `what` says what it must be."""
        text = self.string(value, path)
        if text is not None and not pattern.fullmatch(text):
            self.add(path, f"{show(text)} is not {what}")
            return None
        return text

    def string_list(self, value: Json, path: str, non_empty: bool = False) -> builtins.list[str] | None:
        items = self.list(value, path)
        if items is None:
            return None
        if non_empty and not items:
            self.add(path, "must name at least one")
            return None
        ok = all(self.string(item, f"{path}[{i}]") is not None for i, item in enumerate(items))
        return items if ok else None

    def whole(self, value: Json, path: str, lo: int, hi: int) -> int | None:
        if isinstance(value, bool) or not isinstance(value, int):
            shown = show(value) if isinstance(value, (int, float)) else kind_of(value)
            self.add(path, f"expected a whole number, not {shown}")
            return None
        if not lo <= value <= hi:
            self.add(path, f"{value} is out of range ({lo} to {hi})")
            return None
        return value

    def boolean(self, value: Json, path: str) -> bool | None:
        if not isinstance(value, bool):
            self.add(path, f"expected true or false, not {kind_of(value)}")
            return None
        return value

    def identifier(self, value: Json, path: str) -> str | None:
        name = self.string(value, path)
        if name is None:
            return None
        if not name.isidentifier() or keyword.iskeyword(name):
            self.add(path, f"{show(name)} is not a Python identifier")
            return None
        return name

    # -- values with meaning ------------------------------------------

    def path(self, value: Json, path: str) -> Path | None:
        text = self.string(value, path)
        if text is None:
            return None
        return (self.base_dir / text).resolve()

    def duration(self, value: Json, path: str, units: str = "smhd") -> Duration | None:
        try:
            return Duration.parse(value, units)
        except DurationError as exc:
            self.add(path, exc.message)
            return None

    def size(self, value: Json, path: str, least_mib: int, most_mib: int) -> Size | None:
        try:
            return Size.parse(value, least_mib, most_mib)
        except SizeError as exc:
            self.add(path, exc.message)
            return None

    def money(self, value: Json, path: str) -> Money | None:
        try:
            return Money.from_wire(value)
        except MoneyError as exc:
            where = join(path, exc.field) if exc.field else path
            self.add(where, exc.message)
            return None

    def positive_money(self, value: Json, path: str) -> Money | None:
        money = self.money(value, path)
        if money is not None and money.minor <= 0:
            self.add(join(path, "amount"), f"{show(money.canonical_amount())} must be more than zero")
            return None
        return money

    def secret(self, value: Json, path: str) -> SecretRef | None:
        """A secret is only ever named: {"env": NAME}. A value written in
        place is refused without being repeated in the message."""
        if isinstance(value, str):
            self.add(path, "secrets are written as {\"env\": \"NAME\"}, never as a value "
                     "(the manifest is meant for version control)")
            return None
        obj = self.obj(value, path, ("env",), required=("env",))
        if obj is None or "env" not in obj:
            return None
        name = self.string(obj["env"], join(path, "env"))
        if name is None:
            return None
        if not _ENV_NAME.fullmatch(name):
            self.add(join(path, "env"), f"{show(name)} is not an environment variable name")
            return None
        return SecretRef(name)

    def url(self, value: Json, path: str) -> str | None:
        text = self.string(value, path)
        if text is None:
            return None
        parts = self.split_url(text, path)
        if parts is None:
            return None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            self.add(path, f"{show(text)} is not an http or https URL with a host")
            return None
        if parts.query or parts.fragment or parts.username or parts.password:
            self.add(path, f"{show(text)}: a base URL has no query, fragment or credentials")
            return None
        return text.rstrip("/")

    def split_url(self, text: str, path: str) -> SplitResult | None:
        """`text` split as a URL; None (the problem added) if its host or
        port cannot be read, which urlsplit says only by a ValueError."""
        try:
            parts = urlsplit(text)
            parts.port  # noqa: B018 -- read for its ValueError
        except ValueError as exc:
            self.add(path, f"{show(text)} is not a URL that can be read: {exc}")
            return None
        return parts

    def url_pattern(self, value: Json, path: str) -> str | None:
        """A URL pattern of `only`: `*` matches within one path segment, `**`
        stands for any number of whole segments; the scheme and host are
        written out in full."""
        text = self.string(value, path)
        if text is None:
            return None
        parts = urlsplit(text.replace("*", "x"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            self.add(path, f"{show(text)} is not an http or https URL pattern with a host")
            return None
        if "?" in text or "#" in text or "@" in urlsplit(text).netloc:
            self.add(path, f"{show(text)}: a pattern matches scheme, host and path only")
            return None
        try:
            parts.port  # noqa: B018 - raises ValueError for a port out of range
        except ValueError:
            self.add(path, f"{show(text)} has an invalid port")
            return None
        if "*" in urlsplit(text).netloc:
            self.add(path, f"{show(text)}: the host is written in full; * and ** match in the path")
            return None
        for segment in urlsplit(text).path.split("/"):
            if "**" in segment and segment != "**":
                self.add(path, f"{show(text)}: ** stands for whole segments (/v1/**), "
                         f"not part of one ({show(segment)})")
                return None
        return text
