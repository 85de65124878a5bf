"""Timeouts count the service's wait, not staal's own work (seed 000
section 3's bounds table; issue 12): `connect_timeout_ms` bounds the
connect and `timeout_ms` the exchange from when the request is sent, so a
fast service is never timed out because workers were busy being forked or
the machine was loaded; a service that really stalls still fails at its
bound (tests/processes/test_runs.py has the stalled GET and POST)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from tests.helpers.servers import RawServer, Site

LOOKUP = """
from staal.caps import HttpGet

def main(url: str, get: HttpGet) -> dict:
    return {"status": get.get(url).status_code}
"""
CALLS = 16


@contextmanager
def cpu_load(burners: int = 2) -> Iterator[None]:
    """Every core kept busy by a process spinning at full speed."""
    spinning = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(burners)]
    try:
        yield
    finally:
        for process in spinning:
            process.kill()
            process.wait()


def test_sixteen_runs_at_once_under_cpu_load_all_get_a_fast_service_within_1000_ms(
        tmp_path, service):
    service.route("GET", "/v1/orders/o1", 200, {"id": "o1"})
    site = Site(tmp_path)
    site.program("lookup.py", LOOKUP)
    site.write([{"name": "lookup", "program": "lookup.py",
                 "grants": {"get": {"cap": "net.http.get", "only": [service.base + "/v1/**"]}},
                 "net": {"timeout_ms": 1000, "connect_timeout_ms": 1000}}],
               max_concurrent_runs=CALLS)
    with RawServer(site) as server:
        server.initialize()
        with cpu_load():
            ids = [server.request("tools/call", {"name": "lookup", "arguments": {
                "url": service.base + "/v1/orders/o1"}}) for _ in range(CALLS)]
            answers = [server.answer(request_id, timeout=120) for request_id in ids]
        server.close_stdin()
        assert server.wait_exit() == 0
    results = [answer["result"] for answer in answers]
    failed = [r["content"][0]["text"] for r in results if r["isError"]]
    assert failed == [], failed
    assert all(r["structuredContent"] == {"result": {"status": 200}} for r in results)
    assert len(service.seen("GET", "/v1/orders/o1")) == CALLS
