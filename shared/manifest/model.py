"""The manifest (seed 000 section 2, frozen for version 1) as frozen objects.

`load_manifest(path)` reads the file once, checks every rule and either
returns a `Manifest` or raises `ManifestError` listing every problem with its
key path. The rules themselves live in `staal.manifest.check`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from staal.manifest.catalogue import CATALOGUE, MODEL_CAP, CapSpec
from staal.manifest.durations import Duration
from staal.manifest.prompt_model import Prompt
from staal.manifest.sizes import Size
from staal.money import Money

RUN_STATUS_TOOL = "staal_run_status"
DEFAULT_KEEP_DAYS = 90
DEFAULT_MAX_CONCURRENT_RUNS = 4
DEFAULT_MAX_STEPS = 10_000_000
# How many runs one worker process serves (`runs_per_worker`, per tool or
# for the server) before it is retired; 1 is a fresh process per run. 100:
# within 2% of 1000's CPU per call, where 10 is 23% above it (BENCHMARKS.md,
# issue 26's goals); and the range a manifest may set.
DEFAULT_RUNS_PER_WORKER = 100
RUNS_PER_WORKER_RANGE = (1, 100_000)
# An instance's lease on a shared store (`server.store.postgres.lease_s`),
# and the range a manifest may set: under 3 s a renewal every second is
# too easily missed on a loaded machine; an hour is already a long wait
# for a dead instance's runs.
DEFAULT_LEASE_MS = 15_000
# MCP's `execution.taskSupport` values, the manifest's `task` key.
TaskSupport = Literal["forbidden", "optional", "required"]
TASK_SUPPORT: tuple[str, ...] = ("forbidden", "optional", "required")
NO_TASK: TaskSupport = "forbidden"
# What a task's client is told to wait between two polls (`pollInterval`).
DEFAULT_TASK_POLL_INTERVAL = Duration(1_000, "1s")
LEASE_S_RANGE = (3, 3600)
# The least max_memory: below it a program can hardly import anything.
MIN_MEMORY_MIB = 32


@dataclass(frozen=True, slots=True)
class SecretRef:
    """A secret named by its environment variable; never its value."""

    env: str

    def __str__(self) -> str:
        return f"${self.env}"


@dataclass(frozen=True, slots=True)
class Grant:
    cap: str
    uses: int | None = None
    each: Money | None = None
    max: Money | None = None
    only: tuple[str, ...] | None = None
    idempotency_key: bool = False
    needs: Mapping[str, Grant | SecretRef] = field(
        default_factory=lambda: MappingProxyType({})
    )
    base_url: str | None = None
    path: Path | None = None
    dsn: SecretRef | None = None
    library: str | None = None

    @property
    def spec(self) -> CapSpec:
        return CATALOGUE[self.cap]

    def walk(self) -> Iterator[Grant]:
        """This grant and every grant it acts through."""
        yield self
        for need in self.needs.values():
            if isinstance(need, Grant):
                yield from need.walk()

    def worst_case(self) -> Money | None:
        """The most one run can spend through this grant, if it is bounded."""
        if self.max is not None:
            return self.max
        if self.each is not None and self.uses is not None:
            return self.each * self.uses
        return None


@dataclass(frozen=True, slots=True)
class NetConfig:
    timeout_ms: int
    connect_timeout_ms: int


@dataclass(frozen=True, slots=True)
class OnceConfig:
    by: tuple[str, ...]
    # None: kept for ever (server.keep is "forever" and once.keep is not set).
    keep: Duration | None


@dataclass(frozen=True, slots=True)
class QuotaConfig:
    window: Duration
    calls: int | None = None
    money: Money | None = None


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    program: Path
    entry: str
    grants: Mapping[str, Grant]
    net: NetConfig
    title: str | None = None
    deadline: Duration | None = None
    max_concurrent_runs: int | None = None
    once: OnceConfig | None = None
    quota: QuotaConfig | None = None
    max_steps: int = DEFAULT_MAX_STEPS
    # None: the defaults (staal.records.runconfig: DEFAULT_MEMORY_MIB; the deadline,
    # or DEFAULT_WAIT_MS without one; DEFAULT_CPU_MS, or twice the deadline).
    max_memory: Size | None = None
    max_wait: Duration | None = None
    max_cpu: Duration | None = None
    # None: the server's `runs_per_worker` (Manifest.runs_per_worker). Not a
    # run limit: it stays out of RunConfig, so changing it never changes a
    # journal's config_sha256 and never makes a run unresumable.
    runs_per_worker: int | None = None
    # Alternative grant sets a caller profile may pick by name (`callers`,
    # `"grants": "<name>"`); each names the same parameters as `grants`.
    profiles: Mapping[str, Mapping[str, Grant]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    # Whether a call of this tool is answered as a task (MCP's
    # `execution.taskSupport`, named as the wire names it): "forbidden" never,
    # "optional" when the client asks, "required" always.
    task: TaskSupport = NO_TASK

    def grant_set(self, profile: str | None) -> Mapping[str, Grant]:
        """The grants a run of this tool runs with: its own, or the named
        alternative set (chosen by the caller's profile, never the request)."""
        return self.grants if profile is None else self.profiles[profile]

    def all_grants(self) -> Iterator[Grant]:
        for grant in self.grants.values():
            yield from grant.walk()
        for grants in self.profiles.values():
            for grant in grants.values():
                yield from grant.walk()

    def can_reach_model(self) -> bool:
        return any(g.cap == MODEL_CAP for g in self.all_grants())

    def can_spend_money(self) -> bool:
        return any(g.spec.money for g in self.all_grants())


@dataclass(frozen=True, slots=True)
class TracesConfig:
    """`server.traces`: where the server exports its spans (OTLP over
    HTTP, such as "http://collector:4318/v1/traces") and the service name
    they carry. None of either: the standard `OTEL_*` variables decide
    (supervisor/telemetry/tracing.py `export_plan`)."""

    otlp_endpoint: str | None = None
    service_name: str | None = None


@dataclass(frozen=True, slots=True)
class HttpConfig:
    """`server.http`: how the tools are served over Streamable HTTP
    (`serve --http`): the endpoint's path, the Origins a browser may send
    besides the server's own, and the URL clients reach it at."""

    path: str = "/mcp"
    origins: tuple[str, ...] = ()
    public_url: str | None = None


# A load balancer's readiness check (`serve --http`), beside the MCP
# endpoint at the listening address's root: no endpoint may take it.
READY_PATH = "/ready"
DEFAULT_METRICS_LISTEN = "127.0.0.1:9464"


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """`server.metrics`: the Prometheus metrics, served by `serve` on a
    listener of their own (never the MCP endpoint), at `host`:`port`
    (loopback unless the manifest sets `allow_remote`)."""

    host: str = "127.0.0.1"
    port: int = 9464
@dataclass(frozen=True, slots=True)
class PostgresStore:
    """`server.store: {"postgres": {"dsn": {"env": NAME}, "lease_s": 15}}`:
    the ledger in a PostgreSQL database that several instances may share
    (issue 15). The DSN is a secret, read from the supervisor's environment
    at start; `lease_ms` is how long this instance's lease lasts
    (supervisor/recovery/lease.py `LeaseTiming`)."""

    dsn: SecretRef
    lease_ms: int = DEFAULT_LEASE_MS


DEFAULT_VERIFY_TIMEOUT_MS = 2_000


@dataclass(frozen=True, slots=True)
class CredentialConfig:
    """`auth.credential`: how a request presents its credential. "bearer"
    (the default): an `Authorization: Bearer` token. "provider": every
    request's head goes to the operator's verifier program (`program`,
    `entry`), in its own confined process, which sees only the `headers`
    named here; they are taken out of the request before the MCP layer
    sees it. `timeout_ms` bounds each request's verification."""

    presence: Literal["bearer", "provider"] = "bearer"
    program: Path | None = None
    entry: str = "verify"
    headers: tuple[str, ...] = ()
    timeout_ms: int = DEFAULT_VERIFY_TIMEOUT_MS


@dataclass(frozen=True, slots=True)
class ServerConfig:
    name: str
    journals: Path
    # None: "forever".
    keep_days: int | None = DEFAULT_KEEP_DAYS
    max_concurrent_runs: int = DEFAULT_MAX_CONCURRENT_RUNS
    # Runs a worker serves before it is retired, for a tool that sets none.
    runs_per_worker: int = DEFAULT_RUNS_PER_WORKER
    notify: tuple[str, ...] | None = None
    notify_env: tuple[str, ...] = ()
    http: HttpConfig = HttpConfig()
    # None: no `server.traces` key (the OTEL_* variables may still turn export on).
    traces: TracesConfig | None = None
    # None: no `metrics` section, no metrics listener.
    metrics: MetricsConfig | None = None
    # None: the file store, `<journals>/server.ledger` (the default).
    store: PostgresStore | None = None
    # Tasks (a task is its run): how often a client is told to poll, and how
    # long a task is promised to be kept (None: as long as `keep`, never longer).
    task_poll_interval: Duration = DEFAULT_TASK_POLL_INTERVAL
    task_ttl: Duration | None = None

    @property
    def task_ttl_ms(self) -> int | None:
        """The ttl a task is created with: `task_ttl`, else what retention
        keeps (None: kept for ever). The manifest check refuses a `task_ttl`
        longer than `keep`, so a task never outlives its run's journal."""
        if self.task_ttl is not None:
            return self.task_ttl.ms
        return None if self.keep is None else self.keep.ms

    @property
    def keep(self) -> Duration | None:
        return None if self.keep_days is None else Duration.of_days(self.keep_days)


DEFAULT_ALGORITHMS = ("RS256", "ES256")


@dataclass(frozen=True, slots=True)
class AuthConfig:
    """`auth`: who may call the tools over HTTP (issue 14). With a bearer
    token, the OAuth 2.1 protected resource: `issuer` and `audience` are
    always set and checked (`audience` defaults to server.http.public_url);
    `jwks_url` None means "from the issuer's metadata" (RFC 8414). With
    presence "provider" the operator's verifier checks the credential
    itself: issuer, audience, JWKS and algorithms are None and unused (a
    principal's issuer is the verifier's to name). `required_scopes` hold
    for both."""

    issuer: str | None = None
    audience: str | None = None
    jwks_url: str | None = None
    algorithms: tuple[str, ...] = DEFAULT_ALGORITHMS
    required_scopes: tuple[str, ...] = ()
    credential: CredentialConfig = CredentialConfig()


@dataclass(frozen=True, slots=True)
class RateConfig:
    """A caller's rate limit: at most `calls` runs per `window`."""

    calls: int
    window: Duration


@dataclass(frozen=True, slots=True)
class CallerTool:
    """What a caller profile allows of one tool: the grant set it runs with
    (None: the tool's own `grants`) and the caller's own quota on it."""

    grants: str | None = None
    quota: QuotaConfig | None = None


WhenKey = Literal["scope", "client_id", "sub"]


@dataclass(frozen=True, slots=True)
class Caller:
    """A caller profile (`callers[i]`): the first whose `when` matches a
    principal decides the tools it sees and may call, and how each runs."""

    name: str
    when: tuple[WhenKey, str]
    tools: Mapping[str, CallerTool]
    rate: RateConfig | None = None
    # None: every prompt (no `prompts` key); else the names of those it sees.
    prompts: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class ModelConfig:
    provider: str
    model: str
    api_key: SecretRef
    timeout_ms: int | None = None
    retries: int | None = None
    base_url: str | None = None


@dataclass(frozen=True, slots=True)
class ResourceDecl:
    """One operator-declared collection: `get` and `list` are the hidden
    tools that serve it."""

    name: str
    description: str
    max_page_size: int
    get: Tool
    list: Tool
    # `complete.values`: the ids completions offer, without a run (none: read by one).
    ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Manifest:
    path: Path
    server: ServerConfig
    # The manifest's tools, then the hidden ones that serve `resources`
    # (manifest_resources.py: never listed, never callable by name).
    tools: tuple[Tool, ...]
    model: ModelConfig | None = None
    resources: tuple[ResourceDecl, ...] = ()
    auth: AuthConfig | None = None
    # None: no `callers` section (every authenticated caller may call every tool).
    callers: tuple[Caller, ...] | None = None
    prompts: tuple[Prompt, ...] = ()

    def tool(self, name: str) -> Tool | None:
        for tool in self.tools:
            if tool.name == name:
                return tool
        return None

    def runs_per_worker(self, tool_name: str) -> int:
        """How many runs one worker of the tool serves: the tool's own
        `runs_per_worker`, else the server's (1: a fresh process per run)."""
        tool = self.tool(tool_name)
        if tool is not None and tool.runs_per_worker is not None:
            return tool.runs_per_worker
        return self.server.runs_per_worker

    def warnings(self) -> list[str]:
        """What is allowed but worth an operator's attention at start."""
        return [
            f"tool '{tool.name}' can spend money and has no once: a repeated call is a new "
            "run that can pay again; only the quota bounds it"
            for tool in self.tools
            if tool.can_spend_money() and tool.once is None
        ]
