"""The manifest's `auth` section, checked as the rest is (every problem at
once, each naming its key path; `staal.manifest_check` calls it).

This module holds `auth.credential` (issue 14, item 3; seed 002, "A
provider that does not use bearer tokens"): `{"presence": "bearer"}`, the
default, or `{"presence": "provider", "program", "entry", "headers",
"timeout_ms"}`. The bearer token's own keys (issuer, audience, JWKS) are
read beside it, by `AuthReader.auth`'s caller.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from staal.manifest import DEFAULT_VERIFY_TIMEOUT_MS, AuthConfig, CredentialConfig
from staal.manifest_values import ValueReader, show

AUTH = ("credential",)
CREDENTIAL = ("presence", "program", "entry", "headers", "timeout_ms")
PRESENCES = ("bearer", "provider")
# Only a provider's verifier has a program, an entry and headers to read.
PROVIDER_ONLY = ("program", "entry", "headers", "timeout_ms")
MAX_VERIFY_TIMEOUT_MS = 60_000
# RFC 9110 section 5.6.2: a header name is a token.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# Headers the transport itself reads (protocol/http.py): named a credential,
# one would be taken from the endpoint before it could judge the request.
TRANSPORT_HEADERS = frozenset({
    "host", "origin", "accept", "content-type", "content-length", "transfer-encoding",
    "connection", "mcp-protocol-version", "mcp-method", "mcp-name", "mcp-session-id",
})

ProgramReader = Callable[[Any, str], "Path | None"]


class AuthReader:
    def __init__(self, values: ValueReader, program: ProgramReader) -> None:
        self.values = values
        self.program = program  # the tools' own check of a program file

    def auth(self, value: Any, keys: tuple[str, ...] = AUTH) -> AuthConfig | None:
        obj = self.values.obj(value, "auth", keys)
        if obj is None:
            return None
        credential = self.credential(obj.get("credential", {"presence": "bearer"}), "auth.credential")
        if credential is None:
            return None
        return AuthConfig(credential=credential)

    def credential(self, value: Any, path: str) -> CredentialConfig | None:
        v = self.values
        obj = v.obj(value, path, CREDENTIAL)
        if obj is None:
            return None
        presence = obj.get("presence", "bearer")
        if presence not in PRESENCES:
            v.add(f"{path}.presence", f"{show(presence)} is not a credential presence "
                  f"(known: {', '.join(PRESENCES)})")
            return None
        if presence == "bearer":
            for key in PROVIDER_ONLY:
                if key in obj:
                    v.add(f"{path}.{key}", "is only read with presence \"provider\"")
            return None if any(k in obj for k in PROVIDER_ONLY) else CredentialConfig()
        return self.provider(obj, path)

    def provider(self, obj: dict, path: str) -> CredentialConfig | None:
        v = self.values
        for key in ("program", "headers"):
            if key not in obj:
                v.add(f"{path}.{key}", "is required with presence \"provider\"")
        program = self.program(obj["program"], f"{path}.program") if "program" in obj else None
        entry = v.identifier(obj.get("entry", "verify"), f"{path}.entry")
        headers = self.headers(obj["headers"], f"{path}.headers") if "headers" in obj else None
        timeout = v.whole(obj.get("timeout_ms", DEFAULT_VERIFY_TIMEOUT_MS), f"{path}.timeout_ms",
                          1, MAX_VERIFY_TIMEOUT_MS)
        if None in (program, entry, headers, timeout):
            return None
        return CredentialConfig(presence="provider", program=program, entry=entry,
                                headers=headers, timeout_ms=timeout)

    def headers(self, value: Any, path: str) -> tuple[str, ...] | None:
        """The credential headers, at least one, each a header name once (in
        any case; kept in lower case), none the transport's own."""
        v = self.values
        names = v.string_list(value, path, non_empty=True)
        if names is None:
            return None
        ok = True
        lowered: list[str] = []
        for i, name in enumerate(names):
            where, low = f"{path}[{i}]", name.lower()
            if not _TOKEN.fullmatch(name):
                v.add(where, f"{show(name)} is not a header name")
            elif low in lowered:
                v.add(where, f"{show(name)} is named twice")
            elif low in TRANSPORT_HEADERS:
                v.add(where, f"{show(name)} is read by the transport itself and cannot carry "
                      "a credential")
            else:
                lowered.append(low)
                continue
            ok = False
        return tuple(lowered) if ok else None
