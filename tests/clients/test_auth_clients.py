"""The official clients against an `auth` server with a real authorization
server's tokens: the Python SDK with a bearer token in its httpx client's
headers, and the Inspector CLI with `--header`. Then every file and stream
the server wrote is searched for the tokens and the credential header values
sent, none of which may appear anywhere (issue 14 item 6)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

from staal.supervisor.store.ledger import read_ledger
from tests.clients.test_client_inspector import EXIT_OK, INSPECTOR
from tests.clients.test_client_typescript import TIMEOUT, on_node22, require_node_modules, server_env
from tests.helpers.http_servers import HttpServer, sdk_refused_by_status
from tests.processes.test_callers_http import callers_site

MODES = ["auto", "legacy", "2026-07-28"]


@pytest.fixture
def http(tmp_path, service, authorization) -> Iterator[HttpServer]:
    with HttpServer(callers_site(tmp_path, service, authorization.issuer)) as server:
        yield server


def sdk_session(url: str, mode: str, headers: dict[str, str]):
    async def session():
        transport = streamable_http_client(url, http_client=create_mcp_http_client(headers=headers))
        async with Client(transport, mode=mode) as client:
            listed = await client.list_tools()
            called = await client.call_tool("echo", {"text": "from the sdk"})
            return [t.name for t in listed.tools], called
    return anyio.run(session)


@pytest.mark.parametrize("mode", MODES)
def test_the_python_sdk_with_a_bearer_token_lists_and_calls_as_its_caller(http, authorization, mode):
    token = authorization.token("ops-bot", audience=http.url)
    names, called = sdk_session(http.url, mode, {"Authorization": f"Bearer {token}"})
    assert names == ["lookup", "refund", "echo", "staal_run_status"]
    assert called.structured_content == {"result": {"echo": "from the sdk"}}
    (entry,) = read_ledger(http.site.ledger_path).runs()
    assert entry.profile == "ops"


def test_the_python_sdk_without_a_token_is_refused_and_nothing_runs(http):
    with sdk_refused_by_status():
        sdk_session(http.url, "auto", {})
    http.stderr.wait_event("auth_refused", status=401)  # logged as it was refused
    assert read_ledger(http.site.ledger_path).runs() == ()


def inspector(tmp_path: Path, url: str, era: str, *args: str) -> subprocess.CompletedProcess:
    require_node_modules()
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = server_env(tmp_path / "tmp")
    env.update(HOME=str(home), PATH=on_node22(env["PATH"]))
    return subprocess.run([str(INSPECTOR), "--cli", "--protocol-era", era, "--format", "json",
                           "--connect-timeout", "30000", "--transport", "http", "--server-url", url,
                           *args], capture_output=True, text=True, timeout=TIMEOUT, check=False,
                          env=env)


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_the_inspector_cli_with_a_header_lists_and_calls(tmp_path, http, authorization, era):
    header = f"Authorization: Bearer {authorization.token('desk-1', 'support', http.url)}"
    listed = inspector(tmp_path, http.url, era, "--header", header, "--method", "tools/list")
    assert listed.returncode == EXIT_OK, listed.stderr
    names = [tool["name"] for tool in json.loads(listed.stdout)["result"]["tools"]]
    assert names == ["lookup", "refund", "staal_run_status"]
    called = inspector(tmp_path, http.url, era, "--header", header, "--method", "tools/call",
                       "--tool-name", "refund", "--tool-arg", "order=I1")
    assert called.returncode == EXIT_OK, called.stderr
    assert json.loads(called.stdout)["result"]["structuredContent"] == {"result": {"status": 200}}
    refused = inspector(tmp_path, http.url, era, "--method", "tools/list")
    assert refused.returncode != EXIT_OK
    assert len(read_ledger(http.site.ledger_path).runs()) == 1


def everything_written(root: Path) -> str:
    return "\n".join(path.read_bytes().decode("utf-8", "replace")
                     for path in sorted(root.rglob("*")) if path.is_file())


def test_no_token_or_credential_value_appears_in_any_output_or_file(tmp_path, service, http,
                                                                    authorization):
    tokens = [authorization.token("ops-bot", audience=http.url),
              authorization.token("desk-1", "support", http.url)]
    sent = [*tokens, "Basic c3RhYWwtbGVha3MtenE5", "Bearer not.a.jwt-zq9", f"Bearer {tokens[0]}x"]
    for value in sent:
        http.modern("tools/call", {"name": "echo", "arguments": {"text": "t"}},
                    headers={"authorization": value})
    for token in tokens:
        http.modern("tools/call", {"name": "refund", "arguments": {"order": "L1"}},
                    headers={"authorization": f"Bearer {token}"})
    http.modern("tools/call", {"name": "echo", "arguments": {"text": "t"}},
                headers={"authorization": f"Bearer {tokens[0]}"})
    status = subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "status",
                             str(http.site.manifest), "--json"], capture_output=True, text=True,
                            timeout=60, check=False)
    http.stop()
    assert len(read_ledger(http.site.ledger_path).runs()) == 3
    written = everything_written(http.site.root) + status.stdout + status.stderr
    for value in sent:
        secret = value.rpartition(" ")[2]
        for part in (value, secret, *secret.split(".")):
            if len(part) >= 8:
                assert part not in written, f"a credential value is in the server's output: {part[:12]}"
    assert "zq9" not in written
