"""The protected resource is the URL clients use (issue 24 item 2; RFC 9728
section 3.3, RFC 8707): the 401's `resource_metadata`, the metadata's
`resource` and the `aud` a token must name are `server.http.public_url`, or
the URL `serve --http` listens at. A real client's own discovery from the
401 (the Python SDK's client-credentials provider, against the tests' real
authorization server) finds the metadata and gets a token it accepts; an
`auth.audience` that is not the URL clients use is refused by `check` and
`serve`, naming both keys, with nothing run."""

from __future__ import annotations

import json
import subprocess
import sys

import anyio
import pytest
from mcp import Client
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

from staal.supervisor.store.ledger import read_ledger
from tests.clients.test_oauth_python_sdk import Storage
from tests.helpers.authorization import claims_of
from tests.helpers.http_servers import HttpServer
from tests.helpers.servers import Site, server_env
from tests.processes.test_callers_http import callers_site


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_the_python_sdks_own_discovery_from_the_401_gets_a_token_for_the_url_it_uses(
        tmp_path, service, authorization, mode):
    site = callers_site(tmp_path, service, authorization.issuer)  # no audience: the listening URL
    with HttpServer(site) as http:
        storage = Storage()

        async def session() -> tuple[list[str], object]:
            provider = ClientCredentialsOAuthProvider(http.url, storage, client_id="desk-1",
                                                      client_secret="client-secret-zq9",
                                                      issuer=authorization.issuer)
            transport = streamable_http_client(http.url,
                                               http_client=create_mcp_http_client(auth=provider))
            async with Client(transport, mode=mode) as client:
                listed = await client.list_tools()
                called = await client.call_tool("lookup", {"url": service.base + "/public/1"})
                return [t.name for t in listed.tools], called

        names, called = anyio.run(session)
        http.stderr.wait_event("auth_refused", status=401)  # its first request had no token
    # It asked for the scopes the metadata lists (the SDK's choice): the first
    # profile whose `when` they match chose the tools.
    assert names == ["lookup", "refund", "staal_run_status"]
    assert called.structured_content == {"result": {"status": 200}}
    (entry,) = read_ledger(site.ledger_path).runs()
    assert entry.profile == "support"
    assert len(service.seen("GET", "/public/1")) == 1
    assert storage.tokens is not None
    # The resource it discovered is the URL it used: the SDK asked for it
    # (RFC 8707), and the authorization server wrote it as the token's aud.
    assert claims_of(storage.tokens.access_token)["aud"] == http.url
    granted = authorization.issued()[-1]  # the session's authorization server: its latest
    assert (granted["client_id"], granted["aud"]) == ("desk-1", http.url)


# -- an audience no client can use is refused, naming both keys --------------------------------


def _with_auth(site: Site, **changes: object) -> Site:
    data = json.loads(site.manifest.read_text())
    for key, value in changes.items():
        section, _, name = key.partition("__")
        target = data.setdefault(section, {})
        if section == "server":
            target = target.setdefault("http", {})
        target[name] = value
    site.manifest.write_text(json.dumps(data))
    return site


def check(site: Site) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "check", str(site.manifest)],
                          capture_output=True, text=True, timeout=120, env=server_env(), check=False)


def refused_at_start(site: Site, event: str, address: str = "127.0.0.1:0") -> dict:
    server = HttpServer(site, address=address)
    try:
        assert server.wait_exit() == 2
        # The process has exited; its last line may still be in the pipe.
        refused = server.stderr.wait_event(event)
        assert len(server.stderr.events(event)) == 1
        assert not server.stderr.events("serving_http")  # it never served
    finally:
        server.stop()
    return refused


def assert_nothing_ran(site: Site, service) -> None:
    assert service.requests == []
    assert not site.ledger_path.exists() or read_ledger(site.ledger_path).runs() == ()


def test_an_audience_no_client_can_reach_is_refused_by_check_and_serve_naming_both_keys(
        tmp_path, service, authorization):
    # What the tests' manifests said before: tokens for a URL nothing serves.
    site = _with_auth(callers_site(tmp_path, service, authorization.issuer),
                      auth__audience="https://staal.test/mcp")
    checked = check(site)
    assert checked.returncode == 2
    (problem,) = [line.strip() for line in checked.stderr.splitlines() if "auth.audience" in line]
    assert problem.startswith('auth.audience: "https://staal.test/mcp" cannot be the URL clients '
                              "use: server.http.public_url is not set"), problem
    refused = refused_at_start(site, "manifest_refused")
    assert refused["problems"] == [problem]
    assert_nothing_ran(site, service)


def test_an_audience_other_than_the_public_url_is_refused_by_check_and_serve(tmp_path, service,
                                                                             authorization):
    site = _with_auth(callers_site(tmp_path, service, authorization.issuer),
                      auth__audience="https://tools.example.com/mcp",
                      server__public_url="https://staal.example.com/mcp")
    checked = check(site)
    assert checked.returncode == 2
    assert ('auth.audience: "https://tools.example.com/mcp" is not server.http.public_url '
            '("https://staal.example.com/mcp"), the URL clients use') in checked.stderr
    refused = refused_at_start(site, "manifest_refused")
    assert [p.split(":")[0] for p in refused["problems"]] == ["auth.audience"]
    assert_nothing_ran(site, service)


def test_an_audience_the_server_does_not_listen_at_is_refused_at_serve_naming_both_keys(
        tmp_path, service, authorization):
    site = _with_auth(callers_site(tmp_path, service, authorization.issuer),
                      auth__audience="http://127.0.0.1:9/mcp")
    assert check(site).returncode == 0  # the port it will listen at is serve's to know
    failed = refused_at_start(site, "startup_failed")
    message = failed["message"]
    assert message.startswith("auth.audience 'http://127.0.0.1:9/mcp' is not the URL this server "
                              "listens at (http://127.0.0.1:"), message
    assert "server.http.public_url is not set" in message
    assert_nothing_ran(site, service)


def test_on_every_interface_without_a_public_url_serve_is_refused_naming_it(tmp_path, service,
                                                                            authorization):
    site = callers_site(tmp_path, service, authorization.issuer)
    failed = refused_at_start(site, "startup_failed", address="0.0.0.0:0")
    assert failed["message"].startswith("server.http.public_url is not set and the server listens "
                                        "on every interface (http://0.0.0.0:")
    assert_nothing_ran(site, service)


# -- the rule, in process --------------------------------------------------------------------


def _manifest(tmp_path, audience: str | None = None, public_url: str | None = None):
    from staal.manifest.check import check as check_manifest
    from tests.helpers.manifests import seed_example, write_programs

    write_programs(tmp_path)
    data = seed_example()
    data["auth"] = {"issuer": "https://auth.example.com/",
                    **({"audience": audience} if audience else {})}
    if public_url:
        data["server"]["http"] = {"public_url": public_url}
    return check_manifest(data, tmp_path / "manifest.json")


@pytest.mark.parametrize(("audience", "public_url", "bound", "resource"), [
    (None, None, ("127.0.0.1", 43117), "http://127.0.0.1:43117/mcp"),
    (None, None, ("::1", 43117), "http://[::1]:43117/mcp"),
    (None, None, ("127.0.0.1", 80), "http://127.0.0.1/mcp"),
    ("http://localhost:43117/mcp", None, ("127.0.0.1", 43117), "http://localhost:43117/mcp"),
    ("http://10.0.0.5:8080/mcp", None, ("0.0.0.0", 8080), "http://10.0.0.5:8080/mcp"),
    (None, "https://tools.example.com/mcp", ("127.0.0.1", 43117), "https://tools.example.com/mcp"),
    (None, "https://tools.example.com/mcp", ("0.0.0.0", 8080), "https://tools.example.com/mcp")])
def test_the_resource_is_the_public_url_or_the_audience_naming_the_listening_url_or_that_url(
        tmp_path, audience, public_url, bound, resource):
    from staal.supervisor.auth.guard import resource_of
    from staal.supervisor.auth.resource import with_resource

    served = with_resource(_manifest(tmp_path, audience, public_url), bound)
    assert served.auth.audience == resource
    assert resource_of(served).resource == resource


@pytest.mark.parametrize(("audience", "bound"), [
    ("http://127.0.0.1:8000/mcp", ("127.0.0.1", 43117)),  # another port
    ("http://example.com:43117/mcp", ("127.0.0.1", 43117)),  # a name loopback is not
    (None, ("0.0.0.0", 8080)), (None, ("::", 8080))])  # every interface: no URL known
def test_an_audience_the_socket_does_not_answer_at_or_no_url_at_all_is_refused(tmp_path, audience,
                                                                               bound):
    from staal.supervisor.auth.resource import ResourceRefused, with_resource

    with pytest.raises(ResourceRefused) as refused:
        with_resource(_manifest(tmp_path, audience), bound)
    message = refused.value.message
    assert "server.http.public_url" in message
    assert message.startswith(f"auth.audience {audience!r} is not the URL this server listens at"
                              if audience else "server.http.public_url is not set"), message
