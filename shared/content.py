"""What a program returns for a result that is not JSON: images, audio and
embedded resources, mixed with text, in the order it gives them.

A program returns one part, or a list of parts (a `str` in the list is a
text part). Each is checked when the run ends: a part that cannot be
answered fails the run as `value`, naming the part's index and what was
wrong, and nothing is answered as success. A checked part becomes a
`ContentPart` record, its bytes held base64, which is what the journal keeps
and what is answered, again identically on a repeat or a resume.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

from staal.errors import ContentError
from staal.records.content import ContentPart, mime_type_problem, uri_problem

_BYTES = (bytes, bytearray, memoryview)


@dataclass(frozen=True, slots=True)
class Text:
    """A text part (a `str` in a list of parts is the same)."""

    text: str


@dataclass(frozen=True, slots=True)
class Image:
    """An image: its bytes, and its MIME type, one of image/* ("image/png")."""

    data: bytes
    mime_type: str


@dataclass(frozen=True, slots=True)
class Audio:
    """A recording: its bytes, and its MIME type, one of audio/* ("audio/wav")."""

    data: bytes
    mime_type: str


@dataclass(frozen=True, slots=True)
class EmbeddedResource:
    """A resource's contents, under its URI: `text`, or `blob` for bytes
    (one of the two), with its MIME type if known."""

    uri: str
    text: str | None = None
    blob: bytes | None = None
    mime_type: str | None = None


Part = Text | Image | Audio | EmbeddedResource
PART_TYPES = (Text, Image, Audio, EmbeddedResource)


def content_of(returned: object) -> tuple[ContentPart, ...] | None:
    """The parts a program returned, checked; None when what it returned is
    not content (a JSON result, as before). A list is content when any of
    its items is a part; then every item must be a part or a `str`."""
    if isinstance(returned, PART_TYPES):
        return (part_record(returned, 0),)
    if not isinstance(returned, (list, tuple)) or not any(
            isinstance(item, PART_TYPES) for item in returned):
        return None
    return tuple(_item_record(item, index) for index, item in enumerate(returned))


def _item_record(item: object, index: int) -> ContentPart:
    if isinstance(item, str):
        return ContentPart("text", text=item)
    if isinstance(item, PART_TYPES):
        return part_record(item, index)
    raise ContentError(
        f"part {index}: a {type(item).__name__} is not a content part; a result that holds "
        "images, audio or embedded resources is a list of str, staal.Text, staal.Image, "
        "staal.Audio and staal.EmbeddedResource")


def part_record(part: Part, index: int) -> ContentPart:
    """`part` as the record the journal keeps, or ContentError naming `index`."""
    kind = type(part).__name__
    problem = _problem(part)
    if problem is not None:
        raise ContentError(f"part {index} ({kind}): {problem}")
    if isinstance(part, Text):
        return ContentPart("text", text=part.text)
    if isinstance(part, Image):
        return ContentPart("image", data=_base64(part.data), mime_type=part.mime_type)
    if isinstance(part, Audio):
        return ContentPart("audio", data=_base64(part.data), mime_type=part.mime_type)
    data = None if part.blob is None else _base64(part.blob)
    return ContentPart("resource", text=part.text, data=data, mime_type=part.mime_type,
                       uri=part.uri)


def _problem(part: Part) -> str | None:
    if isinstance(part, Text):
        return _str_problem("text", part.text)
    if isinstance(part, (Image, Audio)):
        major = "image" if isinstance(part, Image) else "audio"
        return (_bytes_problem("data", part.data)
                or mime_type_problem(part.mime_type, major))
    return _resource_problem(part)


def _resource_problem(part: EmbeddedResource) -> str | None:
    if (part.text is None) == (part.blob is None):
        return "give text or blob (its bytes), one of the two"
    problem = uri_problem(part.uri)
    if problem is None and part.text is not None:
        problem = _str_problem("text", part.text)
    if problem is None and part.blob is not None:
        problem = _bytes_problem("blob", part.blob)
    if problem is None and part.mime_type is not None:
        problem = mime_type_problem(part.mime_type, None)
    return problem


def _str_problem(name: str, value: object) -> str | None:
    if isinstance(value, str):
        return None
    return f"{name} is a str, not {type(value).__name__}"


def _bytes_problem(name: str, value: object) -> str | None:
    if isinstance(value, str):
        return (f"{name} is the bytes themselves (bytes), not a str: staal encodes them "
                "as base64 itself")
    if not isinstance(value, _BYTES):
        return f"{name} is bytes, not {type(value).__name__}"
    if len(value) == 0:
        return f"{name} is empty"
    return None


def _base64(data: bytes | bytearray | memoryview) -> str:
    return base64.b64encode(bytes(data)).decode("ascii")
