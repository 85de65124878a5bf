"""The manifest's `auth` and `callers` sections (issue 14), and a tool's
alternative grant sets (`tools[i].profiles`), checked with every problem
named by its key path, as the rest of the manifest is (manifest_check.py)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TypeGuard, get_args
from urllib.parse import urlsplit

from staal.inputs.types import show
from staal.manifest.addresses import same_url
from staal.manifest.grants import GrantReader
from staal.manifest.model import (
    DEFAULT_ALGORITHMS,
    DEFAULT_VERIFY_TIMEOUT_MS,
    RUN_STATUS_TOOL,
    AuthConfig,
    Caller,
    CallerTool,
    CredentialConfig,
    Grant,
    HttpConfig,
    QuotaConfig,
    RateConfig,
    ServerConfig,
    Tool,
    WhenKey,
)
from staal.manifest.values import ValueReader
from staal.records.record import Json

AUTH = ("issuer", "audience", "jwks_url", "algorithms", "required_scopes", "credential")
CREDENTIAL = ("presence", "program", "entry", "headers", "timeout_ms")
PRESENCES = ("bearer", "provider")
# Only a provider's verifier has a program, an entry and headers to read.
PROVIDER_ONLY = ("program", "entry", "headers", "timeout_ms")
# A bearer token's own keys: a provider's verifier checks its credential itself.
BEARER_ONLY = ("issuer", "audience", "jwks_url", "algorithms")
MAX_VERIFY_TIMEOUT_MS = 60_000
CALLER = ("name", "when", "tools", "rate", "prompts")  # prompts: manifest/prompts.py
CALLER_TOOL = ("grants", "quota")
RATE = ("calls", "window")
WHEN = get_args(WhenKey)

# Asymmetric algorithms only: a token is checked with the issuer's public
# keys. "none" and the HMAC family (a shared secret) are never accepted.
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512",
              "EdDSA")
# RFC 9110 section 5.6.2: a header name is a token.
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# Headers the transport itself reads (protocol/http/endpoint.py): named a credential,
# one would be taken from the endpoint before it could judge the request.
TRANSPORT_HEADERS = frozenset({
    "host", "origin", "accept", "content-type", "content-length", "transfer-encoding",
    "connection", "mcp-protocol-version", "mcp-method", "mcp-name", "mcp-session-id",
})
_PROFILE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


ProgramReader = Callable[[Json, str], "Path | None"]
# Reads a quota object at a path, given the grants its money may name.
QuotaReader = Callable[[Json, str, "Mapping[str, Grant] | None"], "QuotaConfig | None"]


def _is_when_key(key: str) -> TypeGuard[WhenKey]:
    return key in WHEN


class AuthChecker:
    def __init__(self, values: ValueReader, grants: GrantReader, program: ProgramReader) -> None:
        self.values = values
        self.grants = grants
        self.program = program  # the tools' own check of a program file (a verifier's)

    # -- auth -----------------------------------------------------------

    def auth(self, value: Json, server: ServerConfig | None) -> AuthConfig | None:
        v = self.values
        obj = v.obj(value, "auth", AUTH)
        if obj is None:
            return None
        if isinstance(obj.get("credential"), dict) and obj["credential"].get("presence") == "provider":
            for key in BEARER_ONLY:
                if key in obj:
                    v.add(f"auth.{key}", "is only read with a bearer token: a provider's verifier "
                          "checks the credential itself (and names the issuer in its answer)")
            credential = self.credential(obj["credential"])
            scopes = v.string_list(obj.get("required_scopes", []), "auth.required_scopes")
            if any(k in obj for k in BEARER_ONLY) or credential is None or scopes is None:
                return None
            return AuthConfig(required_scopes=tuple(scopes), credential=credential)
        credential = self.credential(obj.get("credential", {"presence": "bearer"}))
        scopes = v.string_list(obj.get("required_scopes", []), "auth.required_scopes")
        if "issuer" not in obj:
            v.add("auth.issuer", "is required")
        issuer = self.issuer(obj["issuer"], "auth.issuer") if "issuer" in obj else None
        audience = v.optional(obj, "audience", "auth", self.exact_url)
        if audience is not None and server is not None and not self.names_the_endpoint(
                audience, server.http):
            audience = None
        if "audience" not in obj and server is not None:
            # The URL clients use; None: the URL `serve --http` listens at (auth.py).
            audience = server.http.public_url
        jwks = v.optional(obj, "jwks_url", "auth", v.url)
        algorithms = self.algorithms(obj.get("algorithms", list(DEFAULT_ALGORITHMS)))
        if (issuer is None or algorithms is None or scopes is None or credential is None
                or v.failed(obj, "auth", "audience", "jwks_url")):
            return None
        return AuthConfig(issuer=issuer, audience=audience, jwks_url=jwks,
                          algorithms=tuple(algorithms), required_scopes=tuple(scopes),
                          credential=credential)

    def names_the_endpoint(self, audience: str, http: HttpConfig) -> bool:
        """Whether `auth.audience` can be the URL clients use (RFC 8707, RFC
        9728 section 3.3: the metadata's `resource`, and so a token's `aud`):
        `server.http.public_url` when it is set; without it, a URL `serve
        --http` may listen at (plain http, the endpoint's path; its host and
        port are known only when it listens)."""
        public = http.public_url
        if public is not None:
            if same_url(audience, public):
                return True
            why = (f"is not server.http.public_url ({show(public)}), the URL clients use: "
                   "a token's audience is the resource the server's metadata names, which is "
                   "the URL clients reach it at; leave auth.audience out (it is then "
                   "server.http.public_url) or make the two the same")
        elif (urlsplit(audience).scheme != "http"
              or urlsplit(audience).path.rstrip("/") != http.path.rstrip("/")):
            why = (f"cannot be the URL clients use: server.http.public_url is not set, so "
                   f"that is the URL `serve --http` listens at, http://HOST:PORT{http.path} "
                   "(staal serves plain HTTP; behind a proxy set server.http.public_url to "
                   "the URL clients use, and leave auth.audience out or make it the same)")
        else:
            return True
        self.values.add("auth.audience", f"{show(audience)} {why}")
        return False

    def issuer(self, value: Json, path: str) -> str | None:
        """The issuer exactly as tokens name it in `iss` (a trailing slash
        kept): an https URL, or http on a loopback host."""
        text = self.exact_url(value, path)
        if text is None:
            return None
        parts = urlsplit(text)
        if parts.scheme != "https" and parts.hostname not in ("localhost", "127.0.0.1", "::1"):
            self.values.add(path, f"{show(text)}: an issuer is an https URL (http only on a "
                            "loopback host)")
            return None
        return text

    def exact_url(self, value: Json, path: str) -> str | None:
        text = self.values.string(value, path)
        if text is None:
            return None
        parts = self.values.split_url(text, path)
        if parts is None:
            return None
        if (parts.scheme not in ("http", "https") or not parts.hostname or parts.query
                or parts.fragment or parts.username or parts.password):
            self.values.add(path, f"{show(text)} is not an http or https URL with a host "
                            "(and no query, fragment or credentials)")
            return None
        return text

    def algorithms(self, value: Json) -> list[str] | None:
        v = self.values
        names = v.string_list(value, "auth.algorithms", non_empty=True)
        if names is None:
            return None
        ok = True
        for i, name in enumerate(names):
            if name in ALGORITHMS:
                continue
            ok = False
            if name.lower() == "none":
                why = "an unsigned token is never accepted"
            elif name.upper().startswith("HS"):
                why = ("an HMAC algorithm (a shared secret): tokens are checked with the "
                       "issuer's public keys")
            else:
                why = f"not a signature algorithm staal checks (known: {', '.join(ALGORITHMS)})"
            v.add(f"auth.algorithms[{i}]", f"{show(name)}: {why}")
        return names if ok else None

    def credential(self, value: Json) -> CredentialConfig | None:
        """`auth.credential`: `{"presence": "bearer"}`, the default, or
        `{"presence": "provider", "program", "entry", "headers", "timeout_ms"}`."""
        v = self.values
        path = "auth.credential"
        obj = v.obj(value, path, CREDENTIAL, required=("presence",))
        if obj is None:
            return None
        presence = obj.get("presence")
        if presence not in PRESENCES:
            v.add(f"{path}.presence", f"expected \"bearer\" or \"provider\", not {show(presence)}")
            return None
        if presence == "bearer":
            for key in PROVIDER_ONLY:
                if key in obj:
                    v.add(f"{path}.{key}", "belongs to presence \"provider\"; a bearer token "
                          "needs nothing more")
            return None if any(k in obj for k in PROVIDER_ONLY) else CredentialConfig()
        for key in ("program", "headers"):
            if key not in obj:
                v.add(f"{path}.{key}", "is required with presence \"provider\"")
        program = self.program(obj["program"], f"{path}.program") if "program" in obj else None
        entry = v.identifier(obj.get("entry", "verify"), f"{path}.entry")
        headers = self.headers(obj["headers"], f"{path}.headers") if "headers" in obj else None
        timeout = v.whole(obj.get("timeout_ms", DEFAULT_VERIFY_TIMEOUT_MS), f"{path}.timeout_ms",
                          1, MAX_VERIFY_TIMEOUT_MS)
        if program is None or entry is None or headers is None or timeout is None:
            return None
        return CredentialConfig(presence="provider", program=program, entry=entry,
                                headers=headers, timeout_ms=timeout)

    def headers(self, value: Json, path: str) -> tuple[str, ...] | None:
        """A provider's credential headers, at least one, each a header name
        once (in any case; kept in lower case), none the transport's own."""
        v = self.values
        names = v.string_list(value, path, non_empty=True)
        if names is None:
            return None
        ok = True
        lowered: list[str] = []
        for i, name in enumerate(names):
            where, low = f"{path}[{i}]", name.lower()
            if not _HEADER_NAME.fullmatch(name):
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

    # -- a tool's alternative grant sets ------------------------------------

    def profiles(self, value: Json, path: str,
                 grants: Mapping[str, Grant] | None) -> Mapping[str, Mapping[str, Grant]] | None:
        """`tools[i].profiles`: named grant sets, each with the same
        parameters and capabilities as the tool's `grants` (the program is
        written against those), only their limits differing."""
        v = self.values
        if not isinstance(value, dict) or not value:
            v.add(path, "expected an object naming at least one grant set")
            return None
        sets: dict[str, Mapping[str, Grant]] = {}
        ok = True
        for name, item in value.items():
            where = f"{path}.{name}"
            if not _PROFILE_NAME.fullmatch(name):
                v.add(where, f"{show(name)} is not a grant set name (1 to 64 of A-Z a-z 0-9 _ - .)")
                ok = False
                continue
            read = self.grants.grants(item, where)
            if read is None:
                ok = False
                continue
            if grants is not None and not self.same_shape(read, grants, where):
                ok = False
                continue
            sets[name] = MappingProxyType(read)
        return MappingProxyType(sets) if ok else None

    def same_shape(self, read: Mapping[str, Grant], grants: Mapping[str, Grant], path: str) -> bool:
        mine = {name: g.cap for name, g in read.items()}
        theirs = {name: g.cap for name, g in grants.items()}
        if mine == theirs:
            return True
        shape = ", ".join(f"{k}: {c}" for k, c in sorted(theirs.items())) or "none"
        self.values.add(path, "a grant set names the same parameters and capabilities as the "
                        f"tool's grants ({shape})")
        return False

    # -- callers --------------------------------------------------------

    def callers(self, value: Json, tools: list[Tool] | None, quota: QuotaReader) -> tuple[Caller, ...] | None:
        """`callers`: a list of profiles. `quota(value, path, grants)` reads
        a quota as a tool's is read."""
        v = self.values
        items = v.list(value, "callers")
        if items is None:
            return None
        if not items:
            v.add("callers", "lists at least one caller profile (or leave it out: every "
                  "authenticated caller may then call every tool)")
            return None
        by_name = {t.name: t for t in tools} if tools is not None else None
        callers: list[Caller] = []
        seen: set[str] = set()
        for i, item in enumerate(items):
            caller = self.caller(item, f"callers[{i}]", by_name, quota)
            if caller is None:
                continue
            if caller.name in seen:
                v.add(f"callers[{i}].name", f"'{caller.name}' is already a caller profile's name")
                continue
            seen.add(caller.name)
            callers.append(caller)
        return tuple(callers) if len(callers) == len(items) else None

    def caller(self, value: Json, path: str, tools: dict[str, Tool] | None,
               quota: QuotaReader) -> Caller | None:
        v = self.values
        obj = v.obj(value, path, CALLER, required=("name", "when", "tools"))
        if obj is None:
            return None
        name = v.string(obj.get("name"), f"{path}.name")
        if name is not None and not _PROFILE_NAME.fullmatch(name):
            v.add(f"{path}.name", f"{show(name)} is not a profile name (1 to 64 of A-Z a-z 0-9 _ - .)")
            name = None
        when = self.when(obj.get("when"), f"{path}.when")
        allowed = self.caller_tools(obj.get("tools"), f"{path}.tools", tools, quota)
        rate = v.optional(obj, "rate", path, self.rate)
        if name is None or when is None or allowed is None or v.failed(obj, path, "rate"):
            return None
        return Caller(name=name, when=when, tools=allowed, rate=rate)

    def when(self, value: Json, path: str) -> tuple[WhenKey, str] | None:
        v = self.values
        if not isinstance(value, dict) or len(value) != 1:
            v.add(path, "expected an object with one key: scope, client_id or sub")
            return None
        obj = v.obj(value, path, WHEN)
        if obj is None:
            return None
        ((key, wanted),) = obj.items()
        if not _is_when_key(key):
            return None
        text = v.string(wanted, f"{path}.{key}")
        if text is None:
            return None
        if key == "scope" and (not text or " " in text):
            v.add(f"{path}.scope", f"{show(text)} is not one scope (no spaces)")
            return None
        return key, text

    def caller_tools(self, value: Json, path: str, tools: dict[str, Tool] | None,
                     quota: QuotaReader) -> Mapping[str, CallerTool] | None:
        v = self.values
        if not isinstance(value, dict):
            v.add(path, "expected an object naming the tools this caller may call")
            return None
        allowed: dict[str, CallerTool] = {}
        ok = True
        for name, item in value.items():
            where = f"{path}.{name}"
            if name == RUN_STATUS_TOOL:
                v.add(where, f"'{RUN_STATUS_TOOL}' is every caller's (for its own runs)")
                ok = False
                continue
            tool = tools.get(name) if tools is not None else None
            if tools is not None and tool is None:
                v.add(where, f"'{name}' is not a tool of this manifest")
                ok = False
                continue
            entry = self.caller_tool(item, where, tool, quota)
            if entry is None:
                ok = False
                continue
            allowed[name] = entry
        return MappingProxyType(allowed) if ok else None

    def caller_tool(self, value: Json, path: str, tool: Tool | None, quota: QuotaReader) -> CallerTool | None:
        v = self.values
        obj = v.obj(value, path, CALLER_TOOL)
        if obj is None:
            return None
        grants = v.optional(obj, "grants", path, v.string)
        if grants is not None and tool is not None and grants not in tool.profiles:
            known = ", ".join(sorted(tool.profiles)) or "none"
            v.add(f"{path}.grants", f"{show(grants)} is not one of tool '{tool.name}''s grant sets "
                  f"(its profiles: {known})")
            return None
        grant_set = None if tool is None else tool.grant_set(grants)
        limit: QuotaConfig | None = v.optional(obj, "quota", path,
                                               lambda x, p: quota(x, p, grant_set))
        if v.failed(obj, path, "grants", "quota"):
            return None
        return CallerTool(grants=grants, quota=limit)

    def rate(self, value: Json, path: str) -> RateConfig | None:
        v = self.values
        obj = v.obj(value, path, RATE, required=RATE)
        if obj is None:
            return None
        calls = v.whole(obj.get("calls"), f"{path}.calls", 1, 10**9) if "calls" in obj else None
        window = v.duration(obj.get("window"), f"{path}.window") if "window" in obj else None
        if calls is None or window is None:
            return None
        return RateConfig(calls=calls, window=window)
