"""The operator's verifier behind the real server over Streamable HTTP
(auth.credential presence "provider"; issue 14, item 3): every request is
judged before its body is read; a refused one runs nothing; the credential
headers never reach the MCP layer; no credential value appears in stderr,
a run log, a journal, the ledger or `status`; and the verifier, past its
tripwire, still cannot reach a tool's secret."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil

from staal.protocol.http.endpoint import Endpoint
from staal.protocol.http.messages import Head
from staal.protocol.mcp.dispatch import Dispatcher
from staal.supervisor.auth.guard import Guard
from staal.supervisor.auth.principal import Principal
from staal.supervisor.transport.http_serving import McpApp, settings_for
from tests.helpers.http_servers import HttpServer, modern_headers
from tests.helpers.servers import (
    START_WAIT,
    WAIT,
    Site,
    modern_meta,
    server_env,
    stripe_refund_grant,
    supervisor_command,
)
from tests.helpers.verifiers import new_key, verifier_site
from tests.protocol.test_support import SERVER, descriptor
from tests.supervisor.workers.test_secrets import needs_root, secrets_in_memory, without_ptrace_capability

BODY_MARK = "body-" + new_key()


def files_holding(root: Path, text: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def status_output(site: Site) -> str:
    done = subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "status", str(site.manifest),
                           "--json"], capture_output=True, text=True, timeout=60, check=True)
    return done.stdout + done.stderr


def echo(http: HttpServer, **headers: str):
    return http.modern("tools/call", {"name": "echo", "arguments": {"text": BODY_MARK}},
                       headers=headers)


def reserves(site: Site) -> int:
    return sum(1 for e in site.ledger_events() if e["event"] == "reserve")


def assert_nowhere(site: Site, http: HttpServer, *values: str) -> None:
    """No value in the server's stderr, under its journals (the ledger, each
    journal and run log) or in `status`."""
    stderr, status = site.stderr_path.read_text(), status_output(site)
    for value in values:
        assert value not in stderr
        assert files_holding(site.journals, value) == []
        assert value not in status


def still_verifying(pid: int, site: Site) -> bool:
    """Whether `pid` is still a verifier of this site (not a reused pid)."""
    try:
        return str(site.manifest) in psutil.Process(pid).cmdline()
    except psutil.NoSuchProcess:
        return False


def verifier_of(http: HttpServer) -> psutil.Process:
    (verifier,) = [p for p in psutil.Process(http.process.pid).children()
                   if "staal.worker.processes.verifier" in p.cmdline()]
    return verifier


def test_over_http_a_request_without_the_verifiers_key_is_refused_before_anything_is_read_or_run(
        tmp_path):
    key, wrong = new_key(), new_key()
    site = verifier_site(Site(tmp_path), key)
    with HttpServer(site) as http:
        missing = echo(http)
        refused = echo(http, **{"x-api-key": wrong})
        assert reserves(site) == 0 and site.journal_files() == []  # nothing ran
        admitted = echo(http, **{"x-api-key": key})
        listed = http.modern("tools/list", headers={"x-api-key": key})
        assert http.terminate() == 0
    assert (missing.status_code, missing.json()) == (
        401, {"error": "unauthorized", "error_description": "no API key"})
    # No authorization server issues its credentials: the challenge names where one goes.
    assert missing.headers["www-authenticate"] == 'Staal-Verifier headers="x-api-key x-verifier-mode"'
    assert (refused.status_code, refused.json()) == (
        401, {"error": "invalid_token", "error_description": "unknown API key [redacted]"})
    assert refused.headers["www-authenticate"] == (
        'Staal-Verifier headers="x-api-key x-verifier-mode", error="invalid_token", '
        'error_description="unknown API key [redacted]"')
    assert admitted.json()["result"]["structuredContent"] == {"result": {"echo": BODY_MARK}}
    assert [t["name"] for t in listed.json()["result"]["tools"]] == ["echo", "staal_run_status"]
    assert reserves(site) == 1 and len(site.journal_files()) == 1
    # The verifier saw each head: the method, the path, the named headers; never the body.
    saw = [e["text"] for e in http.stderr.events("verifier_print")]
    assert saw == ["saw POST /mcp  headers,method,path"] + \
        ["saw POST /mcp x-api-key headers,method,path"] * 3
    assert not any(BODY_MARK in line for line in saw)
    assert_nowhere(site, http, key, wrong)


def test_over_http_a_verifier_that_fails_or_hangs_refuses_with_503_runs_nothing_and_is_replaced(
        tmp_path):
    key = new_key()
    site = verifier_site(Site(tmp_path), key, timeout_ms=1000)
    with HttpServer(site) as http:
        first = verifier_of(http).pid
        raised = echo(http, **{"x-api-key": key, "x-verifier-mode": "mode-raise"})
        printed = echo(http, **{"x-api-key": key, "x-verifier-mode": "mode-print"})
        hung = echo(http, **{"x-api-key": key, "x-verifier-mode": "mode-hang"})
        assert reserves(site) == 1 and len(site.journal_files()) == 1  # only the printing one ran
        after = echo(http, **{"x-api-key": key})
        last = verifier_of(http).pid
        assert last != first
        assert http.terminate() == 0
    assert (raised.status_code, raised.json()["error"]) == (503, "temporarily_unavailable")
    assert raised.headers["retry-after"] == "1" and "www-authenticate" not in raised.headers
    assert hung.status_code == 503
    assert printed.status_code == 200 and after.status_code == 200
    assert reserves(site) == 2
    failed = http.stderr.events("verifier_failed")
    assert [f["message"] for f in failed] == [
        "the verifier raised ValueError: cannot check [redacted]",
        "the verifier did not answer within 1000 ms"]
    assert "the key is [redacted]" in [e["text"] for e in http.stderr.events("verifier_print")]
    (killed,) = http.stderr.events("verifier_killed")
    assert killed["pid"] == first
    assert_nowhere(site, http, key)
    # Stopped with the server: no verifier process is left.
    assert not still_verifying(first, site) and not still_verifying(last, site)


def test_a_server_whose_verifier_does_not_load_refuses_to_start_naming_the_program(tmp_path):
    site = verifier_site(Site(tmp_path), new_key(), source="raise RuntimeError('no keys file')\n")
    done = subprocess.run([*supervisor_command(site.manifest), "--http", "127.0.0.1:0"],
                          cwd=site.root, env=server_env(), capture_output=True, text=True,
                          timeout=START_WAIT, check=False)
    assert done.returncode == 2
    assert (f"auth.credential.program: {tmp_path / 'verify.py'}: importing it failed: "
            "RuntimeError: no keys file") in done.stderr
    assert not (site.journals / "server.ledger").exists() or reserves(site) == 0


@needs_root
def test_the_verifier_holds_no_tools_secret_and_past_its_tripwire_cannot_reach_one(tmp_path):
    key = new_key()
    site = verifier_site(Site(tmp_path), key, tools=[
        {"name": "pay", "program": "echo.py", "grants": {}}])
    # A tool granted the secret: its name is in the manifest, its value in the server's environment.
    data = json.loads(site.manifest.read_text())
    data["tools"][1] = {**data["tools"][1], "program": "pays.py",
                        "grants": {"pay": stripe_refund_grant("http://127.0.0.1:9")}}
    site.manifest.write_text(json.dumps(data))
    site.program("pays.py", "from staal.caps import StripeRefund\n\n"
                            "def main(pay: StripeRefund) -> dict:\n    return {}\n")
    secret = {"STRIPE_SECRET_KEY": "sk_test_" + new_key()}
    with HttpServer(site, env=secret, preexec=without_ptrace_capability) as http:
        verifier = verifier_of(http)
        zygote = next(p for p in psutil.Process(http.process.pid).children()
                      if "staal.worker.processes.zygote" in p.cmdline())
        assert secrets_in_memory(http.process.pid, secret) == {"STRIPE_SECRET_KEY"}  # the scan works
        assert secrets_in_memory(verifier.pid, secret) == set()
        assert "STRIPE_SECRET_KEY" not in verifier.environ()
        others = f"{http.process.pid},{zygote.pid}"
        peeked = echo(http, **{"x-api-key": key, "x-verifier-mode": f"mode-peek:{others}"})
        assert http.terminate() == 0
    seen = json.loads(peeked.json()["error_description"])
    # Its environment and its own first block hold no secret; the server's and the
    # zygote's memory are closed to it (not dumpable), and their first environment
    # blocks, which the kernel still lets a process of their user read, hold none.
    assert seen == {"environ": [], "own": [],
                    **{f"{pid}/environ": "read: no secret" for pid in (http.process.pid, zygote.pid)},
                    **{f"{pid}/mem": "PermissionError" for pid in (http.process.pid, zygote.pid)}}
    assert_nowhere(site, http, secret["STRIPE_SECRET_KEY"], key)


# -- the MCP layer never sees a credential header -----------------------------------------


class Admits:
    async def authenticate(self, head: Head) -> Principal:
        return Principal("https://id.example", "ops", None)


class Recording(Endpoint):
    """The real endpoint, remembering each head it is given with a body."""

    heads: list[Head]

    def message(self, head: Head, body: bytes) -> Any:
        self.heads.append(head)
        return super().message(head, body)


def test_an_admitted_requests_credential_headers_are_gone_before_the_mcp_layer_reads_it(tmp_path):
    key = new_key()
    endpoint = Recording(Dispatcher(SERVER, [descriptor(tmp_path)]),
                         settings_for("/mcp", (), None, ("127.0.0.1", 8080)))
    endpoint.heads = []
    manifest = SimpleNamespace(auth=SimpleNamespace(
        issuer=None, audience=None, required_scopes=(),
        credential=SimpleNamespace(headers=("x-api-key",))), callers=None)
    guard = Guard(manifest, Admits(), lambda *_, **__: None)  # type: ignore[arg-type]
    app = McpApp(SimpleNamespace(), {None: endpoint}, guard)  # type: ignore[arg-type]
    params = {"_meta": modern_meta()}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params}).encode()
    headers = {**modern_headers("tools/list", params), "host": "127.0.0.1:8080", "X-Api-Key": key,
               "Authorization": f"Bearer {key}"}
    scope = {"type": "http", "method": "POST", "path": "/mcp", "client": ("127.0.0.1", 5000),
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(asyncio.wait_for(app(scope, receive, send), WAIT))
    assert sent[0]["status"] == 200
    (seen,) = endpoint.heads
    assert "x-api-key" not in seen.headers and "authorization" not in seen.headers
    assert "mcp-method" in seen.headers
    assert key not in repr(seen)


def test_check_refuses_a_manifest_whose_verifier_does_not_load_as_serve_would(tmp_path):
    site = verifier_site(Site(tmp_path), new_key(), source="def check(request):\n    return {}\n")
    done = subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "check", str(site.manifest)],
                          capture_output=True, text=True, timeout=START_WAIT, check=False)
    assert done.returncode == 2
    assert f"auth.credential.entry: {tmp_path / 'verify.py'} has no function 'verify'" in done.stderr
    (tmp_path / "good").mkdir()
    good = verifier_site(Site(tmp_path / "good"), new_key())
    valid = subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "check", str(good.manifest)],
                           capture_output=True, text=True, timeout=START_WAIT, check=False)
    assert valid.returncode == 0, valid.stderr


def test_with_a_verifier_the_server_may_listen_beyond_loopback_and_still_refuses_without_a_key(
        tmp_path):
    site = verifier_site(Site(tmp_path), new_key())
    with HttpServer(site, address="0.0.0.0:0") as http:
        port = http.url.rsplit(":", 1)[1].split("/")[0]
        http.url = f"http://127.0.0.1:{port}/mcp"
        refused = echo(http)
        assert http.terminate() == 0
    assert refused.status_code == 401
    assert site.journal_files() == []
