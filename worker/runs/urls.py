"""Matching request URLs against a grant's `only` patterns.

A pattern names scheme, host and port in full; in its path `*` matches
within one segment and `**` stands for any number of whole segments. A
request URL's query is not part of the match. URLs that could mean another
path than they seem to (dot segments, encoded slashes, credentials) are
refused before any matching.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

from staal.worker.errors import WorkerError

_DEFAULT_PORTS = {"http": 80, "https": 443}
_SUSPICIOUS = re.compile(r"%2f|%5c|%2e", re.IGNORECASE)


class UrlRefused(WorkerError, ValueError):
    """A URL the broker will not send a request to; reads as the object of
    "'<cap>' refuses ...": "URL '<url>': <why>"."""

    kind = "url_refused"

    def __init__(self, url: object, why: str) -> None:
        shown = repr(url) if isinstance(url, str) else f"{url!r} ({type(url).__name__})"
        super().__init__(f"URL {shown}: {why}")


@dataclass(frozen=True, slots=True)
class Origin:
    scheme: str
    host: str
    port: int


def _origin(scheme: str, host: str | None, port: int | None) -> Origin:
    return Origin(scheme.lower(), (host or "").lower(), port or _DEFAULT_PORTS.get(scheme.lower(), 0))


@dataclass(frozen=True, slots=True)
class Target:
    origin: Origin
    segments: tuple[str, ...]


def parse_request_url(url: str) -> Target:
    if not isinstance(url, str):
        raise UrlRefused(url, "a URL is a string")
    parts = urlsplit(url)
    if parts.scheme.lower() not in _DEFAULT_PORTS or not parts.hostname:
        raise UrlRefused(url, "it is not an http or https URL with a host")
    if parts.username is not None or parts.password is not None:
        raise UrlRefused(url, "it carries credentials")
    if _SUSPICIOUS.search(parts.path) or "\\" in parts.path:
        raise UrlRefused(url, "its path has an encoded slash, backslash or dot")
    segments = tuple(parts.path.split("/")[1:]) if parts.path else ()
    if any(s in (".", "..") for s in segments):
        raise UrlRefused(url, "its path has a . or .. segment")
    try:
        port = parts.port
    except ValueError as exc:
        raise UrlRefused(url, "its port is not a port number") from exc
    return Target(_origin(parts.scheme, parts.hostname, port), segments)


@dataclass(frozen=True, slots=True)
class Pattern:
    text: str
    origin: Origin
    segments: tuple[str, ...]

    def matches(self, target: Target) -> bool:
        return self.origin == target.origin and _match(self.segments, target.segments)


@lru_cache(maxsize=1024)
def compile_pattern(text: str) -> Pattern:
    """A pattern, or ValueError if `text` is not one (the manifest check
    refuses such patterns; narrowing in code reaches here directly)."""
    parts = urlsplit(text.replace("*", "x"))
    if parts.scheme.lower() not in _DEFAULT_PORTS or not parts.hostname or "*" in urlsplit(text).netloc:
        raise ValueError("a pattern is an http or https URL with its host written in full")
    parts.port  # noqa: B018 - raises ValueError for a port out of range
    path = urlsplit(text).path
    segments = tuple(path.split("/")[1:]) if path else ()
    return Pattern(text, _origin(parts.scheme, parts.hostname, parts.port), segments)


@lru_cache(maxsize=4096)
def _segment_regex(segment: str) -> re.Pattern[str]:
    return re.compile("[^/]*".join(re.escape(piece) for piece in segment.split("*")))


def _match(pattern: tuple[str, ...], path: tuple[str, ...]) -> bool:
    if not pattern:
        return not path
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_match(rest, path[i:]) for i in range(len(path) + 1))
    if not path:
        return False
    if "*" in head:
        # Never an empty segment: servers that merge "//" would read
        # "/v1//refunds" as "/v1/refunds", a path the pattern does not name.
        ok = path[0] != "" and _segment_regex(head).fullmatch(path[0]) is not None
    else:
        ok = head == path[0]
    return ok and _match(rest, path[1:])


def prepare_patterns(patterns: tuple[str, ...]) -> None:
    """Compile `patterns` and their wildcard segments now (the zygote, for
    each grant's `only`), so that a worker forked later finds them cached."""
    for text in patterns:
        for segment in compile_pattern(text).segments:
            if "*" in segment and segment != "**":
                _segment_regex(segment)


def allowed(patterns: tuple[str, ...], url: str) -> bool:
    target = parse_request_url(url)
    return any(compile_pattern(p).matches(target) for p in patterns)
