"""The MCP Inspector CLI against the real `staal-supervisor serve` process,
in each protocol era (issue 7, item 2; /work/shared/CLIENTS.md).

`mcp-inspector --cli --protocol-era <legacy|auto|modern> --format json
COMMAND ARGS --method tools/list` and `--method tools/call --tool-name NAME
--tool-arg key=value` (or `--tool-args-json`), run from the pinned install
in tests/js/node_modules/.bin. The legacy era initializes; auto and modern
probe with server/discover on the same connection (one server process) and
envelope every request after it. A tool result with isError true makes the
CLI exit 5; it checks a tool name against tools/list itself, so an unknown
tool never reaches the server.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from staal.protocol.mcp.revisions import LEGACY, MODERN, PROTOCOL_VERSION_KEY, SERVER_INFO_KEY
from tests.clients.test_client_typescript import (
    INSTALL,
    JS,
    NODE_MODULES,
    SERVER_NAME,
    TIMEOUT,
    TOOL_NAMES,
    event_names,
    lines,
    node,
    on_node22,
    require_node_modules,
    server_env,
    supervisor_command,
    write_manifest,
)

INSPECTOR = NODE_MODULES / ".bin" / "mcp-inspector"
ERAS = ["legacy", "auto", "modern"]
EXIT_OK, EXIT_TOOL_ERROR = 0, 5  # the CLI's EXIT_CODES.OK and .TOOL_ERROR


class Inspector:
    def __init__(self, root: Path) -> None:
        self.manifest = write_manifest(root / "server")
        self.tmp = root / "tmp"
        self.env = server_env(self.tmp)
        self.home = root / "home"  # the CLI may keep a catalog under ~/.mcp-inspector
        self.home.mkdir()
        self.taps = root / "taps"

    def run(self, era: str, *method: str, tap: bool = False) -> tuple[int, Any, str]:
        """The CLI's exit code, its one JSON object (stdout, or the error
        envelope on stderr) and its stderr."""
        require_node_modules()
        assert INSPECTOR.exists(), f"{INSPECTOR} is missing: run `{INSTALL}`"
        server = [supervisor_command(), "serve", str(self.manifest)]
        if tap:
            server = [node(), str(JS / "tap.mjs"), str(self.taps), *server]
        args = [str(INSPECTOR), "--cli", "--protocol-era", era, "--format", "json",
                "--connect-timeout", "30000", "--cwd", str(self.manifest.parent),
                "-e", f"TMPDIR={self.env['TMPDIR']}", *server, *method]
        done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT, check=False,
                              env={**self.env, "HOME": str(self.home),
                                   "PATH": on_node22(self.env["PATH"])})
        out = done.stdout.strip()
        if out:
            assert len(out.splitlines()) == 1, f"one JSON object expected on stdout:\n{out}"
            return done.returncode, json.loads(out), done.stderr
        envelope = [line for line in done.stderr.splitlines() if line.startswith('{"error"')]
        assert envelope, f"exit {done.returncode}, no result and no error envelope:\n{done.stderr}"
        return done.returncode, json.loads(envelope[-1]), done.stderr

    def tapped_lines(self) -> list[dict[str, Any]]:
        (path,) = self.taps.glob("*.jsonl")  # one server process per CLI run, in every era
        return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def inspector(tmp_path: Path) -> Inspector:
    return Inspector(tmp_path)


def check_era_fields(era: str, result: dict[str, Any]) -> None:
    """2026-07-28 results carry the serverInfo _meta; 2025-11-25 ones carry none."""
    if era == "legacy":
        assert "_meta" not in result
    else:
        assert result["_meta"][SERVER_INFO_KEY]["name"] == SERVER_NAME


def test_the_inspector_cli_is_the_pinned_one():
    require_node_modules()
    package = NODE_MODULES / "@modelcontextprotocol" / "inspector" / "package.json"
    installed = json.loads(package.read_text())
    wanted = json.loads((JS / "package.json").read_text())["dependencies"]
    assert installed["version"] == wanted["@modelcontextprotocol/inspector"]
    assert "mcp-inspector" in installed["bin"]


@pytest.mark.parametrize("era", ERAS)
def test_tools_list(inspector, era):
    code, out, stderr = inspector.run(era, "--method", "tools/list")
    assert code == EXIT_OK, stderr
    tools = out["result"]["tools"]
    assert [tool["name"] for tool in tools] == TOOL_NAMES
    assert tools[0]["title"] == "Echo"
    assert tools[0]["inputSchema"]["required"] == ["text"]
    assert tools[0]["annotations"]["readOnlyHint"] is True
    # The server's own stderr (its JSON log) comes through on the CLI's stderr.
    assert "serving" in event_names(stderr)


@pytest.mark.parametrize("era", ERAS)
def test_tools_call(inspector, era):
    code, out, stderr = inspector.run(era, "--method", "tools/call", "--tool-name", "echo",
                                      "--tool-arg", "text=hello")
    assert code == EXIT_OK, stderr
    result = out["result"]
    assert result["isError"] is False
    assert result["structuredContent"] == {"result": {"echo": "hello", "clock_read": True}}
    assert json.loads(result["content"][0]["text"]) == {"echo": "hello", "clock_read": True}
    check_era_fields(era, result)
    assert "run_started" in event_names(stderr)


@pytest.mark.parametrize("era", ERAS)
def test_tools_call_with_json_arguments(inspector, era):
    code, out, stderr = inspector.run(era, "--method", "tools/call", "--tool-name", "echo",
                                      "--tool-args-json", '{"text": "a=b c"}')
    assert code == EXIT_OK, stderr
    assert out["result"]["structuredContent"] == {"result": {"echo": "a=b c", "clock_read": True}}


@pytest.mark.parametrize("era", ERAS)
def test_arguments_the_program_refuses_are_a_tool_error(inspector, era):
    # --tool-arg coerces text=5 to the number 5, which `text: str` refuses.
    code, out, _ = inspector.run(era, "--method", "tools/call", "--tool-name", "echo",
                                 "--tool-arg", "text=5")
    assert code == EXIT_TOOL_ERROR
    assert out["result"]["isError"] is True
    assert out["result"]["content"] == [{"type": "text", "text": "text: expected a string, not 5"}]
    check_era_fields(era, out["result"])


@pytest.mark.parametrize("era", ERAS)
def test_a_refusing_program_is_a_tool_error(inspector, era):
    code, out, stderr = inspector.run(era, "--method", "tools/call", "--tool-name", "refuse",
                                      "--tool-arg", "order=pi_1")
    assert code == EXIT_TOOL_ERROR
    assert out["result"]["isError"] is True
    assert out["result"]["content"][0]["text"] == "validation: refund exceeds what was paid"
    assert "run_ended" in event_names(stderr)


@pytest.mark.parametrize("era", ERAS)
def test_an_unknown_tool_is_refused_by_the_cli_from_the_listing(inspector, era):
    code, out, _ = inspector.run(era, "--method", "tools/call", "--tool-name", "no_such_tool",
                                 "--tool-arg", "x=1", tap=True)
    assert code == EXIT_TOOL_ERROR
    assert out["error"]["code"] == "tool_not_found"
    sent = lines(inspector.tapped_lines(), "in")
    assert [m.get("method") for m in sent if m.get("method") == "tools/call"] == []
    assert "tools/list" in [m.get("method") for m in sent]


@pytest.mark.parametrize("era", ERAS)
def test_what_each_era_sends_on_its_one_connection(inspector, era):
    code, _, stderr = inspector.run(era, "--method", "tools/call", "--tool-name", "echo",
                                    "--tool-arg", "text=hello", tap=True)
    assert code == EXIT_OK, stderr
    log = inspector.tapped_lines()
    sent = lines(log, "in")
    answers = {m["id"]: m for m in lines(log, "out") if "id" in m}
    requests = [m for m in sent if "id" in m]
    if era == "legacy":
        assert [m.get("method") for m in sent[:2]] == ["initialize", "notifications/initialized"]
        assert sent[0]["params"]["protocolVersion"] == LEGACY
        assert answers[sent[0]["id"]]["result"]["protocolVersion"] == LEGACY
        assert all(PROTOCOL_VERSION_KEY not in m.get("params", {}).get("_meta", {}) for m in sent)
        assert all("resultType" not in answer.get("result", {}) for answer in answers.values())
    else:
        # Auto and modern probe on the same connection: discover, then
        # every request enveloped; no initialize.
        assert sent[0]["method"] == "server/discover"
        discovered = answers[sent[0]["id"]]["result"]
        assert discovered["supportedVersions"] == [LEGACY, MODERN]
        assert "initialize" not in [m.get("method") for m in sent]
        for request in requests:
            assert request["params"]["_meta"][PROTOCOL_VERSION_KEY] == MODERN
        assert all(answer["result"]["resultType"] == "complete" for answer in answers.values())
    assert [m["method"] for m in requests][-2:] == ["tools/list", "tools/call"]
    assert log[-1]["event"] == "exit" and log[-1]["code"] == 0


# -- over Streamable HTTP ---------------------------------------------------------------------


@pytest.fixture
def http_server(inspector):
    from tests.helpers.http_servers import HttpServer
    from tests.helpers.servers import Site

    with HttpServer(Site(inspector.manifest.parent)) as server:
        yield server


def run_over_http(inspector: Inspector, url: str, era: str, *method: str) -> tuple[int, Any, str]:
    args = [str(INSPECTOR), "--cli", "--protocol-era", era, "--format", "json",
            "--connect-timeout", "30000", "--transport", "http", "--server-url", url, *method]
    done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT, check=False,
                          env={**inspector.env, "HOME": str(inspector.home)})
    out = done.stdout.strip()
    assert out and len(out.splitlines()) == 1, f"exit {done.returncode}:\n{out}\n{done.stderr}"
    return done.returncode, json.loads(out), done.stderr


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_the_inspector_lists_and_calls_over_http_in_each_era(inspector, http_server, era):
    code, listed, stderr = run_over_http(inspector, http_server.url, era, "--method", "tools/list")
    assert code == EXIT_OK, stderr
    assert [tool["name"] for tool in listed["result"]["tools"]] == TOOL_NAMES
    code, called, stderr = run_over_http(inspector, http_server.url, era, "--method",
                                         "tools/call", "--tool-name", "echo", "--tool-arg",
                                         "text=over http")
    assert code == EXIT_OK, stderr
    result = called["result"]
    assert result["structuredContent"] == {"result": {"echo": "over http", "clock_read": True}}
    check_era_fields(era, result)
    code, refused, _ = run_over_http(inspector, http_server.url, era, "--method", "tools/call",
                                     "--tool-name", "refuse", "--tool-arg", "order=pi_1")
    assert code == EXIT_TOOL_ERROR and refused["result"]["isError"] is True
