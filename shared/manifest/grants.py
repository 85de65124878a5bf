"""Grants in the manifest: each checked against the shape its capability
takes (DESIGN.md section 4), composites through their needs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from staal.inputs.types import show
from staal.manifest.catalogue import CATALOGUE, REQUIRED_IN_NEEDS, SECRET
from staal.manifest.model import Grant, SecretRef
from staal.manifest.values import Table, ValueReader, join
from staal.records.record import Json

MAX_USES = 1_000_000


class GrantReader:
    def __init__(self, values: ValueReader) -> None:
        self.v = values

    def grants(self, value: Json, path: str) -> Mapping[str, Grant] | None:
        v = self.v
        if not isinstance(value, dict):
            v.add(path, "expected an object of grants by parameter name")
            return None
        for key in getattr(value, "duplicates", ()):
            v.add(join(path, key), "appears more than once in this object")
        grants: dict[str, Grant] = {}
        ok = True
        for name, item in value.items():
            where = join(path, name)
            if not name.isidentifier():
                v.add(where, f"{show(name)} is not a parameter name (a Python identifier)")
                ok = False
                continue
            grant = self.grant(item, where)
            if grant is None:
                ok = False
            else:
                grants[name] = grant
        return MappingProxyType(grants) if ok else None

    def grant(self, value: Json, path: str, expected_cap: str | None = None) -> Grant | None:
        v = self.v
        if not isinstance(value, dict):
            v.add(path, "expected a grant object with a \"cap\"")
            return None
        cap = value.get("cap")
        if "cap" not in value:
            v.add(join(path, "cap"), "is required")
            return None
        if not isinstance(cap, str) or cap not in CATALOGUE:
            v.add(join(path, "cap"), f"{show(cap)} is not a capability "
                  f"(known: {', '.join(sorted(CATALOGUE))})")
            return None
        if expected_cap is not None and cap != expected_cap:
            v.add(join(path, "cap"), f"must be '{expected_cap}', not '{cap}'")
            return None
        spec = CATALOGUE[cap]
        for key in getattr(value, "duplicates", ()):
            v.add(join(path, key), "appears more than once in this object")
        for key in value:
            if key != "cap" and key not in spec.keys:
                v.add(join(path, key), f"not a key of a '{cap}' grant "
                      f"(it takes: {', '.join(spec.allowed_keys())})")
        for key in sorted(spec.required):
            if key not in value:
                v.add(join(path, key), f"is required in a '{cap}' grant")
        fields = self.fields(value, path, cap)
        if fields is None:
            return None
        return Grant(cap=cap, **fields)

    def fields(self, value: Table, path: str, cap: str) -> dict[str, Any] | None:
        v = self.v
        spec = CATALOGUE[cap]
        readers = {
            "uses": lambda x, p: v.whole(x, p, 1, MAX_USES),
            "each": v.positive_money,
            "max": v.positive_money,
            "only": self.only,
            "idempotency_key": v.boolean,
            "needs": lambda x, p: self.needs(x, p, cap),
            "base_url": v.url,
            "path": self.database,
            "dsn": v.secret,
            "library": self.library,
        }
        fields: dict[str, Any] = {}  # each key its reader's type
        for key in sorted(spec.keys & value.keys()):
            fields[key] = readers[key](value[key], join(path, key))
        known = [k for k in value if k == "cap" or k in spec.keys]
        if any(fields.get(k) is None for k in fields) or v.failed(value, path, *known):
            return None
        if not spec.required <= value.keys() or not value.keys() <= spec.keys | {"cap"}:
            return None
        if spec.money and not self.money_bounded(fields, path, cap):
            return None
        if "only" in fields:
            fields["only"] = tuple(fields["only"])
        return fields

    def money_bounded(self, fields: Mapping[str, Any], path: str, cap: str) -> bool:
        each, most = fields.get("each"), fields.get("max")
        if each is None and most is None:
            self.v.add(path, f"a '{cap}' grant needs a money limit: each, max or both")
            return False
        if each is not None and most is not None:
            if each.currency != most.currency:
                self.v.add(join(path, "max"), f"is in {most.currency}; each is in {each.currency}")
                return False
            if each > most:
                self.v.add(join(path, "each"), f"{each} is more than max ({most})")
                return False
        return True

    def only(self, value: Json, path: str) -> list[str] | None:
        items = self.v.list(value, path)
        if items is None:
            return None
        if not items:
            self.v.add(path, "must list at least one URL pattern (an empty list allows nothing)")
            return None
        ok = all(self.v.url_pattern(x, f"{path}[{i}]") is not None for i, x in enumerate(items))
        return items if ok else None

    def library(self, value: Json, path: str) -> str | None:
        text = self.v.string(value, path)
        if text is None:
            return None
        if "/" not in text:
            return text  # a library name for the loader to find, e.g. "libc.so.6"
        resolved = self.v.path(text, path)
        if resolved is None or not resolved.is_file():
            self.v.add(path, f"{resolved} does not exist")
            return None
        return str(resolved)

    def database(self, value: Json, path: str) -> Path | None:
        """A database file, which must exist: a grant never creates its
        database, and a missing one is found at start, not at the first call."""
        resolved = self.v.path(value, path)
        if resolved is not None and not resolved.is_file():
            self.v.add(path, f"no database file at {resolved} (a grant never creates its "
                             "database)")
            return None
        return resolved

    def needs(self, value: Json, path: str, cap: str) -> Mapping[str, Grant | SecretRef] | None:
        v = self.v
        spec = CATALOGUE[cap]
        obj = v.obj(value, path, tuple(spec.needs), required=tuple(spec.needs))
        if obj is None:
            return None
        needs: dict[str, Grant | SecretRef] = {}
        ok = True
        for name, need_cap in spec.needs.items():
            if name not in obj:
                ok = False
                continue
            where = join(path, name)
            need: Grant | SecretRef | None
            if need_cap == SECRET:
                need = v.secret(obj[name], where)
            else:
                need = self.grant(obj[name], where, expected_cap=need_cap)
                required = REQUIRED_IN_NEEDS.get((cap, name))
                if need is not None and required and not getattr(need, required):
                    v.add(join(where, required), f"must be true: a '{cap}' sends its "
                          f"'{name}' requests with idempotency keys")
                    need = None
            if need is None:
                ok = False
            else:
                needs[name] = need
        return MappingProxyType(needs) if ok and obj.keys() <= spec.needs.keys() else None
