"""The operator's prompts (`prompts[]`, issue 29) as frozen objects: read
and checked by `staal.manifest.prompts`, held by `Manifest.prompts`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class PromptArgument:
    """A prompt's argument (`prompts[i].arguments[j]`) and where its
    completions come from: the operator's `values`, or the record ids of a
    `collection` (one read run of it)."""

    name: str
    description: str | None = None
    required: bool = False
    values: tuple[str, ...] = ()
    collection: str | None = None


@dataclass(frozen=True, slots=True)
class PromptMessage:
    """One message of a prompt: `text` (a template), an embedded resource of
    the server's own (`uri` and `text` templates) or an image (`data`, read
    from the operator's file at start)."""

    role: Literal["user", "assistant"]
    kind: Literal["text", "resource", "image"]
    text: str = ""
    uri: str = ""
    mime_type: str = "text/plain"
    data: bytes = b""


@dataclass(frozen=True, slots=True)
class Prompt:
    """A prompt the operator ships (`prompts[i]`): it runs nothing."""

    name: str
    description: str
    arguments: tuple[PromptArgument, ...]
    messages: tuple[PromptMessage, ...]
    title: str | None = None
