"""`GET /ready` on a real `serve --http` with `auth` (issue 24 item 5): a
load balancer's check needs no token, no Host the server answers for and
no MCP header, and gets one fixed word, never cached; every MCP request
still needs a token. The check stays at the root of the listening address
when the MCP endpoint is under a path prefix behind a public URL."""

from __future__ import annotations

import httpx

from tests.authorization import AUDIENCE
from tests.http_servers import HttpServer
from tests.servers import WAIT, Site

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
