"""The balancer's health check on the shared store (issue 24 item 5): three
`serve --http` instances with `auth` behind HAProxy (`tests/helpers/fleet.py`),
checked by `GET /ready`, which needs no token. An instance fenced in the
store (its identity taken: here its fencing token changed under it) says
so and leaves the rotation while the others serve on; when PostgreSQL is
out of reach every instance answers 503 `not ready` (HAProxy logs the
code) and leaves it, and each comes back on its own once the store is
back, no restart. Every wait is on a log line, bounded."""

from __future__ import annotations

import re
from typing import Any

import httpx
import psycopg

from staal.supervisor.recovery.lease import LeaseTiming
from tests.deployment import test_fleet_shared
from tests.helpers.fleet import Fleet, ManifestWriter, fleet
from tests.helpers.flood import call_request, classify
from tests.helpers.haproxy import INSTANCE_HEADER
from tests.helpers.pg_store import PgStore
from tests.helpers.servers import WAIT, Site

ENV = test_fleet_shared.ENV
# The shortest lease a manifest may hold: renewed every second, so a
# renewal notices the store or the fencing token soon.
LEASE = LeaseTiming(3000)
STORE = {"postgres": {"dsn": {"env": ENV}, "lease_s": LEASE.lease_ms / 1000}}
BOUND_S = LEASE.takeover_bound_s + WAIT * 3
INSTANCES = ("i1", "i2", "i3")
ECHO = """
def main(text: str) -> dict:
    return {"echo": text}
"""
# The fixtures of the shared-ledger tests: a private cluster this module may stop.
cluster = test_fleet_shared.cluster
dsn = test_fleet_shared.dsn


def echo_site(site: Site, server: dict[str, Any]) -> None:
    site.program("echo.py", ECHO)
    site.write([{"name": "echo", "program": "echo.py"}], store=STORE, **server)


def echoes(running: Fleet, calls: int) -> list[tuple[str, str | None]]:
    """`calls` echo calls through the balancer: each one's kind and the
    instance that answered it."""
    got = []
    with httpx.Client(timeout=WAIT, trust_env=False) as http:
        for i in range(calls):
            body, headers = call_request(i, "echo", {"text": f"e{i}"}, "2025-11-25")
            answer = http.post(running.url, content=body, headers={**headers, **running.headers})
            done = classify(i, answer.status_code, answer.content, answer.headers.get(INSTANCE_HEADER))
            got.append((done.kind, done.instance))
    return got


def instance_row(conn: psycopg.Connection, running: Fleet, name: str) -> str:
    journals = str(running.instance(name).site.journals)
    (instance,), = [r for r in conn.execute("SELECT instance FROM staal_instances").fetchall()
                    if str(r[0]).endswith(journals)]
    return str(instance)


def test_an_instance_fenced_in_the_store_leaves_the_rotation_and_the_others_serve_on(
        tmp_path, pg_store: PgStore, authorization):
    write: ManifestWriter = echo_site
    with fleet(3, write, authorization, env={ENV: pg_store.dsn}, root=tmp_path) as running:
        assert {by for _, by in echoes(running, 6)} == set(INSTANCES)
        fenced = running.instance("i2")
        with psycopg.connect(pg_store.dsn, autocommit=True) as conn:
            # Another process registered i2's identity: its fencing token is
            # no longer the one it holds (a negative one: unique, as fences are).
            conn.execute("UPDATE staal_instances SET fence = -fence WHERE instance = %s",
                         (instance_row(conn, running, "i2"),))
        fenced.server.stderr.wait_event("readiness", BOUND_S, state="fenced", ready=False)
        fenced.server.stderr.wait_event("lease_lost", BOUND_S)
        running.lb.wait_state("i2", "DOWN", BOUND_S)
        after = echoes(running, 6)
        assert fenced.server.wait_exit() == 0
    assert all(kind == "done" for kind, _ in after), after
    assert {by for _, by in after} == {"i1", "i3"}
    assert running.lb.state_changes("i2") == ["DOWN"]
    assert running.lb.state_changes("i1") == running.lb.state_changes("i3") == []


def test_postgresql_out_of_reach_takes_every_instance_out_by_its_503_until_the_store_is_back(
        tmp_path, cluster, dsn, authorization):
    with fleet(3, echo_site, authorization, env={ENV: dsn}, root=tmp_path) as running:
        assert {kind for kind, _ in echoes(running, 3)} == {"done"}
        cluster.stop("immediate")
        try:
            for instance in running.instances:
                instance.server.stderr.wait_event("readiness", BOUND_S,
                                                  state="store_unreachable", ready=False)
            downs = [running.lb.wait_state(name, "DOWN", BOUND_S) for name in INSTANCES]
            # Not a refused or silent instance: each answered its check 503.
            with httpx.Client(timeout=WAIT, trust_env=False) as http:
                direct = [http.get(i.url.rsplit("/", 1)[0] + "/ready") for i in running.instances]
            during = echoes(running, 2)
        finally:
            cluster.start()
        for instance in running.instances:  # ready at its start, then again now
            log = instance.server.stderr
            log.wait_for(lambda _, log=log: len(log.events("readiness", state="serving")) == 2,
                         BOUND_S, "ready again")
        for name in INSTANCES:
            running.lb.wait_state(name, "UP", BOUND_S)
        after = echoes(running, 6)
    assert all(re.search(r"\bcode: 503\b", line) for line in downs), downs
    assert [(r.status_code, r.text) for r in direct] == [(503, "not ready\n")] * 3
    # With no instance in the rotation the balancer answers 503 itself:
    # nothing reached an instance.
    assert during == [("failed", None), ("failed", None)]
    assert all(kind == "done" for kind, _ in after) and {by for _, by in after} == set(INSTANCES)
    for name in INSTANCES:
        assert running.lb.state_changes(name) == ["DOWN", "UP"]
