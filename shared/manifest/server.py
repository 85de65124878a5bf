"""The manifest's `server` section: the journals and how long they are kept,
how many runs at once and how many a worker serves, the notify command, and the `http`, `traces`,
`metrics` and `store` sub-sections.

Checked by `ServerReader`, as `GrantReader` checks grants and `AuthChecker`
the access sections: every problem names its key path (`server.http.origins[0]`,
`server.metrics.listen`) and is reported through the shared `ValueReader`.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Literal
from urllib.parse import urlsplit

from staal.inputs.types import show
from staal.manifest.addresses import is_loopback, split_host_port
from staal.manifest.durations import Duration
from staal.manifest.model import (
    DEFAULT_KEEP_DAYS,
    DEFAULT_LEASE_MS,
    DEFAULT_MAX_CONCURRENT_RUNS,
    DEFAULT_METRICS_LISTEN,
    DEFAULT_RUNS_PER_WORKER,
    DEFAULT_TASK_POLL_INTERVAL,
    LEASE_S_RANGE,
    READY_PATH,
    RUNS_PER_WORKER_RANGE,
    HttpConfig,
    MetricsConfig,
    PostgresStore,
    ServerConfig,
    TracesConfig,
)
from staal.manifest.values import ValueReader
from staal.records.record import Json

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

SERVER = ("name", "journals", "keep", "max_concurrent_runs", "runs_per_worker", "notify",
          "notify_env", "http", "traces", "metrics", "store", "task_poll_interval", "task_ttl")
HTTP = ("path", "origins", "public_url")
TRACES = ("otlp_endpoint", "service_name")
METRICS = ("listen", "allow_remote")
POSTGRES = ("dsn", "lease_s")


class ServerReader:
    def __init__(self, values: ValueReader) -> None:
        self.v = values

    def server(self, value: Json) -> ServerConfig | None:
        v = self.v
        obj = v.obj(value, "server", SERVER, required=("name", "journals"))
        if obj is None:
            return None
        name = v.string(obj.get("name"), "server.name")
        journals = v.path(obj.get("journals"), "server.journals")
        if journals is not None and journals.exists() and not journals.is_dir():
            v.add("server.journals", f"{journals} exists and is not a directory")
        keep = self.keep(obj.get("keep", DEFAULT_KEEP_DAYS))
        limit = v.whole(
            obj.get("max_concurrent_runs", DEFAULT_MAX_CONCURRENT_RUNS),
            "server.max_concurrent_runs", 1, 1024,
        )
        runs = v.whole(obj.get("runs_per_worker", DEFAULT_RUNS_PER_WORKER),
                       "server.runs_per_worker", *RUNS_PER_WORKER_RANGE)
        notify = self.notify(obj.get("notify"))
        notify_env = self.env_names(obj.get("notify_env", []), "server.notify_env")
        http = self.http(obj.get("http", {}))
        traces = self.traces(obj["traces"]) if "traces" in obj else None
        metrics = v.optional(obj, "metrics", "server", self.metrics)
        store = self.store(obj.get("store", "file"))
        poll = v.optional(obj, "task_poll_interval", "server",
                          lambda x, p: v.duration(x, p, units="smh"))
        ttl = v.optional(obj, "task_ttl", "server", v.duration)
        if ttl is not None and keep is not False and keep is not None \
                and ttl.ms > Duration.of_days(keep).ms:
            v.add("server.task_ttl", f"{ttl.text} is longer than server.keep ({keep} days): a "
                  "task is kept only as long as its run's journal")
        if name is None or journals is None or limit is None or runs is None \
                or notify_env is None or http is None \
                or keep is False or traces is False or store is False \
                or v.failed(obj, "server", "metrics", "task_poll_interval", "task_ttl"):
            return None
        return ServerConfig(
            name=name, journals=journals, keep_days=keep, max_concurrent_runs=limit,
            runs_per_worker=runs, notify=notify, notify_env=notify_env, http=http, traces=traces,
            metrics=metrics, store=store,
            task_poll_interval=poll or DEFAULT_TASK_POLL_INTERVAL, task_ttl=ttl,
        )

    def traces(self, value: Json) -> TracesConfig | Literal[False]:
        """`server.traces`; False when refused."""
        v = self.v
        obj = v.obj(value, "server.traces", TRACES)
        if obj is None:
            return False
        endpoint = v.optional(obj, "otlp_endpoint", "server.traces", v.url)
        name = v.optional(obj, "service_name", "server.traces", v.string)
        if v.failed(obj, "server.traces", *TRACES):
            return False
        return TracesConfig(otlp_endpoint=endpoint, service_name=name)

    def metrics(self, value: Json, path: str) -> MetricsConfig | None:
        """`server.metrics`: where the Prometheus metrics are served; a
        loopback address unless `allow_remote` is true (they name the tools
        and show how busy the server is, and the listener has no auth)."""
        v = self.v
        obj = v.obj(value, path, METRICS)
        if obj is None:
            return None
        listen = obj.get("listen", DEFAULT_METRICS_LISTEN)
        allow_remote = v.boolean(obj.get("allow_remote", False), f"{path}.allow_remote")
        address = split_host_port(listen) if isinstance(listen, str) else None
        if address is None:
            v.add(f"{path}.listen", f"expected HOST:PORT, such as \"{DEFAULT_METRICS_LISTEN}\", "
                  f"not {show(listen)}")
            return None
        if allow_remote is False and not is_loopback(address[0]):
            v.add(f"{path}.listen", f"{show(listen)} is not a loopback address: the metrics name "
                  "the tools and show the server's load to anyone who reaches them, with no "
                  "authentication; listen on 127.0.0.1 (and let Prometheus reach it through a "
                  f"tunnel or a local agent), or set {path}.allow_remote to true if that is intended")
            return None
        if allow_remote is None:
            return None
        return MetricsConfig(host=address[0], port=address[1])

    def store(self, value: Json) -> PostgresStore | Literal[False] | None:
        """`server.store`: "file" (the default) or {"postgres": {"dsn":
        {"env": NAME}, "lease_s": SECONDS}}; False when refused."""
        v = self.v
        if value == "file":
            return None
        if not isinstance(value, dict) or list(value) != ["postgres"]:
            v.add("server.store", "expected \"file\" or {\"postgres\": {\"dsn\": {\"env\": "
                  "\"NAME\"}}} (the value is not repeated: it may hold a DSN, which is a "
                  "secret and is named only by its environment variable)")
            return False
        obj = v.obj(value["postgres"], "server.store.postgres", POSTGRES, required=("dsn",))
        if obj is None or "dsn" not in obj:
            return False
        dsn = v.secret(obj["dsn"], "server.store.postgres.dsn")
        lease_ms = self.lease_ms(obj.get("lease_s", DEFAULT_LEASE_MS / 1000))
        if dsn is None or lease_ms is None or v.failed(obj, "server.store.postgres", *POSTGRES):
            return False
        return PostgresStore(dsn, lease_ms)

    def lease_ms(self, value: Json) -> int | None:
        """`server.store.postgres.lease_s`: seconds, whole or not, in
        LEASE_S_RANGE; in milliseconds."""
        lo, hi = LEASE_S_RANGE
        if isinstance(value, (int, float)) and not isinstance(value, bool) and lo <= value <= hi:
            return round(value * 1000)
        self.v.add("server.store.postgres.lease_s",
                   f"expected a number of seconds from {lo} to {hi} (how long this instance's "
                   f"lease lasts; it renews it every third of that), not {show(value)}")
        return None

    def http(self, value: Json) -> HttpConfig | None:
        v = self.v
        obj = v.obj(value, "server.http", HTTP)
        if obj is None:
            return None
        path = obj.get("path", "/mcp")
        if not isinstance(path, str) or not re.fullmatch(r"/[A-Za-z0-9._~/-]*", path):
            v.add("server.http.path", f"{show(path)} is not a URL path (such as \"/mcp\")")
        elif path == READY_PATH:
            v.add("server.http.path", f"{show(path)} is the load balancers' readiness check "
                  "(GET /ready); the MCP endpoint needs another path (such as \"/mcp\")")
        origins = v.string_list(obj.get("origins", []), "server.http.origins")
        for i, origin in enumerate(origins or ()):
            parts = urlsplit(origin)
            if (parts.scheme not in ("http", "https") or not parts.hostname or parts.path
                    or parts.query or parts.fragment or parts.username):
                v.add(f"server.http.origins[{i}]", f"{show(origin)} is not an Origin "
                      "(scheme://host[:port], such as \"https://app.example.com\")")
        public = v.optional(obj, "public_url", "server.http", v.url)
        if v.failed(obj, "server.http", *HTTP) or origins is None:
            return None
        return HttpConfig(path=path, origins=tuple(origins), public_url=public)

    def keep(self, value: Json) -> int | Literal[False] | None:
        """Whole days >= 1, or None for "forever"; False when refused."""
        if value == "forever":
            return None
        if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 36_500:
            return value
        self.v.add(
            "server.keep",
            f"expected whole days from 1 to 36500, or \"forever\", not {show(value)}",
        )
        return False

    def notify(self, value: Json) -> tuple[str, ...] | None:
        v = self.v
        if value is None:
            return None
        items = v.string_list(value, "server.notify", non_empty=True)
        if not items:
            return None
        program = items[0]
        if "/" in program:
            resolved = (self.v.base_dir / program).resolve()
            if not (resolved.is_file() and os.access(resolved, os.X_OK)):
                v.add("server.notify[0]", f"{resolved} is not an executable file")
                return None
            return (str(resolved), *items[1:])
        if shutil.which(program) is None:
            v.add("server.notify[0]", f"{show(program)} is not a command found on PATH")
            return None
        return tuple(items)

    def env_names(self, value: Json, path: str) -> tuple[str, ...] | None:
        items = self.v.string_list(value, path)
        if items is None:
            return None
        ok = True
        for i, name in enumerate(items):
            if not _ENV_NAME.fullmatch(name):
                self.v.add(f"{path}[{i}]", f"{show(name)} is not an environment variable name")
                ok = False
        return tuple(items) if ok else None
