"""`GET /ready` on a real `serve --http` with `auth` (issue 24 item 5): a
load balancer's check needs no token, no Host the server answers for and
no MCP header, and gets one fixed word, never cached; every MCP request
still needs a token. The check stays at the root of the listening address
when the MCP endpoint is under a path prefix behind a public URL."""

from __future__ import annotations

import signal
import threading

import httpx

from staal.supervisor.store.lockfile import ServerLock
from tests.helpers.authorization import AUDIENCE
from tests.helpers.http_servers import HttpServer
from tests.helpers.pg_cluster import free_port
from tests.helpers.servers import WAIT, Site

GET = """
from staal.caps import HttpGet


def main(url: str, get: HttpGet) -> dict:
    return {"status": get.get(url).status_code}
"""

ECHO = """
def main(text: str) -> dict:
    return {"echo": text}
"""


def auth_site(site: Site, issuer: str, **server: object) -> Site:
    site.program("echo.py", ECHO)
    site.write([{"name": "echo", "program": "echo.py"}], sections={"auth": {"issuer": issuer}},
               **server)
    return site


def test_the_check_needs_no_token_where_every_mcp_request_needs_one(tmp_path, authorization):
    site = auth_site(Site(tmp_path), authorization.issuer,
                     http={"public_url": AUDIENCE})
    token = authorization.token("balancer-test")
    with HttpServer(site) as server, httpx.Client(timeout=WAIT, trust_env=False) as http:
        ready = http.get(server.base + "/ready")
        # Any Host, a credential that is not checked, a HEAD: the same answer.
        elsewhere = http.get(server.base + "/ready", headers={"host": "elsewhere.example"})
        garbage = http.get(server.base + "/ready", headers={"authorization": "Bearer nonsense"})
        headed = http.head(server.base + "/ready")
        posted = http.post(server.base + "/ready", content=b"{}")
        without = server.legacy("ping")
        with_token = server.legacy("ping", headers={"authorization": f"Bearer {token}"})
    assert (ready.status_code, ready.text) == (200, "ready\n")
    assert ready.headers["cache-control"] == "no-store"
    assert ready.headers["content-type"] == "text/plain; charset=utf-8"
    assert [(r.status_code, r.text) for r in (elsewhere, garbage)] == [(200, "ready\n")] * 2
    assert (headed.status_code, headed.content) == (200, b"")
    assert posted.status_code == 405 and posted.headers["allow"] == "GET, HEAD"
    assert without.status_code == 401 and "www-authenticate" in without.headers
    assert with_token.status_code == 200 and with_token.json()["result"] == {}


def test_behind_a_path_prefix_the_check_stays_at_the_root_of_the_listening_address(
        tmp_path, authorization):
    site = auth_site(Site(tmp_path), authorization.issuer,
                     http={"path": "/staal/mcp", "public_url": "https://mcp.example.com/staal/mcp"})
    with HttpServer(site) as server, httpx.Client(timeout=WAIT, trust_env=False) as http:
        root = http.get(server.base.rsplit("/staal", 1)[0] + "/ready")
        prefixed = http.get(server.base + "/ready")
    assert server.url.endswith("/staal/mcp")
    assert (root.status_code, root.text) == (200, "ready\n")
    # Beside the MCP endpoint is not where it is: the MCP layer's 404.
    assert prefixed.status_code == 404 and "no MCP endpoint at /staal/ready" in prefixed.text


def test_while_starting_the_check_is_503_and_an_mcp_request_503_retry_after(
        tmp_path, authorization):
    """Until it serves (here: waiting for the journals' lock another server
    holds), the listening socket answers: not ready, and try again."""
    site = auth_site(Site(tmp_path), authorization.issuer)
    port = free_port()
    with ServerLock.acquire(site.journals, wait_s=0):
        server = HttpServer(site, address=f"127.0.0.1:{port}")
        try:
            server.stderr.wait_event("waiting_for_lock")
            with httpx.Client(timeout=WAIT, trust_env=False) as http:
                check = http.get(f"http://127.0.0.1:{port}/ready")
                call = http.post(f"http://127.0.0.1:{port}/mcp", content=b"{}")
        finally:
            server.stop()
    assert (check.status_code, check.text) == (503, "not ready\n")
    assert check.headers["cache-control"] == "no-store"
    assert call.status_code == 503 and call.headers["retry-after"] == "1"



def test_while_draining_the_check_is_503_until_the_call_in_flight_is_answered(tmp_path, service):
    """After SIGTERM the instance answers its call in flight, and the socket
    answers the balancer's check not ready (not a refused connection)."""
    service.route("GET", "/held")
    held = service.hold("/held")
    site = Site(tmp_path)
    site.program("get.py", GET)
    site.write([{"name": "get", "program": "get.py",
                 "grants": {"get": {"cap": "net.http.get", "only": [service.base + "/**"]}},
                 "net": {"timeout_ms": 120_000, "connect_timeout_ms": 10_000}}])
    answers: list[httpx.Response] = []
    with HttpServer(site) as server, httpx.Client(timeout=WAIT, trust_env=False) as http:
        base = server.base
        params = {"name": "get", "arguments": {"url": service.base + "/held"}}
        calling = threading.Thread(target=lambda: answers.append(server.legacy("tools/call", params)),
                                   daemon=True)
        calling.start()
        try:
            assert held.arrived.wait(WAIT)
            server.process.send_signal(signal.SIGTERM)
            server.stderr.wait_event("readiness", state="draining", ready=False)
            # uvicorn stops listening; the socket's next answers come from
            # the responder (Retry-After), never a refused connection.
            checks = [http.get(base + "/ready")]
            while "retry-after" not in checks[-1].headers and len(checks) < 500:
                checks.append(http.get(base + "/ready"))
            assert calling.is_alive() and not answers  # still held at the service
        finally:
            held.release.set()
        calling.join(WAIT)
        assert server.wait_exit() == 0
    assert {(c.status_code, c.text) for c in checks} == {(503, "not ready\n")}
    assert checks[-1].headers["retry-after"] == "1"
    (answer,) = answers
    assert answer.status_code == 200 and answer.json()["result"]["isError"] is False
