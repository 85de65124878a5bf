"""The manifest's `prompts` section (issue 29), and what a caller profile
says of prompts (`callers[i].prompts`).

    "prompts": [{"name": "refund", "title": "Refund an order", "description": "...",
                 "arguments": [{"name": "order", "description": "...", "required": true,
                                "complete": {"collection": "orders"}}],
                 "messages": [{"role": "user", "text": "Refund order {order}."},
                              {"role": "user", "resource": {"uri": "staal://shop/orders/{order}",
                                                            "text": "..."}},
                              {"role": "user", "image": "chart.png"}]}]

A prompt is text the operator wrote: getting one runs nothing and reads no
secret. `{argument}` in a message is replaced by that argument's value
(`{{` and `}}` are literal braces); every placeholder must be an argument.
An embedded resource is one of the server's own (`staal://<server>/runs...`
or a declared collection's); an image is the operator's file, read here
once, a PNG, JPEG, GIF or WebP of at most 1 MiB.
"""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Literal

from staal.inputs.types import show
from staal.manifest.model import Caller
from staal.manifest.prompt_model import Prompt, PromptArgument, PromptMessage
from staal.manifest.values import ValueReader
from staal.records.record import Json

PROMPT = ("name", "title", "description", "arguments", "messages")
ARGUMENT = ("name", "description", "required", "complete")
COMPLETE = ("values", "collection")
MESSAGE = ("role", "text", "resource", "image")
CONTENTS = ("text", "resource", "image")
RESOURCE = ("uri", "text", "mime_type")
ROLES = ("user", "assistant")
MAX_IMAGE = 1 << 20
MAX_VALUES = 1000
_PROMPT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_ARGUMENT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
_MIME = re.compile(r"[a-z]+/[a-z0-9.+-]+")
# What an image's first bytes say it is.
IMAGE_MAGIC = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"),
               (b"GIF87a", "image/gif"), (b"GIF89a", "image/gif"))


def placeholders(template: str) -> list[str] | str:
    """The argument names `template` substitutes, or why it is no template."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        return f"is not a template ({exc}; write {{{{ and }}}} for literal braces)"
    names = []
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        if spec or conversion or not _ARGUMENT_NAME.fullmatch(field):
            return (f"{{{field}{'!' + conversion if conversion else ''}"
                    f"{':' + spec if spec else ''}}} is not a placeholder: write {{argument}}")
        names.append(field)
    return names


def image_mime(data: bytes) -> str | None:
    for magic, mime in IMAGE_MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


class PromptReader:
    """`server`: the server's name (None if it was refused); `collections`:
    the names of the declared collections."""

    def __init__(self, values: ValueReader, server: str | None,
                 collections: tuple[str, ...]) -> None:
        self.values = values
        self.server = server
        self.collections = collections

    def prompts(self, value: Json) -> tuple[Prompt, ...] | None:
        v = self.values
        items = v.list(value, "prompts")
        if items is None:
            return None
        found: list[Prompt] = []
        seen: dict[str, int] = {}
        for i, item in enumerate(items):
            prompt = self.prompt(item, f"prompts[{i}]")
            if prompt is None:
                continue
            if prompt.name in seen:
                v.add(f"prompts[{i}].name",
                      f"'{prompt.name}' is already the name of prompts[{seen[prompt.name]}]")
                continue
            seen[prompt.name] = i
            found.append(prompt)
        return tuple(found) if len(found) == len(items) else None

    def prompt(self, value: Json, path: str) -> Prompt | None:
        v = self.values
        obj = v.obj(value, path, PROMPT, required=("name", "description", "messages"))
        if obj is None:
            return None
        name = v.matching(obj.get("name"), f"{path}.name", _PROMPT_NAME,
                          "a prompt name (1 to 128 of A-Z a-z 0-9 _ - .)")
        title = v.optional(obj, "title", path, v.string)
        description = v.string(obj.get("description"), f"{path}.description")
        arguments = self.arguments(obj.get("arguments", []), f"{path}.arguments")
        known = None if arguments is None else {a.name for a in arguments}
        messages = self.messages(obj.get("messages"), f"{path}.messages", known)
        if (name is None or description is None or arguments is None or messages is None
                or v.failed(obj, path, "title")):
            return None
        return Prompt(name, description, arguments, messages, title)

    # -- arguments ------------------------------------------------------

    def arguments(self, value: Json, path: str) -> tuple[PromptArgument, ...] | None:
        v = self.values
        items = v.list(value, path)
        if items is None:
            return None
        found: list[PromptArgument] = []
        for i, item in enumerate(items):
            argument = self.argument(item, f"{path}[{i}]")
            if argument is not None and argument.name in [a.name for a in found]:
                v.add(f"{path}[{i}].name", f"'{argument.name}' is already an argument of this prompt")
            elif argument is not None:
                found.append(argument)
        return tuple(found) if len(found) == len(items) else None

    def argument(self, value: Json, path: str) -> PromptArgument | None:
        v = self.values
        obj = v.obj(value, path, ARGUMENT, required=("name",))
        if obj is None:
            return None
        name = v.matching(obj.get("name"), f"{path}.name", _ARGUMENT_NAME,
                          "an argument name (a letter or _, then up to 63 of A-Z a-z 0-9 _ -)")
        description = v.optional(obj, "description", path, v.string)
        required = v.optional(obj, "required", path, v.boolean)
        complete = v.optional(obj, "complete", path, self.complete)
        if name is None or v.failed(obj, path, "description", "required", "complete"):
            return None
        values, collection = complete or ((), None)
        return PromptArgument(name, description, bool(required), values, collection)

    def complete(self, value: Json, path: str) -> tuple[tuple[str, ...], str | None] | None:
        """`{"values": [...]}` or `{"collection": "<name>"}`: where an
        argument's completions come from."""
        v = self.values
        obj = v.obj(value, path, COMPLETE)
        if obj is None:
            return None
        if len(obj) != 1:
            v.add(path, "expected one of values (a list of strings) or collection (a "
                  "collection's name)")
            return None
        if "values" in obj:
            values = v.string_list(obj["values"], f"{path}.values", non_empty=True)
            if values is not None and len(values) > MAX_VALUES:
                v.add(f"{path}.values", f"lists {len(values)} values; at most {MAX_VALUES}")
                return None
            return None if values is None else (tuple(values), None)
        collection = v.string(obj.get("collection"), f"{path}.collection")
        if collection is not None and collection not in self.collections:
            known = ", ".join(self.collections) or "none is declared"
            v.add(f"{path}.collection", f"{show(collection)} is not a collection of this "
                  f"manifest's resources ({known})")
            return None
        return None if collection is None else ((), collection)

    # -- messages -------------------------------------------------------

    def messages(self, value: Json, path: str,
                 known: set[str] | None) -> tuple[PromptMessage, ...] | None:
        v = self.values
        items = v.list(value, path)
        if items is None:
            return None
        if not items:
            v.add(path, "a prompt has at least one message")
            return None
        found = [m for i, item in enumerate(items)
                 if (m := self.message(item, f"{path}[{i}]", known)) is not None]
        return tuple(found) if len(found) == len(items) else None

    def message(self, value: Json, path: str, known: set[str] | None) -> PromptMessage | None:
        v = self.values
        obj = v.obj(value, path, MESSAGE, required=("role",))
        if obj is None:
            return None
        role = obj.get("role")
        if "role" in obj and role not in ROLES:
            v.add(f"{path}.role", f"{show(role)} is not a role (user or assistant)")
        kinds = [k for k in CONTENTS if k in obj]
        if len(kinds) != 1:
            v.add(path, "expected one of text, resource or image")
            return None
        kind = kinds[0]
        where = f"{path}.{kind}"
        if kind == "text":
            text = self.template(obj["text"], where, known)
            message = None if text is None else PromptMessage(_role(role), "text", text=text)
        elif kind == "resource":
            message = self.resource(obj["resource"], where, known, _role(role))
        else:
            message = self.image(obj["image"], where, _role(role))
        return message if role in ROLES else None

    def template(self, value: Json, path: str, known: set[str] | None) -> str | None:
        v = self.values
        text = v.string(value, path)
        if text is None:
            return None
        names = placeholders(text)
        if isinstance(names, str):
            v.add(path, names)
            return None
        unknown = sorted(set(names) - known) if known is not None else []
        if unknown:
            v.add(path, f"{{{unknown[0]}}} is not an argument of this prompt "
                  f"(its arguments: {', '.join(sorted(known or ())) or 'none'})")
            return None
        return text

    def resource(self, value: Json, path: str, known: set[str] | None,
                 role: Literal["user", "assistant"]) -> PromptMessage | None:
        v = self.values
        obj = v.obj(value, path, RESOURCE, required=("uri", "text"))
        if obj is None:
            return None
        uri = self.template(obj.get("uri"), f"{path}.uri", known)
        if uri is not None and not self.own_uri(uri):
            v.add(f"{path}.uri", f"{show(uri[:200])} is not one of this server's resources "
                  f"(staal://{self.server or '<server.name>'}/runs or a collection: "
                  f"{', '.join(self.collections) or 'none is declared'})")
            uri = None
        text = self.template(obj.get("text"), f"{path}.text", known)
        mime = obj.get("mime_type", "text/plain")
        if not isinstance(mime, str) or not _MIME.fullmatch(mime) or not mime.startswith("text/"):
            v.add(f"{path}.mime_type", f"{show(mime)} is not a text MIME type (text/...)")
            return None
        if uri is None or text is None:
            return None
        return PromptMessage(role, "resource", text=text, uri=uri, mime_type=mime)

    def own_uri(self, uri: str) -> bool:
        if self.server is None:
            return True  # server.name was refused, and said so
        base = f"staal://{self.server}/"
        head = re.split(r"[/?{]", uri[len(base):], maxsplit=1)[0]
        rest = uri[len(base) + len(head):]
        return (uri.startswith(base) and head in ("runs", *self.collections)
                and (not rest or rest[0] in "/?"))

    def image(self, value: Json, path: str, role: Literal["user", "assistant"]) -> PromptMessage | None:
        file = self.values.path(value, path)
        if file is None:
            return None
        data = self.read_image(file, path)
        mime = None if data is None else image_mime(data)
        if data is not None and mime is None:
            self.values.add(path, f"{file} is not a PNG, JPEG, GIF or WebP image")
        if data is None or mime is None:
            return None
        return PromptMessage(role, "image", mime_type=mime, data=data)

    def read_image(self, file: Path, path: str) -> bytes | None:
        try:
            size = file.stat().st_size
            if size > MAX_IMAGE:
                self.values.add(path, f"{file} is {size} bytes; an image is at most {MAX_IMAGE}")
                return None
            return file.read_bytes()
        except OSError as exc:
            self.values.add(path, f"{file} cannot be read: {exc.strerror or exc}")
            return None

    # -- caller profiles ------------------------------------------------

    def caller_prompts(self, callers: tuple[Caller, ...] | None, raw: Json,
                       prompts: tuple[Prompt, ...] | None) -> tuple[Caller, ...] | None:
        """The profiles with the prompts each sees (`callers[i].prompts`,
        shaped as its `tools`: an object naming them, each `{}`)."""
        if callers is None or not isinstance(raw, list):
            return callers
        names = None if prompts is None else {p.name for p in prompts}
        read: list[Caller] = []
        for i, (caller, item) in enumerate(zip(callers, raw, strict=True)):
            if not isinstance(item, dict) or "prompts" not in item:
                read.append(caller)
                continue
            seen = self.profile_prompts(item["prompts"], f"callers[{i}].prompts", names)
            if seen is None:
                return None
            read.append(Caller(caller.name, caller.when, caller.tools, caller.rate, seen))
        return tuple(read)

    def profile_prompts(self, value: Json, path: str, names: set[str] | None) -> frozenset[str] | None:
        v = self.values
        if not isinstance(value, dict):
            v.add(path, "expected an object naming the prompts this caller sees")
            return None
        ok = True
        for name, item in value.items():
            if names is not None and name not in names:
                v.add(f"{path}.{name}", f"'{name}' is not a prompt of this manifest")
                ok = False
            elif v.obj(item, f"{path}.{name}", ()) is None or item:
                ok = False
        return frozenset(value) if ok else None


def _role(role: Json) -> Literal["user", "assistant"]:
    return "assistant" if role == "assistant" else "user"
