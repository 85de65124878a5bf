"""The manifest's `resources` section and the server name resources need
(issue 16; seed 002's schema rules).

    "resources": [{"name": "orders", "description": "...", "program": "orders.py",
                   "get": "get_order", "list": "list_orders",
                   "grants": {...}, "net": {...}, "max_page_size": 100}]

Each collection is served by a program with read grants only: its `get` and
`list` entries run as runs of two tools the server keeps to itself
(`@orders.get`, `@orders.list`: no tool's name can start with `@`, and
neither is ever listed or callable), so a read is checked, confined,
journaled and counted exactly as a tool call is.

`server.name` is the host of every resource URI (`staal://<name>/...`), so
it must be a DNS label; staal always serves the caller's runs as
resources, so the rule always applies.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from staal.manifest.grants import GrantReader
from staal.manifest.model import Grant, NetConfig, ResourceDecl, Tool
from staal.manifest.values import ValueReader
from staal.records.record import Json

RESOURCE = ("name", "description", "program", "get", "list", "grants", "net", "max_page_size",
            "complete")
RESOURCE_REQUIRED = ("name", "description", "program", "get", "list", "net")
MAX_PAGE_SIZE = 200
RESERVED_SEGMENTS = ("runs",)
HIDDEN_PREFIX = "@"
_LABEL = re.compile(r"[a-z0-9-]{1,63}")
# The two things a collection's program does, and the inputs each takes.
ENTRY_INPUTS = {"get": ("id",), "list": ("after", "limit")}


class ToolReader(Protocol):
    """What reading a collection needs of the manifest's checker: the parts
    a tool is read with (manifest/check.py's ManifestChecker is one)."""

    values: ValueReader
    grants: GrantReader

    def program(self, value: Json, path: str) -> Path | None: ...

    def net(self, value: Json, path: str) -> NetConfig | None: ...


def hidden_tool_name(segment: str, entry: str) -> str:
    return f"{HIDDEN_PREFIX}{segment}.{entry}"


def is_hidden_tool(name: str) -> bool:
    """A tool the server keeps to itself: never listed, never callable."""
    return name.startswith(HIDDEN_PREFIX)


def dns_label_problem(name: str) -> str | None:
    """Why `name` is not a DNS label by seed 002's rules, or None."""
    if not _LABEL.fullmatch(name):
        return "is not a DNS label: 1 to 63 of lowercase letters, digits and -"
    if name.startswith("-") or name.endswith("-"):
        return "is not a DNS label: it may not start or end with -"
    if name[2:4] == "--":
        return "is not a DNS label: -- as its 3rd and 4th characters is IDNA's reserved form"
    if not any(c.isalpha() for c in name):
        return "is not a DNS label: it needs at least one letter"
    return None


def check_server_name(checker: ToolReader, name: Json) -> None:
    if isinstance(name, str) and (problem := dns_label_problem(name)) is not None:
        checker.values.add("server.name", f"{name[:80]!r} {problem} (it is the host of every "
                           "resource URI, staal://<name>/...)")


def check_resources(checker: ToolReader, value: Json) -> tuple[ResourceDecl, ...] | None:
    """Every collection in `resources`, or None after adding each problem."""
    v = checker.values
    items = v.list(value, "resources")
    if items is None:
        return None
    found: list[ResourceDecl] = []
    ok = True
    for i, item in enumerate(items):
        decl = _resource(checker, item, f"resources[{i}]")
        if decl is None:
            ok = False
        elif decl.name in [d.name for d in found]:
            v.add(f"resources[{i}].name", f"'{decl.name}' is already the name of a collection")
            ok = False
        else:
            found.append(decl)
    return tuple(found) if ok else None


def _resource(checker: ToolReader, value: Json, path: str) -> ResourceDecl | None:
    v = checker.values
    obj = v.obj(value, path, RESOURCE, required=RESOURCE_REQUIRED)
    if obj is None:
        return None
    name = _segment(checker, obj.get("name"), f"{path}.name")
    description = v.string(obj.get("description"), f"{path}.description")
    program = checker.program(obj.get("program"), f"{path}.program")
    entries = {kind: v.identifier(obj.get(kind), f"{path}.{kind}") for kind in ENTRY_INPUTS}
    grants = checker.grants.grants(obj.get("grants", {}), f"{path}.grants")
    net = checker.net(obj.get("net"), f"{path}.net")
    size = v.whole(obj.get("max_page_size", MAX_PAGE_SIZE), f"{path}.max_page_size", 1,
                   MAX_PAGE_SIZE)
    ids = v.optional(obj, "complete", path, lambda x, p: _listed_ids(x, p, v))
    if grants is not None and not _reads_only(checker, grants, f"{path}.grants"):
        return None
    read = {kind: entry for kind, entry in entries.items() if entry is not None}
    if (name is None or description is None or program is None or grants is None or net is None
            or size is None or len(read) < len(entries) or v.failed(obj, path, "complete")):
        return None
    tools = {kind: Tool(name=hidden_tool_name(name, kind), description=description,
                        program=program, entry=entry, grants=grants, net=net)
             for kind, entry in read.items()}
    return ResourceDecl(name, description, size, tools["get"], tools["list"], tuple(ids or ()))


def _listed_ids(value: Json, path: str, v: ValueReader) -> list[str] | None:
    """`complete: {"values": [...]}`: the ids a completion of `{id}` offers."""
    obj = v.obj(value, path, ("values",), required=("values",))
    return None if obj is None else v.string_list(obj.get("values"), f"{path}.values", True)


def _segment(checker: ToolReader, value: Json, path: str) -> str | None:
    name = checker.values.string(value, path)
    if name is None:
        return None
    problem = dns_label_problem(name)
    if problem is not None:
        checker.values.add(path, f"{name[:80]!r} {problem} (it is a resource URI's first "
                           "path segment)")
        return None
    if name in RESERVED_SEGMENTS:
        checker.values.add(path, f"'{name}' is staal's own collection (staal://<server>/{name})")
        return None
    return name


def _reads_only(checker: ToolReader, grants: Mapping[str, Grant], path: str) -> bool:
    """A collection is read-only records: a grant that can write, or move
    money, could change the world on a read, and is refused."""
    ok = True
    for key, grant in grants.items():
        for inner in grant.walk():
            if inner.spec.writes or inner.spec.money:
                what = "moves money" if inner.spec.money else "writes"
                checker.values.add(f"{path}.{key}", f"'{inner.cap}' {what}: a resource's "
                                   "program may hold read capabilities only")
                ok = False
                break
    return ok
