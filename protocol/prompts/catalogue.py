"""prompts/list and prompts/get (issue 29), the same in both revisions but
for the fields a revision adds (the dispatcher's handler adds them).

A prompt is the operator's text: getting one substitutes the caller's
arguments into its templates and runs nothing. A list is paged with the
resources' signed cursors (protocol/mcp/cursors.py), so a cursor is one this
server gave for this list or it is refused. A prompt outside the caller's
profile is not in its catalogue: asking for it is answered as for a prompt
that does not exist.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from string import Formatter

from staal.manifest.prompt_model import Prompt, PromptMessage
from staal.protocol.mcp.cursors import CursorSigner
from staal.protocol.mcp.jsonrpc import INVALID_PARAMS, RpcError
from staal.records.record import Json

PAGE_SIZE = 50
CURSOR_COLLECTION = "prompts"
MAX_ARGUMENT = 10_000
# RFC 3986's unreserved characters: kept as they are in a URI; any other is %-escaped.
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def invalid(message: str, **data: Json) -> RpcError:
    return RpcError(INVALID_PARAMS, message, data or None)


def unknown_prompt(name: Json) -> RpcError:
    """What the spec names for a name no prompt has (-32602, "Invalid prompt name")."""
    shown = name[:200] if isinstance(name, str) else name
    return invalid(f"Invalid prompt name: no prompt {shown!r} is served here", name=shown)


def fill(template: str, arguments: dict[str, str], quote: bool = False) -> str:
    """`template` with each `{argument}` replaced (an absent one by
    nothing); in a URI each value is %-escaped, so it stays one part."""
    parts = []
    for literal, field, _, _ in Formatter().parse(template):
        parts.append(literal)
        if field is not None:
            value = arguments.get(field, "")
            parts.append(uri_escape(value) if quote else value)
    return "".join(parts)


def uri_escape(value: str) -> str:
    return "".join(c if c in _UNRESERVED else "".join(f"%{b:02X}" for b in c.encode())
                   for c in value)


def describe(prompt: Prompt) -> dict[str, Json]:
    """The Prompt object of prompts/list."""
    wire: dict[str, Json] = {"name": prompt.name}
    if prompt.title is not None:
        wire["title"] = prompt.title
    wire["description"] = prompt.description
    arguments: list[Json] = []
    for argument in prompt.arguments:
        item: dict[str, Json] = {"name": argument.name}
        if argument.description is not None:
            item["description"] = argument.description
        item["required"] = argument.required
        arguments.append(item)
    wire["arguments"] = arguments
    return wire


def message(item: PromptMessage, arguments: dict[str, str]) -> dict[str, Json]:
    """One PromptMessage of prompts/get, its templates filled."""
    content: dict[str, Json]
    if item.kind == "text":
        content = {"type": "text", "text": fill(item.text, arguments)}
    elif item.kind == "resource":
        content = {"type": "resource", "resource": {
            "uri": fill(item.uri, arguments, quote=True), "mimeType": item.mime_type,
            "text": fill(item.text, arguments)}}
    else:
        content = {"type": "image", "data": base64.b64encode(item.data).decode(),
                   "mimeType": item.mime_type}
    return {"role": item.role, "content": content}


class PromptCatalogue:
    """The prompts one caller sees, in the manifest's order."""

    def __init__(self, prompts: Iterable[Prompt], signer: CursorSigner,
                 page_size: int = PAGE_SIZE) -> None:
        self.prompts = {p.name: p for p in prompts}
        self.signer = signer
        self.page_size = page_size

    def __bool__(self) -> bool:
        return bool(self.prompts)

    def listing(self, params: dict[str, Json]) -> dict[str, Json] | RpcError:
        names = list(self.prompts)
        start = 0
        cursor = params.get("cursor")
        if cursor is not None:
            after = self.signer.read(CURSOR_COLLECTION, cursor) if isinstance(cursor, str) else None
            if after is None or after not in self.prompts:
                return invalid("cursor: not a cursor this server gave for prompts/list (pass "
                               "back nextCursor exactly as it came)")
            start = names.index(after) + 1
        page = names[start:start + self.page_size]
        body: dict[str, Json] = {"prompts": [describe(self.prompts[n]) for n in page]}
        if start + self.page_size < len(names):
            body["nextCursor"] = self.signer.make(CURSOR_COLLECTION, page[-1])
        return body

    def get(self, params: dict[str, Json]) -> dict[str, Json] | RpcError:
        name = params.get("name")
        if not isinstance(name, str):
            return invalid("prompts/get needs the prompt's name (a string)")
        prompt = self.prompts.get(name)
        if prompt is None:
            return unknown_prompt(name)
        arguments = self.arguments(prompt, params.get("arguments"))
        if isinstance(arguments, RpcError):
            return arguments
        return {"description": prompt.description,
                "messages": [message(m, arguments) for m in prompt.messages]}

    @staticmethod
    def arguments(prompt: Prompt, given: Json) -> dict[str, str] | RpcError:
        """The arguments of a prompts/get: strings, each one the prompt
        takes, every required one given."""
        if given is None:
            given = {}
        if not isinstance(given, dict):
            return invalid("prompts/get arguments must be an object of strings")
        takes = {a.name for a in prompt.arguments}
        for key, value in given.items():
            if key not in takes:
                return invalid(f"argument {key[:80]!r} is not an argument of prompt "
                               f"{prompt.name!r} (it takes: {', '.join(sorted(takes)) or 'none'})",
                               argument=key[:80])
            if not isinstance(value, str) or len(value) > MAX_ARGUMENT:
                return invalid(f"argument {key!r} must be a string of at most {MAX_ARGUMENT} "
                               "characters", argument=key)
        missing = [a.name for a in prompt.arguments if a.required and a.name not in given]
        if missing:
            return invalid(f"missing required argument {missing[0]!r} of prompt "
                           f"{prompt.name!r}", argument=missing[0])
        return {key: value for key, value in given.items() if isinstance(value, str)}
