"""A server for real OAuth clients (issue 24 items 1 and 3): `serve --http`
on a port chosen before the manifest is written, so that `auth.audience` is
the URL it is served at (the resource clients ask tokens for, RFC 8707),
issued for by the tests' authorization server. A token needs the scope
`staal`, and a caller profile is chosen by the scope `reader` (or `admin`):
a token with only one of them is refused 403 and must step up, and a client
told nothing but the 401 asks for `staal reader`, not every scope."""

from __future__ import annotations

from pathlib import Path

from staal.supervisor.store.ledger import read_ledger
from tests.helpers.http_servers import HttpServer
from tests.helpers.pg_cluster import free_port
from tests.helpers.servers import Site

ECHO = """
def main(text: str) -> dict:
    return {"echo": text}
"""
REQUIRED = "staal"
PROFILE = "reader"
# What a token must hold to be admitted, in the order the challenge names them.
ADMITTED = f"{REQUIRED} {PROFILE}"
REDIRECT = "http://127.0.0.1:9/callback"


PROFILES = [{"name": "readers", "when": {"scope": PROFILE}, "tools": {"echo": {}}},
            {"name": "admins", "when": {"scope": "admin"}, "tools": {"echo": {}}}]


def oauth_site(root: Path, issuer: str, callers: list[dict] = PROFILES) -> tuple[Site, str]:
    """The site and the URL it will be served at."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    site = Site(root)
    site.program("echo.py", ECHO)
    site.write([{"name": "echo", "program": "echo.py"}], sections={
        "auth": {"issuer": issuer, "audience": url, "required_scopes": [REQUIRED]},
        "callers": callers})
    return site, url


def serve(site: Site, url: str) -> HttpServer:
    server = HttpServer(site, address=url.split("/")[2]).started()
    assert server.url == url, server.url
    return server


def runs_of(server: HttpServer) -> list[tuple[str, str | None]]:
    """Each run's tool and the caller profile it ran as."""
    return [(entry.tool, entry.profile) for entry in read_ledger(server.site.ledger_path).runs()]
