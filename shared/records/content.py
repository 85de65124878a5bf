"""A result's content parts as data: what a program returned when it
returned images, audio or embedded resources (staal.content), as the journal's
end record, the worker's `ended` message and the supervisor's answer hold
them. Bytes are held base64, as MCP carries them, so the journaled part is
exactly what is answered: a resumed or repeated call gives the same bytes.

The part's shape is checked when it is made and again when it is read back,
so a journal that was edited by hand cannot answer a malformed item.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Literal

from staal.errors import RecordError
from staal.records.record import Pattern

PartType = Literal["text", "image", "audio", "resource"]
# Standard base64 with padding (RFC 4648 section 4), as MCP's `data` and `blob` are.
Base64 = Annotated[str, Pattern(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?",
                                "base64 (RFC 4648, padded)")]
# RFC 6838 section 4.2: type "/" subtype, each a restricted name; then any
# parameters (RFC 2045: `; name=value`, the value a token or a quoted string).
_NAME = r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
MIME_TYPE = re.compile(
    rf"(?P<type>{_NAME})/{_NAME}(?:[ \t]*;[ \t]*{_TOKEN}=(?:{_TOKEN}|\"(?:[^\"\\]|\\.)*\"))*")
# RFC 3986 section 3.1: a scheme, then the rest, with no space or control
# character in it (an absolute URI; a relative reference names nothing here).
URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:[^\x00-\x20\x7f]+")


def mime_type_problem(mime_type: object, major: str | None) -> str | None:
    """Why `mime_type` is not a MIME type (of the `major` type, if given)."""
    if not isinstance(mime_type, str):
        return f"mime_type is a string such as \"{major or 'text'}/...\", not {type(mime_type).__name__}"
    match = MIME_TYPE.fullmatch(mime_type)
    if match is None:
        return f"mime_type {mime_type[:80]!r} is not a MIME type (type/subtype, RFC 6838)"
    if major is not None and match["type"].lower() != major:
        return f"mime_type {mime_type[:80]!r} is not an {major} type ({major}/...)"
    return None


def uri_problem(uri: object) -> str | None:
    if not isinstance(uri, str):
        return f"uri is a string, not {type(uri).__name__}"
    if URI.fullmatch(uri) is None:
        return (f"uri {uri[:80]!r} is not an absolute URI (a scheme such as \"file:\", then no "
                "space or control character)")
    return None


@dataclass(frozen=True, slots=True)
class ContentPart:
    """One part of a result, in the order the program gave: text (`text`);
    an image or audio (`data`, `mime_type`); an embedded resource (`uri`,
    its `mime_type` if known, and `text` or, for bytes, `data`)."""

    type: PartType
    text: str | None = None
    data: Base64 | None = None
    mime_type: str | None = None
    uri: str | None = None

    def __post_init__(self) -> None:
        problem = _shape_problem(self)
        if problem is not None:
            raise RecordError(problem[1], problem[0])


def _shape_problem(part: ContentPart) -> tuple[str, str] | None:
    """(field, what is wrong) for a part whose fields do not fit its type."""
    given = {name for name in ("text", "data", "mime_type", "uri") if getattr(part, name) is not None}
    if part.type == "text":
        needed, allowed = {"text"}, {"text"}
    elif part.type in ("image", "audio"):
        needed, allowed = {"data", "mime_type"}, {"data", "mime_type"}
    else:
        needed, allowed = {"uri"}, {"uri", "mime_type", "text", "data"}
        if ("text" in given) == ("data" in given):
            return "text", "an embedded resource has either text or data (its bytes), not both or neither"
    for name in sorted(needed - given):
        return name, f"{_a(part.type)} part needs {name}"
    for name in sorted(given - allowed):
        return name, f"{_a(part.type)} part has no {name}"
    if part.mime_type is not None:
        major = part.type if part.type in ("image", "audio") else None
        problem = mime_type_problem(part.mime_type, major)
        if problem is not None:
            return "mime_type", problem
    if part.uri is not None:
        problem = uri_problem(part.uri)
        if problem is not None:
            return "uri", problem
    return None


def _a(word: str) -> str:
    return f"an {word}" if word[0] in "aeiou" else f"a {word}"


def check_content(outcome: str, result: object, content: tuple[ContentPart, ...] | None) -> None:
    """Content parts belong to a done run, in place of a JSON result."""
    if content is None:
        return
    if outcome != "done":
        raise RecordError(f"only a done outcome has content, not {outcome}", "content")
    if result is not None:
        raise RecordError("a done outcome has a JSON result or content parts, not both", "content")
