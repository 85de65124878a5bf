"""A run config: everything one run needs besides its inputs.

`staal run CONFIG.json` reads one from a file (paths relative to it); the
supervisor builds one from a manifest tool (seed 000 section 2: every tool's
config is checked by building a run config from it). The config's SHA-256
goes into the journal header, so a run never resumes under another config.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from staal.errors import ManifestError
from staal.manifest.check import ManifestChecker, plain, read_json
from staal.manifest.model import MIN_MEMORY_MIB, Grant, Manifest, ModelConfig, NetConfig, SecretRef, Tool
from staal.manifest.sizes import machine_mib
from staal.manifest.values import join
from staal.records.canonical import canonical_json, sha256_hex

# A script's defaults; a tool must give its own (seed 000 section 3).
SCRIPT_NET = NetConfig(timeout_ms=30_000, connect_timeout_ms=10_000)
DEFAULT_MAX_STEPS = 10_000_000
DEFAULT_CPU_MS = 60_000
# Memory a run may allocate beyond what its worker holds when it begins
# (staal, the programs and what they import): enough for a tool's work.
DEFAULT_MEMORY_MIB = 512
# Without a deadline, how long a run may spend outside its actions, waiting
# or computing (seed 000 section 3: nothing waits without end).
DEFAULT_WAIT_MS = 300_000
CONFIG_KEYS = ("tool", "program", "entry", "grants", "net", "limits", "model", "inputs")
LIMIT_KEYS = ("deadline_ms", "max_steps", "cpu_ms", "memory_mib", "wait_ms")
DAY_MS = 86_400_000


def default_memory_mib() -> int:
    """DEFAULT_MEMORY_MIB, or the whole machine if it has less."""
    return min(DEFAULT_MEMORY_MIB, machine_mib())


@dataclass(frozen=True, slots=True)
class Limits:
    deadline_ms: int | None = None
    max_steps: int = DEFAULT_MAX_STEPS
    # A backstop for computation inside C code, where steps are not counted.
    cpu_ms: int = DEFAULT_CPU_MS
    # What the run may allocate on top of its worker's own memory.
    memory_mib: int = field(default_factory=default_memory_mib)
    # The wall-clock time the run may spend outside its actions.
    wait_ms: int = DEFAULT_WAIT_MS


@dataclass(frozen=True, slots=True)
class RunConfig:
    tool: str
    program: Path
    entry: str
    grants: Mapping[str, Grant] = field(default_factory=lambda: MappingProxyType({}))
    net: NetConfig = SCRIPT_NET
    limits: Limits = Limits()
    model: ModelConfig | None = None
    # The file it was read from, if any: `staal resume` reads it again.
    source: Path | None = None

    def to_json(self) -> dict[str, Any]:
        """The config's canonical content (its source file excluded)."""
        return {
            "tool": self.tool,
            "program": str(self.program),
            "entry": self.entry,
            "grants": {name: grant_to_json(g) for name, g in sorted(self.grants.items())},
            "net": dataclasses.asdict(self.net),
            "limits": dataclasses.asdict(self.limits),
            "model": None if self.model is None else _model_to_json(self.model),
        }

    def sha256(self) -> str:
        return sha256_hex(canonical_json(self.to_json()))

    def secret_names(self) -> list[str]:
        """Every environment variable this run's grants (and model) name."""
        names: list[str] = []
        for grant in self.grants.values():
            for inner in grant.walk():
                names.extend(s.env for s in _secrets_of(inner))
        if self.model is not None and any(
            g.cap == "model.complete" for grant in self.grants.values() for g in grant.walk()
        ):
            names.append(self.model.api_key.env)
        return sorted(set(names))


def _secrets_of(grant: Grant) -> list[SecretRef]:
    found = [n for n in grant.needs.values() if isinstance(n, SecretRef)]
    if grant.dsn is not None:
        found.append(grant.dsn)
    return found


def grant_to_json(grant: Grant) -> dict[str, Any]:
    out: dict[str, Any] = {"cap": grant.cap}
    for f in dataclasses.fields(grant):
        value = getattr(grant, f.name)
        if f.name == "cap" or value is None or value is False or value == {}:
            continue
        if f.name == "needs":
            value = {k: ({"env": v.env} if isinstance(v, SecretRef) else grant_to_json(v))
                     for k, v in sorted(value.items())}
        elif f.name == "dsn":
            value = {"env": value.env}
        elif f.name in ("each", "max"):
            value = value.to_wire()
        elif f.name == "only":
            value = list(value)
        elif f.name == "path":
            value = str(value)
        out[f.name] = value
    return out


def _model_to_json(model: ModelConfig) -> dict[str, Any]:
    data = dataclasses.asdict(model)
    data["api_key"] = {"env": model.api_key.env}
    return data


def config_key(tool: str, grants: str | None = None) -> str:
    """The name a worker knows a run config by: the tool's, and with one of
    its alternative grant sets `tool:set` (a tool name never holds a colon)."""
    return tool if grants is None else f"{tool}:{grants}"


def tool_of_key(key: str) -> str:
    """The tool a `config_key` names."""
    return key.partition(":")[0]


def from_tool(manifest: Manifest, tool: Tool, grants: str | None = None) -> RunConfig:
    """The run config a manifest tool's calls run under, with its own
    grants or the alternative set named `grants`."""
    deadline = tool.deadline.ms if tool.deadline is not None else None
    cpu = max(DEFAULT_CPU_MS, 2 * deadline) if deadline else DEFAULT_CPU_MS
    cpu = tool.max_cpu.ms if tool.max_cpu is not None else cpu
    memory = tool.max_memory.mib if tool.max_memory is not None else default_memory_mib()
    wait = tool.max_wait.ms if tool.max_wait is not None else (deadline or DEFAULT_WAIT_MS)
    return RunConfig(
        tool=tool.name,
        program=tool.program,
        entry=tool.entry,
        grants=tool.grant_set(grants),
        net=tool.net,
        limits=Limits(deadline_ms=deadline, max_steps=tool.max_steps, cpu_ms=cpu,
                      memory_mib=memory, wait_ms=wait),
        model=manifest.model if tool.can_reach_model() else None,
        source=manifest.path,
    )


def load_run_config(path: str | Path) -> tuple[RunConfig, Any]:
    """A run config file and the inputs it holds; `ManifestError` lists every
    problem with its key path."""
    path = Path(path).resolve()
    return check_run_config(read_json(path, "run config"), path)


def check_run_config(data: Any, path: Path) -> tuple[RunConfig, Any]:
    checker = ManifestChecker(path)
    v = checker.values
    obj = v.obj(data, "", CONFIG_KEYS, required=("program",))
    if obj is None:
        raise ManifestError(str(path), v.problems)
    program = checker.program(obj.get("program"), "program")
    tool = v.optional(obj, "tool", "", checker.tool_name)
    entry = v.identifier(obj.get("entry", "main"), "entry")
    grants = checker.grants.grants(obj.get("grants", {}), "grants")
    net = checker.net(obj["net"], "net") if "net" in obj else SCRIPT_NET
    limits = _limits(v, obj.get("limits", {}))
    model = checker.model(obj["model"], None) if "model" in obj else None
    reaches_model = grants and any(
        g.cap == "model.complete" for gr in grants.values() for g in gr.walk())
    if reaches_model and "model" not in obj:
        v.add("model", "is required: a grant can reach a model")
    # A reader returns None only after recording why, so none is None here.
    if v.problems or program is None or entry is None or grants is None or net is None:
        raise ManifestError(str(path), v.problems)
    config = RunConfig(
        tool=tool or program.stem, program=program, entry=entry, grants=grants, net=net,
        limits=limits, model=model, source=path,
    )
    return config, plain(obj.get("inputs", {}))


def _limits(v: Any, value: Any) -> Limits:
    obj = v.obj(value, "limits", LIMIT_KEYS)
    if obj is None:
        return Limits()
    deadline = v.optional(obj, "deadline_ms", "limits", lambda x, p: v.whole(x, p, 1, 30 * DAY_MS))
    steps = v.whole(obj.get("max_steps", DEFAULT_MAX_STEPS), join("limits", "max_steps"), 1, 10**12)
    cpu = v.whole(obj.get("cpu_ms", DEFAULT_CPU_MS), join("limits", "cpu_ms"), 1, 30 * DAY_MS)
    memory = v.whole(obj.get("memory_mib", default_memory_mib()), join("limits", "memory_mib"),
                     MIN_MEMORY_MIB, machine_mib())
    wait = v.whole(obj.get("wait_ms", deadline or DEFAULT_WAIT_MS), join("limits", "wait_ms"),
                   1, 30 * DAY_MS)
    return Limits(deadline_ms=deadline, max_steps=steps or DEFAULT_MAX_STEPS,
                  cpu_ms=cpu or DEFAULT_CPU_MS, memory_mib=memory or default_memory_mib(),
                  wait_ms=wait or DEFAULT_WAIT_MS)
