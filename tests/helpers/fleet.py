"""A deployment in the tests (issue 15, item 5): N `staal-supervisor serve
--http 127.0.0.1:PORT MANIFEST` instances, real processes, behind HAProxy
(`tests/helpers/haproxy.py`), reached by clients through the balancer, and each
reachable directly too.

The fleet is parameterised by the manifest: `write(site, server_fields)`
writes each instance's manifest into its own directory, with the fields the
fleet needs merged into `server` (`http.public_url`: the balancer's URL, so
each instance answers for the `Host` its clients send), and the fleet adds
an `auth` section naming the tests' authorization server (the deployment
runs with `auth` on, as the guide says to: every client sends `headers`,
a client-credentials token for the balancer's URL, and the balancer's
health check, `GET /ready`, none). With the file store
each instance has its own journal directory and shares nothing; once
`server.store` names the PostgreSQL store, the same writer gives every
instance the same DSN and the fleet is the deployment issue 15 describes.

An instance can be SIGKILLed, SIGSTOPped and SIGCONTed, and restarted on
its own port (the balancer's config names it); its stderr is captured
(`tests.helpers.servers.Stderr`, in `<site>/stderr.log`, appended across restarts)
and waited on by event.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.helpers.authorization import AuthorizationServer
from tests.helpers.haproxy import CHECK_MS, Backend, Balancer, listening_socket
from tests.helpers.http_servers import HttpServer
from tests.helpers.servers import Site

ManifestWriter = Callable[[Site, dict[str, Any]], object]


class Instance:
    """One staal process, its site (manifest, journals, stderr.log) and port."""

    def __init__(self, name: str, site: Site, env: dict[str, str] | None,
                 spawned: HttpServer | None = None) -> None:
        """`spawned`: its process, already started on `site` and `env`."""
        self.name = name
        self.site = site
        self.env = env
        self.server = (spawned or HttpServer(site, env=env)).started()
        self.port = int(self.server.url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])

    @property
    def url(self) -> str:
        """Its MCP endpoint, directly (not through the balancer)."""
        return self.server.url

    @property
    def pid(self) -> int:
        return self.server.process.pid

    def signal(self, signum: signal.Signals) -> None:
        os.kill(self.pid, signum)

    def kill(self) -> int:
        """SIGKILL: no clean-up of any kind; its exit status (-9)."""
        self.signal(signal.SIGKILL)
        return self.server.wait_exit()

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def restart(self) -> Instance:
        """A new process on the same port and site (a running one is stopped first)."""
        self.stop()
        self.server = HttpServer(self.site, env=self.env,
                                 address=f"127.0.0.1:{self.port}").started()
        return self

    def stop(self) -> None:
        if self.server.process.poll() is None:
            self.resume()  # a stopped process cannot act on SIGTERM
        self.server.stop()


class Fleet:
    """`count` instances behind one balancer, started in that order: the
    balancer's socket (so its URL is known), the instances, HAProxy."""

    def __init__(self, root: Path, count: int, write: ManifestWriter,
                 authorization: AuthorizationServer, env: dict[str, str] | None = None,
                 check_ms: int = CHECK_MS) -> None:
        self.root = root
        front = listening_socket()
        self.url = f"http://127.0.0.1:{front.getsockname()[1]}/mcp"
        self.instances: list[Instance] = []
        self.balancer: Balancer | None = None
        spawned: list[tuple[str, Site, HttpServer]] = []
        try:
            # Audience: the URL clients use (the manifest's default, public_url).
            self.headers = {"authorization": "Bearer " + authorization.token(
                "fleet", audience=self.url)}
            for i in range(1, count + 1):
                site = Site(_directory(root / f"i{i}"))
                write(site, {"http": {"public_url": self.url}})
                with_auth(site, authorization.issuer)
                spawned.append((f"i{i}", site, HttpServer(site, env=env)))
            # Every process is started before the first is waited for, as
            # a fleet's machines start: their start-ups overlap.
            for name, site, server in spawned:
                self.instances.append(Instance(name, site, env, server))
            self.balancer = Balancer(_directory(root / "balancer"), front,
                                     [Backend(i.name, i.port) for i in self.instances], check_ms)
        except BaseException:
            front.close()
            for _, _, server in spawned[len(self.instances):]:
                server.stop()
            self.stop()
            raise

    @property
    def lb(self) -> Balancer:
        assert self.balancer is not None
        return self.balancer

    def instance(self, name: str) -> Instance:
        return next(i for i in self.instances if i.name == name)

    def stop(self) -> None:
        if self.balancer is not None:
            self.balancer.stop()
        for instance in self.instances:
            instance.stop()


Record = dict[str, Any]


def first_record(instances: list[Instance], matches: Callable[[Record], bool], timeout: float,
                 what: str) -> tuple[Instance, Record]:
    """The first of `instances` to log a record `matches` holds for, and the
    record, waiting (bounded) on all their logs at once: a run may be
    recovered by whichever instance owns it by then."""
    found: list[tuple[Instance, Record]] = []
    seen = threading.Event()

    def line_matches(line: str) -> bool:
        try:
            record = json.loads(line)
        except ValueError:
            return False
        return isinstance(record, dict) and matches(record)

    def watch(instance: Instance) -> None:
        try:
            found.append((instance, json.loads(instance.server.stderr.wait_for(
                line_matches, timeout, what))))
            seen.set()
        except AssertionError:  # not this one's
            pass

    for instance in instances:
        threading.Thread(target=watch, args=(instance,), daemon=True).start()
    assert seen.wait(timeout), f"no instance logged {what} within {timeout} s"
    return found[0]


def first_event(instances: list[Instance], event: str, timeout: float,
                **fields: Any) -> tuple[Instance, Record]:
    """The first of `instances` to log `event` with `fields`, and the event."""
    return first_record(instances, lambda r: r.get("event") == event and all(
        r.get(k) == v for k, v in fields.items()), timeout, f"{event} {fields}")


def with_auth(site: Site, issuer: str) -> None:
    """The `auth` section added to the manifest the writer wrote: bearer
    tokens from `issuer` for the manifest's public URL."""
    manifest = json.loads(site.manifest.read_text())
    manifest["auth"] = {"issuer": issuer}
    site.manifest.write_text(json.dumps(manifest, indent=2))


def _directory(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def fleet(count: int, write: ManifestWriter, authorization: AuthorizationServer,
          env: dict[str, str] | None = None, root: Path | None = None) -> Iterator[Fleet]:
    with tempfile.TemporaryDirectory(prefix="staal-fleet-") as scratch:
        running = Fleet(root or Path(scratch), count, write, authorization, env)
        try:
            yield running
        finally:
            running.stop()
