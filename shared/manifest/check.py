"""Every rule of the manifest, checked at load, every problem reported at once.

Each problem names its key path and what was expected, e.g.
`tools[0].grants.pay.each.amount: "5O.00" is not a decimal amount`.
Nothing here reads a secret's value or runs a program: it only reads the
manifest and looks at the files it names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import NoReturn, cast

from staal.errors import ManifestError
from staal.inputs.types import show
from staal.manifest.auth import AuthChecker
from staal.manifest.grants import GrantReader
from staal.manifest.model import (
    DEFAULT_MAX_STEPS,
    MIN_MEMORY_MIB,
    NO_TASK,
    RUN_STATUS_TOOL,
    RUNS_PER_WORKER_RANGE,
    TASK_SUPPORT,
    Grant,
    Manifest,
    ModelConfig,
    NetConfig,
    OnceConfig,
    QuotaConfig,
    ServerConfig,
    TaskSupport,
    Tool,
)
from staal.manifest.prompts import PromptReader
from staal.manifest.resources import check_resources, check_server_name
from staal.manifest.server import ServerReader
from staal.manifest.sizes import machine_mib
from staal.manifest.values import Table, ValueReader
from staal.records.record import Json

_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")

TOP = ("server", "model", "tools", "resources", "auth", "callers", "prompts")
MODEL = ("provider", "model", "api_key", "timeout_ms", "retries", "base_url")
TOOL = (
    "name", "title", "description", "program", "entry", "grants", "net", "deadline",
    "max_concurrent_runs", "runs_per_worker", "once", "quota", "max_steps", "max_memory",
    "max_wait", "max_cpu", "profiles", "task",
)
NET = ("timeout_ms", "connect_timeout_ms")
ONCE = ("by", "keep")
QUOTA = ("window", "calls", "money")
PROVIDERS = ("anthropic",)
HOUR_MS = 3_600_000


class _Pairs(dict[str, Json]):
    """A JSON object that remembers keys written more than once."""

    duplicates: list[str]


def _object_with_duplicates(pairs: list[tuple[str, Json]]) -> _Pairs:
    obj = _Pairs()
    obj.duplicates = []
    for key, value in pairs:
        if key in obj:
            obj.duplicates.append(key)
        obj[key] = value
    return obj


def plain(value: Json) -> Json:
    """A document read by `read_json` with every object a plain dict again:
    inputs taken from a file are JSON like any call's arguments."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def read_json(path: Path, what: str = "manifest") -> Json:
    """The JSON document in the file at `path` (resolved: every problem
    names the file as it really is), a manifest or a run config."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError(str(path), [f"the {what} file does not exist"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(str(path), [f"cannot be read: {exc}"]) from exc
    try:
        return json.loads(
            text, object_pairs_hook=_object_with_duplicates, parse_constant=_refuse_constant
        )
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise ManifestError(str(path), [f"not valid JSON at {where}: {exc.msg}"]) from exc
    except ValueError as exc:
        raise ManifestError(str(path), [f"not valid JSON: {exc}"]) from exc


def load_manifest(path: str | Path) -> Manifest:
    """The manifest at `path`, or a ManifestError naming every problem."""
    return load(Path(path))


def load(path: Path) -> Manifest:
    path = path.resolve()
    return check(read_json(path), path)


def check(data: Json, path: Path) -> Manifest:
    """The manifest `data` (read from `path`), or every problem in it."""
    checker = ManifestChecker(path)
    manifest = checker.manifest(data)
    if checker.values.problems or manifest is None:
        raise ManifestError(str(path), checker.values.problems or ["no manifest"])
    return manifest


class ManifestChecker:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.values = ValueReader(base_dir=path.parent)
        self.grants = GrantReader(self.values)
        self.servers = ServerReader(self.values)
        self.access = AuthChecker(self.values, self.grants, self.program)

    def manifest(self, data: Json) -> Manifest | None:
        v = self.values
        top = v.obj(data, "", TOP, required=("server", "tools"))
        if top is None:
            return None
        server = self.servers.server(top.get("server"))
        tools = self.tools(top.get("tools"), server)
        model = self.model(top.get("model"), tools) if "model" in top else None
        self.model_needed(top, tools)
        check_server_name(self, server.name if server else None)
        resources = (check_resources(self, top["resources"])
                     if "resources" in top else ())
        auth = self.access.auth(top["auth"], server) if "auth" in top else None
        callers = None
        if "callers" in top:
            callers = self.access.callers(top["callers"], tools, self.quota)
            if "auth" not in top:
                v.add("callers", "needs the auth section: a caller is chosen by its "
                      "authenticated identity")
        reader = PromptReader(v, server.name if server else None,
                              tuple(r.name for r in resources or ()))
        prompts = reader.prompts(top["prompts"]) if "prompts" in top else ()
        callers = reader.caller_prompts(callers, top.get("callers"), prompts)
        if (server is None or tools is None or resources is None or prompts is None
                or v.failed(top, "", "auth", "callers")):
            return None
        hidden = tuple(t for r in resources for t in (r.get, r.list))
        return Manifest(path=self.path, server=server, tools=(*tools, *hidden), model=model,
                        resources=resources, auth=auth, callers=callers, prompts=prompts)

    # -- model ----------------------------------------------------------

    def model(self, value: Json, tools: list[Tool] | None) -> ModelConfig | None:
        v = self.values
        obj = v.obj(value, "model", MODEL, required=("provider", "model", "api_key"))
        if obj is None:
            return None
        provider = v.string(obj.get("provider"), "model.provider")
        if provider is not None and provider not in PROVIDERS:
            v.add("model.provider", f"{show(provider)} is not a provider staal speaks "
                  f"(known: {', '.join(PROVIDERS)})")
        name = v.string(obj.get("model"), "model.model")
        api_key = v.secret(obj.get("api_key"), "model.api_key")
        timeout = v.optional(obj, "timeout_ms", "model", lambda x, p: v.whole(x, p, 1, HOUR_MS))
        retries = v.optional(obj, "retries", "model", lambda x, p: v.whole(x, p, 0, 10))
        base_url = v.optional(obj, "base_url", "model", v.url)
        if provider is None or name is None or api_key is None or provider not in PROVIDERS:
            return None
        return ModelConfig(provider, name, api_key, timeout, retries, base_url)

    def model_needed(self, top: Table, tools: list[Tool] | None) -> None:
        """A tool that can reach a model needs the model section, with its
        timeout_ms and retries (seed 000 section 3, "How long a call can take")."""
        users = [t.name for t in tools or () if t.can_reach_model()]
        if not users:
            return
        who = f"tool '{users[0]}' can reach a model"
        model = top.get("model")
        if "model" not in top:
            self.values.add("model", f"is required: {who}")
            return
        if isinstance(model, dict):
            for key in ("timeout_ms", "retries"):
                if key not in model:
                    self.values.add(f"model.{key}", f"is required: {who}")

    # -- tools ----------------------------------------------------------

    def tools(self, value: Json, server: ServerConfig | None) -> list[Tool] | None:
        v = self.values
        items = v.list(value, "tools")
        if items is None:
            return None
        if not items:
            v.add("tools", "a manifest serves at least one tool")
            return None
        tools: list[Tool] = []
        seen: dict[str, int] = {}
        ok = True
        for i, item in enumerate(items):
            tool = self.tool(item, f"tools[{i}]", server)
            if tool is None:
                ok = False
                continue
            if tool.name in seen:
                v.add(f"tools[{i}].name", f"'{tool.name}' is already the name of tools[{seen[tool.name]}]")
                ok = False
            seen.setdefault(tool.name, i)
            tools.append(tool)
        return tools if ok else None

    def tool_name(self, value: Json, path: str) -> str | None:
        name = self.values.string(value, path)
        if name is None:
            return None
        if not _TOOL_NAME.fullmatch(name):
            self.values.add(path, f"{show(name)} is not a tool name (1 to 128 of A-Z a-z 0-9 _ - .)")
            return None
        if name == RUN_STATUS_TOOL:
            self.values.add(path, f"'{RUN_STATUS_TOOL}' is the server's own tool")
            return None
        return name

    def tool(self, value: Json, path: str, server: ServerConfig | None) -> Tool | None:
        v = self.values
        obj = v.obj(value, path, TOOL, required=("name", "description", "program", "net"))
        if obj is None:
            return None
        name = self.tool_name(obj.get("name"), f"{path}.name")
        title = v.optional(obj, "title", path, v.string)
        description = v.string(obj.get("description"), f"{path}.description")
        program = self.program(obj.get("program"), f"{path}.program")
        entry = v.identifier(obj.get("entry", "main"), f"{path}.entry")
        grants = self.grants.grants(obj.get("grants", {}), f"{path}.grants")
        net = self.net(obj.get("net"), f"{path}.net")
        deadline = v.optional(obj, "deadline", path, v.duration)
        limit = v.optional(obj, "max_concurrent_runs", path, lambda x, p: v.whole(x, p, 1, 1024))
        runs = v.optional(obj, "runs_per_worker", path,
                          lambda x, p: v.whole(x, p, *RUNS_PER_WORKER_RANGE))
        once = v.optional(obj, "once", path, lambda x, p: self.once(x, p, server, grants))
        quota = v.optional(obj, "quota", path, lambda x, p: self.quota(x, p, grants))
        steps = v.whole(obj.get("max_steps", DEFAULT_MAX_STEPS), f"{path}.max_steps", 1, 10**12)
        memory = v.optional(obj, "max_memory", path,
                            lambda x, p: v.size(x, p, MIN_MEMORY_MIB, machine_mib()))
        wait = v.optional(obj, "max_wait", path, lambda x, p: v.duration(x, p, units="smh"))
        cpu = v.optional(obj, "max_cpu", path, lambda x, p: v.duration(x, p, units="smh"))
        profiles = v.optional(obj, "profiles", path,
                              lambda x, p: self.access.profiles(x, p, grants))
        task: TaskSupport | None = v.optional(obj, "task", path, self.task_support)
        if quota is not None and quota.money is not None:
            for set_name, grant_set in (profiles or {}).items():
                # A run with this set reserves its worst case against the same quota.
                self.quota_money_bounded(quota.money, f"{path}.profiles.{set_name}", grant_set)
        if (name is None or description is None or program is None or entry is None
                or grants is None or net is None or steps is None
                or v.failed(obj, path, "title", "deadline", "max_concurrent_runs",
                            "runs_per_worker", "once", "quota", "max_memory", "max_wait",
                            "max_cpu", "profiles", "task")):
            return None
        return Tool(
            name=name, title=title, description=description, program=program, entry=entry,
            grants=grants, net=net, deadline=deadline, max_concurrent_runs=limit,
            runs_per_worker=runs, once=once, quota=quota, max_steps=steps, max_memory=memory, max_wait=wait,
            max_cpu=cpu, profiles=profiles or MappingProxyType({}), task=task or NO_TASK,
        )

    def task_support(self, value: Json, path: str) -> TaskSupport | None:
        """A tool's `task`: whether its calls are answered as tasks."""
        if value not in TASK_SUPPORT:
            self.values.add(path, f"{show(value)} is not one of {', '.join(TASK_SUPPORT)}")
            return None
        return cast(TaskSupport, value)

    def program(self, value: Json, path: str) -> Path | None:
        resolved = self.values.path(value, path)
        if resolved is None:
            return None
        if not resolved.is_file():
            self.values.add(path, f"{resolved} does not exist or is not a file")
            return None
        if resolved.suffix != ".py":
            self.values.add(path, f"{resolved} is not a Python file (.py)")
            return None
        return resolved

    def net(self, value: Json, path: str) -> NetConfig | None:
        v = self.values
        obj = v.obj(value, path, NET, required=NET)
        if obj is None:
            return None
        timeout = (v.whole(obj.get("timeout_ms"), f"{path}.timeout_ms", 1, HOUR_MS)
                   if "timeout_ms" in obj else None)
        connect = (v.whole(obj.get("connect_timeout_ms"), f"{path}.connect_timeout_ms", 1, HOUR_MS)
                   if "connect_timeout_ms" in obj else None)
        if timeout is None or connect is None:
            return None
        return NetConfig(timeout_ms=timeout, connect_timeout_ms=connect)

    def once(self, value: Json, path: str, server: ServerConfig | None,
             grants: Mapping[str, Grant] | None) -> OnceConfig | None:
        v = self.values
        obj = v.obj(value, path, ONCE, required=("by",))
        if obj is None:
            return None
        by = self.once_by(obj.get("by"), f"{path}.by", grants)
        keep = v.optional(obj, "keep", path, lambda x, p: v.duration(x, p, units="mhd"))
        if "keep" in obj and keep is None:
            return None
        if (server is not None and keep is not None and server.keep is not None
                and keep.ms > server.keep.ms):
            days = f"{server.keep_days} day{'s' if server.keep_days != 1 else ''}"
            v.add(f"{path}.keep", f"\"{keep}\" is longer than server.keep ({days})")
            return None
        if by is None:
            return None
        if keep is None and server is not None:
            keep = server.keep
        return OnceConfig(by=by, keep=keep)

    def once_by(self, value: Json, path: str, grants: Mapping[str, Grant] | None) -> tuple[str, ...] | None:
        v = self.values
        names = v.string_list(value, path, non_empty=True)
        if names is None:
            return None
        ok = True
        for i, name in enumerate(names):
            where = f"{path}[{i}]"
            if v.identifier(name, where) is None:
                ok = False
            elif name in names[:i]:
                v.add(where, f"'{name}' is named twice")
                ok = False
            elif grants and name in grants:
                v.add(where, f"'{name}' is a capability, not an argument")
                ok = False
        return tuple(names) if ok else None

    def quota(self, value: Json, path: str, grants: Mapping[str, Grant] | None) -> QuotaConfig | None:
        v = self.values
        obj = v.obj(value, path, QUOTA, required=("window",))
        if obj is None:
            return None
        window = v.duration(obj.get("window"), f"{path}.window") if "window" in obj else None
        calls = v.optional(obj, "calls", path, lambda x, p: v.whole(x, p, 1, 10**9))
        money = v.optional(obj, "money", path, v.positive_money)
        if "calls" not in obj and "money" not in obj:
            v.add(path, "a quota limits calls, money or both; it has neither")
            return None
        if money is not None and grants is not None:
            self.quota_money_bounded(money, f"{path}.money", grants)
        if window is None or v.failed(obj, path, "calls", "money"):
            return None
        return QuotaConfig(window=window, calls=calls, money=money)

    def quota_money_bounded(self, money: Json, path: str, grants: Mapping[str, Grant]) -> None:
        """A money quota reserves each run's worst case, so it must be finite
        and in the quota's currency (seed 000 section 6)."""
        for name, grant in grants.items():
            for inner in grant.walk():
                if not inner.spec.money:
                    continue
                worst = inner.worst_case()
                if worst is None:
                    self.values.add(path, f"grant '{name}' has no max and no each with uses, "
                                    "so a run's worst-case spend is unbounded")
                elif worst.currency != money.currency:
                    self.values.add(path, f"grant '{name}' spends {worst.currency}; "
                                    f"this quota counts {money.currency}")
