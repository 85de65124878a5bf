"""Every method under every way a request can name its revision, sent as raw
lines to the real `staal-supervisor serve` process, with the exact answer
each cell must get (issue 7, item 3; seed 000 section 3; DESIGN.md section
9, "The two versions").

Columns, how a request names its revision:

  2025-11-25                  after initialize, a plain request (no _meta)
  2026-07-28                  the full _meta envelope, on a fresh connection
  2026-07-28 after initialize the full envelope once initialize was sent
  unsupported                 an envelope naming 2099-01-01
  envelope names 2025-11-25   an envelope naming the version initialize speaks
  envelope lacks capabilities 2026-07-28 named, clientCapabilities left out
  envelope lacks clientInfo   2026-07-28 named, clientInfo left out (served)
  none before initialize      a plain request on a fresh connection
  none after initialize       after initialize, a _meta without the version

Rows, the methods: initialize, notifications/initialized, ping,
server/discover, tools/list, tools/call, an unknown method and an unknown
notification.

One server process per column is sent every cell's line (each request with
its own id; on a fresh connection initialize goes last, since it changes
what follows), then end of input; it answers everything and exits. A cell
is checked against the table: an error code (and, for -32022, its data),
a result of an exact shape, or no answer at all. 2026-07-28 results carry
resultType, and server/discover and tools/list also ttlMs and cacheScope,
and all of them the serverInfo _meta; 2025-11-25 results carry none of these.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from functools import cache
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
from tests.clients.test_client_typescript import (
    SERVER_NAME,
    TOOL_NAMES,
    server_env,
    supervisor_command,
    write_manifest,
)

UNSUPPORTED = "2099-01-01"
CLIENT = {"name": "matrix", "version": "1.0.0"}
TIMEOUT = 60

METHOD_NOT_FOUND, INVALID_PARAMS = -32601, -32602
UNSUPPORTED_VERSION = -32022


def envelope(version: str) -> dict[str, Any]:
    return {PROTOCOL_VERSION_KEY: version, CLIENT_CAPABILITIES_KEY: {}, CLIENT_INFO_KEY: CLIENT}


@dataclass(frozen=True)
class Column:
    name: str
    initialized: bool  # initialize (2025-11-25) is sent before the cells
    meta: dict[str, Any] | None  # the _meta every cell's request carries


COLUMNS = {c.name: c for c in (
    Column("2025-11-25", True, None),
    Column("2026-07-28", False, envelope(MODERN)),
    Column("2026-07-28 after initialize", True, envelope(MODERN)),
    Column("unsupported", False, envelope(UNSUPPORTED)),
    Column("envelope names 2025-11-25", True, envelope(LEGACY)),
    Column("envelope lacks capabilities", False,
           {k: v for k, v in envelope(MODERN).items() if k != CLIENT_CAPABILITIES_KEY}),
    Column("envelope lacks clientInfo", True,
           {k: v for k, v in envelope(MODERN).items() if k != CLIENT_INFO_KEY}),
    Column("none before initialize", False, None),
    Column("none after initialize", True, {CLIENT_INFO_KEY: CLIENT}),
)}

# The server always serves its runs as resources (issue 16), so it says so.
CAPABILITIES = {"tools": {"listChanged": False},
                "resources": {"subscribe": False, "listChanged": False}}
INITIALIZE_PARAMS = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": CLIENT}
METHODS: dict[str, dict[str, Any]] = {  # each method's params, before the column's _meta
    "initialize": INITIALIZE_PARAMS,
    "notifications/initialized": {},
    "ping": {},
    "server/discover": {},
    "tools/list": {},
    "tools/call": {"name": "echo", "arguments": {"text": "matrix"}},
    "no/such/method": {},
    "notifications/no_such_thing": {},
}


# -- what each cell gets --------------------------------------------------------


@dataclass(frozen=True)
class Error:
    code: int
    requested: str | None = None  # -32022: data.requested, with data.supported the envelope's version


@dataclass(frozen=True)
class Result:
    shape: str  # a key of SHAPES
    revision: str  # LEGACY results carry no modern field; MODERN ones carry them all


NOTHING = None  # a notification: no answer of any kind

HANDSHAKE = Result("handshake", LEGACY)  # initialize is answered as the 2025-11-25 handshake
OLD = {"ping": Result("empty", LEGACY), "server/discover": Error(METHOD_NOT_FOUND),
       "tools/list": Result("tools", LEGACY), "tools/call": Result("call", LEGACY),
       "no/such/method": Error(METHOD_NOT_FOUND)}
NEW = {"ping": Error(METHOD_NOT_FOUND), "server/discover": Result("discover", MODERN),
       "tools/list": Result("tools", MODERN), "tools/call": Result("call", MODERN),
       "no/such/method": Error(METHOD_NOT_FOUND)}


def refused(error: Error) -> dict[str, Error]:
    return dict.fromkeys(OLD, error)


ROWS = {
    "2025-11-25": OLD,
    "2026-07-28": NEW,
    "2026-07-28 after initialize": NEW,
    "unsupported": refused(Error(UNSUPPORTED_VERSION, UNSUPPORTED)),
    "envelope names 2025-11-25": refused(Error(UNSUPPORTED_VERSION, LEGACY)),
    "envelope lacks capabilities": refused(Error(INVALID_PARAMS)),
    # clientInfo is a SHOULD in 2026-07-28: a request without it is served.
    "envelope lacks clientInfo": NEW,
    "none before initialize": refused(Error(INVALID_PARAMS)),
    "none after initialize": OLD,
}
EXPECTED: dict[tuple[str, str], Error | Result | None] = {}
for _column, _row in ROWS.items():
    EXPECTED[("initialize", _column)] = HANDSHAKE
    EXPECTED[("notifications/initialized", _column)] = NOTHING
    EXPECTED[("notifications/no_such_thing", _column)] = NOTHING
    for _method, _answer in _row.items():
        EXPECTED[(_method, _column)] = _answer

assert set(EXPECTED) == {(m, c) for m in METHODS for c in COLUMNS}


# -- running one column ---------------------------------------------------------


def cell_id(method: str) -> str:
    return f"cell:{method}"


def request_line(method: str, column: Column) -> dict[str, Any]:
    params = dict(METHODS[method])
    if column.meta is not None:
        params["_meta"] = column.meta
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if not method.startswith("notifications/"):
        message["id"] = cell_id(method)
    return message


def column_lines(column: Column) -> list[dict[str, Any]]:
    lines = []
    if column.initialized:
        lines += [
            {"jsonrpc": "2.0", "id": "setup", "method": "initialize", "params": INITIALIZE_PARAMS},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
        ]
    # On a fresh connection initialize goes last: it changes what follows.
    for method in sorted(METHODS, key=lambda m: m == "initialize"):
        lines.append(request_line(method, column))
    return lines


@dataclass
class Served:
    sent: list[dict[str, Any]]
    answers: dict[str, dict[str, Any]]  # by request id
    raw: list[bytes]
    stderr: str
    code: int


@cache
def serve_column(name: str, root: Path) -> Served:
    column = COLUMNS[name]
    directory = root / name.replace(" ", "-")
    manifest = write_manifest(directory / "server")
    sent = column_lines(column)
    data = b"".join(json.dumps(line).encode() + b"\n" for line in sent)
    done = subprocess.run([supervisor_command(), "serve", str(manifest)], input=data, check=False,
                          capture_output=True, timeout=TIMEOUT, cwd=manifest.parent,
                          env=server_env(directory / "tmp"))
    raw = done.stdout.splitlines(keepends=True)
    answers: dict[str, dict[str, Any]] = {}
    for line in raw:
        message = json.loads(line)
        assert message["id"] not in answers, f"two answers for {message['id']}"
        answers[message["id"]] = message
    return Served(sent, answers, raw, done.stderr.decode(), done.returncode)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("matrix")


# -- checking a cell ------------------------------------------------------------


def server_info(served: Served) -> dict[str, str]:
    return next(m for m in served.answers.values()
                if "serverInfo" in m.get("result", {}))["result"]["serverInfo"]


def check_shape(shape: str, result: dict[str, Any], info: dict[str, str]) -> set[str]:
    """Checks `result` against `shape`; the keys the shape has in every revision."""
    if shape == "handshake":
        assert result == {"protocolVersion": LEGACY,
                          "capabilities": CAPABILITIES, "serverInfo": info}
        return set(result)
    if shape == "empty":
        assert result == {}
        return set()
    if shape == "discover":
        assert result["supportedVersions"] == [LEGACY, MODERN]
        assert result["capabilities"] == CAPABILITIES
        assert result["serverInfo"] == info
        return {"supportedVersions", "capabilities", "serverInfo"}
    if shape == "tools":
        assert [tool["name"] for tool in result["tools"]] == TOOL_NAMES
        assert result["tools"][0]["inputSchema"]["required"] == ["text"]
        return {"tools"}
    if shape == "call":
        assert result["isError"] is False
        assert result["structuredContent"] == {"result": {"echo": "matrix", "clock_read": True}}
        assert json.loads(result["content"][0]["text"]) == {"echo": "matrix", "clock_read": True}
        return {"content", "structuredContent", "isError"}
    raise AssertionError(f"no shape {shape}")


def check_result(expected: Result, result: dict[str, Any], info: dict[str, str]) -> None:
    keys = check_shape(expected.shape, result, info)
    if expected.revision == LEGACY:
        assert set(result) == keys, "a 2025-11-25 result holds no 2026-07-28 field"
        return
    cached = expected.shape in ("discover", "tools")
    modern = {"resultType", "_meta"} | ({"ttlMs", "cacheScope"} if cached else set())
    assert set(result) == keys | modern
    assert result["resultType"] == "complete"
    assert result["_meta"] == {SERVER_INFO_KEY: info}
    if cached:
        assert isinstance(result["ttlMs"], int) and not isinstance(result["ttlMs"], bool)
        assert result["ttlMs"] >= 0
        assert result["cacheScope"] in ("public", "private")


def check_error(expected: Error, message: dict[str, Any]) -> None:
    assert "result" not in message
    error = message["error"]
    assert error["code"] == expected.code, error
    assert isinstance(error["message"], str) and error["message"]
    if expected.code == UNSUPPORTED_VERSION:
        assert error["data"] == {"supported": [MODERN], "requested": expected.requested}
    else:
        assert "data" not in error


CELLS = [pytest.param(method, column, id=f"{method}@{column.replace(' ', '-')}")
         for method in METHODS for column in COLUMNS]


@pytest.mark.parametrize(("method", "column"), CELLS)
def test_cell(root, method, column):
    served = serve_column(column, root)
    expected = EXPECTED[(method, column)]
    if expected is NOTHING:
        # Exactly one answer per request sent, so none for the notification.
        request_ids = {m["id"] for m in served.sent if "id" in m}
        assert set(served.answers) == request_ids
        return
    message = served.answers[cell_id(method)]
    assert message["jsonrpc"] == "2.0" and set(message) in ({"jsonrpc", "id", "result"},
                                                            {"jsonrpc", "id", "error"})
    if isinstance(expected, Error):
        check_error(expected, message)
    else:
        assert "error" not in message, message["error"]
        check_result(expected, message["result"], server_info(served))


@pytest.mark.parametrize("column", list(COLUMNS), ids=[c.replace(" ", "-") for c in COLUMNS])
def test_every_line_of_a_column_is_one_message_and_the_server_exits_cleanly(root, column):
    served = serve_column(column, root)
    assert served.code == 0, served.stderr
    for line in served.raw:
        assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert all(m["jsonrpc"] == "2.0" for m in served.answers.values())
    if COLUMNS[column].initialized:
        assert served.answers["setup"]["result"]["serverInfo"]["name"] == SERVER_NAME
    # A call the column serves is a run; one it refuses never starts one.
    started = [json.loads(line)["event"] for line in served.stderr.splitlines()
               if line.startswith("{") and '"run_started"' in line]
    serves_calls = isinstance(EXPECTED[("tools/call", column)], Result)
    assert started == (["run_started"] if serves_calls else [])


def test_the_table_holds_every_cell_and_the_revisions_keep_apart():
    assert len(EXPECTED) == len(METHODS) * len(COLUMNS) == 8 * 9
    # Where both revisions serve a method, only the 2026-07-28 column adds fields.
    for method in ("tools/list", "tools/call"):
        modern = EXPECTED[(method, "2026-07-28")]
        assert EXPECTED[(method, "2025-11-25")] == Result(modern.shape, LEGACY)
