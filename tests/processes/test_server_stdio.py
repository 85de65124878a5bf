"""The real server process, spoken to in raw lines over its stdin and
stdout: both protocol revisions, the errors kept apart by code, the limits
on what crosses the stream, descriptor protection, start-up refusals, and
exiting when stdin closes only after every call in flight is answered."""

from __future__ import annotations

import json
import os
import select
import subprocess
from collections.abc import Iterator

import pytest

from staal.protocol.mcp.revisions import LEGACY, MODERN, SERVER_INFO_KEY
from staal.supervisor.store.ledger import read_ledger
from tests.helpers.recorder import Recorder
from tests.helpers.servers import (
    INITIALIZE_PARAMS,
    SERVER_NAME,
    START_WAIT,
    WAIT,
    RawServer,
    Site,
    Stderr,
    modern_meta,
    run_to_end,
    server_env,
    stripe_refund_grant,
    supervisor_command,
)

ECHO = """
def main(text: str, times: int = 1) -> dict:
    print("echoing", text)
    return {"echo": text * times}
"""

FETCH = """
from staal.caps import HttpGet

def main(url: str, get: HttpGet) -> dict:
    return {"status": get.get(url).status_code}
"""

SEND = """
from staal.caps import HttpPost

def main(url: str, post: HttpPost) -> dict:
    return {"status": post.post(url, json={"sent": True}).status_code}
"""

PRINTS_IN_C = """
from staal.caps import Ffi

def main(libc: Ffi) -> dict:
    print("printed by the program")
    written = libc.printf(b"printed by the C library\\n")
    return {"written": written}
"""

LOOPS = """
from staal.caps import HttpGet

def main(url: str, get: HttpGet) -> dict:
    while True:
        get.get(url)
"""

BIG = """
def main(size: int) -> str:
    return "x" * size
"""

REFUND = """
from staal import Money
from staal.caps import StripeRefund

def main(order: str, amount: Money, pay: StripeRefund) -> dict:
    return pay.refund(order, amount, "requested_by_customer")
"""


@pytest.fixture
def service() -> Iterator[Recorder]:
    recorder = Recorder().start()
    recorder.route("GET", "/slow", 200, {"slow": True})
    recorder.route("GET", "/tick", 200, {"tick": True})
    recorder.route("POST", "/record", 200, {"recorded": True})
    try:
        yield recorder
    finally:
        recorder.stop()


def grant(cap: str, base: str) -> dict:
    return {"cap": cap, "only": [base + "/*"]}


@pytest.fixture
def site(tmp_path, service) -> Site:
    """Tools: echo (no grants), fetch (a network read), send (an unkeyed write)."""
    site = Site(tmp_path)
    site.program("echo.py", ECHO)
    site.program("fetch.py", FETCH)
    site.program("send.py", SEND)
    site.write([
        {"name": "echo", "title": "Echo", "program": "echo.py"},
        {"name": "fetch", "program": "fetch.py",
         "grants": {"get": grant("net.http.get", service.base)}},
        {"name": "send", "program": "send.py",
         "grants": {"post": grant("net.http.post", service.base)}},
    ])
    return site


@pytest.fixture
def server(site) -> Iterator[RawServer]:
    with RawServer(site) as running:
        yield running


def error_code(answer: dict) -> int:
    assert "error" in answer and "result" not in answer, answer
    return answer["error"]["code"]


def no_era_fields(result: dict) -> None:
    for name in ("resultType", "ttlMs", "cacheScope", "_meta"):
        assert name not in result, (name, result)


def every_line_is_a_jsonrpc_message(server: RawServer) -> None:
    for line in server.lines:
        assert line.raw.endswith(b"\n") and b"\n" not in line.raw[:-1]
        assert line.problem is None, f"not JSON on stdout: {line.raw[:200]!r}"
        message = line.message
        assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", line.raw[:200]
        if "method" in message:  # a notification from the server
            assert "id" not in message and isinstance(message.get("params", {}), dict), message
        else:  # an answer: an id and exactly one of result and error
            assert "id" in message and ("result" in message) != ("error" in message), message


def run_of(result: dict) -> str:
    """The run id a call's answer names."""
    structured = result.get("structuredContent") or {}
    if "run" in structured:
        return structured["run"]
    text = result["content"][0]["text"]
    return text.split("run ", 1)[1].split()[0].strip(".,;:")


# -- 2025-11-25 ----------------------------------------------------------------


def test_a_2025_11_25_client_initializes_lists_calls_and_pings(server):
    init = server.initialize()["result"]
    assert init["protocolVersion"] == LEGACY
    assert init["serverInfo"] == {"name": SERVER_NAME, "version": init["serverInfo"]["version"]}
    assert "tools" in init["capabilities"]
    no_era_fields(init)

    listed = server.call("tools/list")["result"]
    no_era_fields(listed)
    assert [tool["name"] for tool in listed["tools"]] == ["echo", "fetch", "send", "staal_run_status"]

    called = server.call_tool("echo", {"text": "hi", "times": 2})
    no_era_fields(called)
    assert called == {"content": [{"type": "text", "text": '{"echo":"hihi"}'}],
                      "structuredContent": {"result": {"echo": "hihi"}}, "isError": False}

    pong = server.call("ping")
    assert pong["result"] == {} and set(pong) == {"jsonrpc", "id", "result"}
    server.close_stdin()
    assert server.wait_exit() == 0
    # notifications/initialized got no answer: one line per request, no more.
    assert len(server.lines) == 4
    every_line_is_a_jsonrpc_message(server)


# -- 2026-07-28 ----------------------------------------------------------------


def test_a_2026_07_28_client_discovers_and_calls_with_the_envelope_and_no_initialize(server):
    discovered = server.call("server/discover", modern=True)["result"]
    assert LEGACY in discovered["supportedVersions"] and MODERN in discovered["supportedVersions"]
    assert discovered["serverInfo"]["name"] == SERVER_NAME
    assert "tools" in discovered["capabilities"]
    assert discovered["resultType"] == "complete"
    assert isinstance(discovered["ttlMs"], int) and discovered["ttlMs"] >= 0
    assert discovered["cacheScope"] in ("public", "private")
    assert discovered["_meta"][SERVER_INFO_KEY]["name"] == SERVER_NAME

    listed = server.call("tools/list", modern=True)["result"]
    assert [tool["name"] for tool in listed["tools"]] == ["echo", "fetch", "send", "staal_run_status"]
    assert listed["resultType"] == "complete" and listed["ttlMs"] >= 0 and "cacheScope" in listed
    assert listed["_meta"][SERVER_INFO_KEY]["name"] == SERVER_NAME

    called = server.call_tool("echo", {"text": "hi"}, modern=True)
    assert called["structuredContent"] == {"result": {"echo": "hi"}}
    assert called["isError"] is False
    assert called["resultType"] == "complete"
    assert called["_meta"][SERVER_INFO_KEY]["name"] == SERVER_NAME

    assert error_code(server.call("ping", modern=True)) == -32601
    every_line_is_a_jsonrpc_message(server)


def test_a_request_without_the_envelope_before_initialize_is_32602_and_served_after_it(server):
    assert error_code(server.call("tools/list")) == -32602
    assert error_code(server.call("tools/call", {"name": "echo", "arguments": {"text": "x"}})) == -32602
    server.initialize()
    assert [t["name"] for t in server.call("tools/list")["result"]["tools"]][-1] == "staal_run_status"


def test_an_envelope_missing_a_field_is_32602(server):
    meta = modern_meta()
    del meta["io.modelcontextprotocol/clientCapabilities"]
    answer = server.call("tools/list", {"_meta": meta})
    assert error_code(answer) == -32602


def test_an_unsupported_protocol_version_is_32022_naming_the_supported_and_requested_ones(server):
    answer = server.call("tools/list", {"_meta": modern_meta("2099-01-01")})
    assert error_code(answer) == -32022
    data = answer["error"]["data"]
    assert data["requested"] == "2099-01-01"
    assert data["supported"] == [MODERN]


def test_both_revisions_are_served_on_one_connection_in_any_order(server):
    assert server.call_tool("echo", {"text": "a"}, modern=True)["resultType"] == "complete"
    server.initialize()
    legacy = server.call_tool("echo", {"text": "a"})
    modern = server.call_tool("echo", {"text": "a"}, modern=True)
    no_era_fields(legacy)
    assert modern["content"] == legacy["content"] and modern["isError"] is legacy["isError"] is False


# -- errors kept apart -----------------------------------------------------------------


def test_a_line_that_is_not_json_is_32700_and_one_that_is_not_jsonrpc_is_32600(server):
    server.send_bytes(b"{not json\n")
    assert error_code(server.next_line().message) == -32700
    server.send({"jsonrpc": "1.0", "id": 7, "method": "tools/list"})
    assert error_code(server.answer(7)) == -32600
    server.send({"jsonrpc": "2.0", "id": 8, "method": 12})
    assert error_code(server.answer(8)) == -32600


@pytest.mark.parametrize("modern", [False, True], ids=["2025-11-25", "2026-07-28"])
def test_an_unknown_method_is_32601(server, modern):
    if not modern:
        server.initialize()
    assert error_code(server.call("prompts/list", modern=modern)) == -32601  # no prompts
    assert error_code(server.call("no/such/method", modern=modern)) == -32601


@pytest.mark.parametrize("modern", [False, True], ids=["2025-11-25", "2026-07-28"])
def test_an_unknown_tool_is_32602_and_nothing_runs(server, site, modern):
    if not modern:
        server.initialize()
    answer = server.call("tools/call", {"name": "no_such_tool", "arguments": {}}, modern=modern)
    assert error_code(answer) == -32602
    answer = server.call("tools/call", {"name": "echo", "arguments": ["not", "an", "object"]},
                         modern=modern)
    assert error_code(answer) == -32602
    server.close_stdin()
    assert server.wait_exit() == 0
    assert site.ledger_events() == []


def test_a_notification_the_server_does_not_use_gets_no_answer(server):
    server.notify("notifications/roots/list_changed")
    server.notify("notifications/whatever", {"x": 1})
    server.initialize()
    server.close_stdin()
    assert server.wait_exit() == 0
    assert len(server.lines) == 1


# -- limits on the stream ------------------------------------------------------------------


def test_a_line_over_4_mib_is_32700_with_a_null_id_and_the_server_goes_on(server):
    huge = (b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"pad":"'
            + b"x" * (4 * 1024 * 1024) + b'"}}\n')
    server.send_bytes(huge)
    refused = server.next_line().message
    assert error_code(refused) == -32700
    assert refused["id"] is None
    server.initialize()
    assert server.call("ping")["result"] == {}


def nested(depth: int) -> dict:
    """A ping whose message is nested `depth` levels deep, the message itself
    being the first level."""
    value: dict = {}
    for _ in range(depth - 3):  # {} is one level; params and the message two more
        value = {"a": value}
    return {"jsonrpc": "2.0", "id": 5, "method": "ping", "params": {"x": value}}


def test_nesting_65_deep_is_32600_and_64_deep_is_served(server):
    server.initialize()
    server.send(nested(65))
    assert error_code(server.next_line().message) == -32600
    server.send(nested(64))
    assert server.answer(5)["result"] == {}


def test_a_batch_is_32600_and_nothing_in_it_runs(server, site, service):
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "send", "arguments": {"url": service.base + "/record"},
                       "_meta": modern_meta()}}
    server.send([call, {**call, "id": 2}])
    refused = server.next_line().message
    assert error_code(refused) == -32600
    assert refused["id"] is None
    # The server goes on: a request after the batch is answered...
    assert server.call("server/discover", modern=True)["result"]["resultType"] == "complete"
    server.close_stdin()
    assert server.wait_exit() == 0
    # ...and nothing in the batch got an answer, reserved, journaled or acted.
    assert [m.get("id") for m in server.messages()] == [None, 1001]
    assert site.ledger_events() == []
    assert site.journal_files() == []
    assert service.seen() == []


def test_a_result_over_1_mib_is_not_sent_and_staal_run_status_still_gives_it(tmp_path):
    site = Site(tmp_path)
    site.program("big.py", BIG)
    site.write([{"name": "big", "program": "big.py"}])
    size = 1024 * 1024
    with RawServer(site) as server:
        server.initialize()
        result = server.call_tool("big", {"size": size})
        assert result["isError"] is True and "structuredContent" not in result
        run = run_of(result)
        assert "too large" in result["content"][0]["text"]
        assert run in result["content"][0]["text"]
        assert len(json.dumps(result)) < 4096
        status = server.call_tool("staal_run_status", {"run": run})
        assert status["structuredContent"] == {"run": run, "status": "done", "result": "x" * size}


# -- the server's own behaviour at the edges of a call --------------------------------------


def test_when_stdin_closes_the_server_answers_every_call_in_flight_then_exits_0(server, site, service):
    slow = service.hold("/slow")
    server.initialize()
    request = server.request("tools/call", {"name": "fetch", "arguments": {"url": service.base + "/slow"}})
    assert slow.arrived.wait(WAIT), server.stderr.text
    server.close_stdin()
    # The run is held by the service: the server cannot have answered, or exited.
    assert server.process.poll() is None
    slow.release.set()
    answer = server.answer(request)
    assert answer["result"]["structuredContent"] == {"result": {"status": 200}}
    assert server.wait_exit() == 0
    [entry] = read_ledger(site.ledger_path).runs()
    assert entry.state == "settled" and entry.outcome == "done"


def test_when_the_client_stops_reading_the_server_lets_runs_end_and_exits(site, service):
    """A write that fails for good (the client is gone: EPIPE) stops the
    reading; the run in flight still ends and is settled; the server exits
    although its stdin is still open."""
    slow = service.hold("/slow")
    stderr = Stderr(site.stderr_path)
    read_end, write_end = os.pipe()
    process = subprocess.Popen(supervisor_command(site.manifest), cwd=site.root, env=server_env(),
                               stdin=subprocess.PIPE, stdout=write_end, stderr=stderr.fd)
    os.close(write_end)
    stderr.spawned()
    try:
        assert process.stdin is not None
        hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE_PARAMS}
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "fetch", "arguments": {"url": service.base + "/slow"}}}
        process.stdin.write((json.dumps(hello) + "\n" + json.dumps(call) + "\n").encode())
        process.stdin.flush()
        ready, _, _ = select.select([read_end], [], [], START_WAIT)
        assert ready and b'"id":1' in os.read(read_end, 65536)
        assert slow.arrived.wait(WAIT), stderr.text
        os.close(read_end)  # the client is gone
        read_end = -1
        slow.release.set()
        assert process.wait(WAIT) == 0, stderr.text
        gone = stderr.wait_event("client_gone")
        assert gone["level"] == "warning"
    finally:
        if read_end >= 0:
            os.close(read_end)
        if process.poll() is None:
            process.kill()
            process.wait(WAIT)
        process.stdin.close()
        stderr.close()
    [entry] = read_ledger(site.ledger_path).runs()
    assert entry.state == "settled" and entry.outcome == "done"
    assert len(service.seen("GET", "/slow")) == 1


def test_a_call_answered_is_already_settled_and_its_files_are_beside_its_journal(server, site):
    server.initialize()
    result = server.call_tool("echo", {"text": "hello"})
    run = server.stderr.wait_event("run_started", tool="echo")["run"]
    assert len(run) == 32 and set(run) <= set("0123456789abcdef")
    # Settled before the answer was written.
    [entry] = read_ledger(site.ledger_path).runs()
    assert (entry.run, entry.state, entry.outcome) == (run, "settled", "done")
    assert result["structuredContent"] == {"result": {"echo": "hello"}}
    folder = site.journals / "echo" / run[:2]
    assert (folder / f"{run}.journal").is_file()
    # The run's log and the removal of its arguments file come with the
    # settle, in its thread, before the answer.
    assert not (folder / f"{run}.inputs.json").exists()
    log = [json.loads(line) for line in (folder / f"{run}.log.jsonl").read_text().splitlines()]
    assert log[-1]["event"] == "ended" and log[-1]["outcome"] == "done"
    server.close_stdin()
    assert server.wait_exit() == 0
    assert {"event": "print", "text": "echoing hello"}.items() <= next(
        r for r in log if r["event"] == "print").items()
    # The print went to stderr (in the log), never to the client.
    assert all("echoing" not in line.raw.decode() for line in server.lines)


def test_a_cancelled_call_whose_run_has_not_started_does_nothing(server, site, service):
    server.initialize()
    call = {"jsonrpc": "2.0", "id": 41, "method": "tools/call",
            "params": {"name": "send", "arguments": {"url": service.base + "/record"}}}
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled",
              "params": {"requestId": 41, "reason": "the user gave up"}}
    # One write: the cancellation is read with the call, before it can reserve.
    server.send_bytes((json.dumps(call) + "\n" + json.dumps(cancel) + "\n").encode())
    assert server.call("ping")["result"] == {}
    server.close_stdin()
    assert server.wait_exit() == 0
    assert [m["id"] for m in server.messages()] == [1001, 1002]
    assert site.ledger_events() == []
    assert site.journal_files() == []
    assert service.seen() == []


@pytest.mark.parametrize("modern", [False, True], ids=["2025-11-25", "2026-07-28"])
def test_a_cancelled_call_whose_run_started_runs_to_its_end_and_gets_no_answer(server, site, service, modern):
    slow = service.hold("/slow")
    if not modern:
        server.initialize()
    request = server.request("tools/call", {"name": "fetch", "arguments": {"url": service.base + "/slow"}},
                             modern=modern)
    assert slow.arrived.wait(WAIT)
    cancel = {"requestId": request, "reason": "timed out"}
    server.notify("notifications/cancelled", {**cancel, "_meta": modern_meta()} if modern else cancel)
    # The server has read the cancellation once it answers what follows it.
    server.call("server/discover" if modern else "ping", modern=modern)
    slow.release.set()
    started = server.stderr.wait_event("run_started", tool="fetch")
    ended = server.stderr.wait_event("run_ended", run=started["run"])
    assert ended["outcome"] == "done", server.stderr.text
    server.close_stdin()
    assert server.wait_exit() == 0, server.stderr.text
    assert [m for m in server.messages() if m.get("id") == request] == [], server.stderr.text
    [entry] = read_ledger(site.ledger_path).runs()
    assert (entry.run, entry.state, entry.outcome) == (started["run"], "settled", "done")
    assert len(service.seen("GET", "/slow")) == 1


@pytest.mark.parametrize("modern", [False, True], ids=["2025-11-25", "2026-07-28"])
def test_progress_follows_each_action_as_it_begins_with_its_op_and_no_argument_value(
        server, service, modern):
    if not modern:
        server.initialize()
    secret_path = "/tick?order=ord_77"
    request = server.request("tools/call", {"name": "fetch", "arguments": {
        "url": service.base + secret_path}, "_meta": {"progressToken": 9}}, modern=modern)
    answer = server.answer(request)
    assert answer["result"]["isError"] is False
    server.close_stdin()
    assert server.wait_exit() == 0
    progress = [m["params"] for m in server.messages()
                if m.get("method") == "notifications/progress"]
    run = server.stderr.events("run_started")[0]["run"]
    assert [(p["progress"], p["message"]) for p in progress] == [
        (0, f"run {run} started"), (1, "op 1: net.http.get get through 'get'")]
    assert all(p["progressToken"] == 9 for p in progress)
    assert "ord_77" not in json.dumps(progress)  # what an action is, never its arguments


@pytest.mark.parametrize("modern", [False, True], ids=["2025-11-25", "2026-07-28"])
def test_a_call_with_a_progress_token_gets_one_progress_notification_naming_its_run(server, modern):
    if not modern:
        server.initialize()
    meta = {"progressToken": "tok-1"}
    request = server.request("tools/call", {"name": "echo", "arguments": {"text": "p"}, "_meta": meta},
                             modern=modern)
    answer = server.answer(request)
    quiet = server.call("tools/call", {"name": "echo", "arguments": {"text": "q"}}, modern=modern)
    assert quiet["result"]["isError"] is False
    server.close_stdin()
    assert server.wait_exit() == 0
    progress = [m for m in server.messages() if m.get("method") == "notifications/progress"]
    assert len(progress) == 1
    [note] = progress
    assert note["params"]["progressToken"] == "tok-1"
    first = server.stderr.wait_event("run_started", tool="echo")["run"]
    assert first in note["params"]["message"]
    # It came before the answer.
    ids = [m.get("id", "progress") for m in server.messages()]
    assert ids.index("progress") < ids.index(request)
    assert answer["result"]["isError"] is False


def test_a_tools_deadline_ends_a_run_that_keeps_acting(tmp_path, service):
    site = Site(tmp_path)
    site.program("loops.py", LOOPS)
    site.write([{"name": "loops", "program": "loops.py", "deadline": "1s",
                 "grants": {"get": grant("net.http.get", service.base)}}])
    with RawServer(site) as server:
        server.initialize()
        result = server.call_tool("loops", {"url": service.base + "/tick"}, timeout=WAIT * 2)
    assert result["isError"] is True
    text = result["content"][0]["text"]
    assert text.startswith("deadline: ") and "1000 ms" in text
    assert len(service.seen("GET", "/tick")) >= 1


# -- descriptor protection ---------------------------------------------------------------------


def test_what_a_program_and_its_c_library_print_reaches_stderr_and_never_stdout(tmp_path):
    site = Site(tmp_path)
    site.program("cprint.py", PRINTS_IN_C)
    site.write([{"name": "cprint", "program": "cprint.py",
                 "grants": {"libc": {"cap": "ffi.c", "library": "libc.so.6"}}}])
    with RawServer(site) as server:
        server.initialize()
        result = server.call_tool("cprint", {})
        assert result["structuredContent"] == {"result": {"written": len("printed by the C library\n")}}
        assert server.call_tool("cprint", {}, modern=True)["isError"] is False
        server.close_stdin()
        assert server.wait_exit() == 0
        stderr = server.stderr.wait_closed()
    every_line_is_a_jsonrpc_message(server)
    assert len(server.lines) == 3
    assert "printed by the program" in stderr
    assert "printed by the C library" in stderr


# -- refusals at start --------------------------------------------------------------------------


def test_a_money_tool_without_once_is_warned_about_at_start_in_the_json_log(tmp_path):
    site = Site(tmp_path)
    site.program("refund.py", REFUND)
    site.program("echo.py", ECHO)
    base = "http://127.0.0.1:9"
    site.write([
        {"name": "refund", "program": "refund.py", "grants": {"pay": stripe_refund_grant(base)}},
        {"name": "echo", "program": "echo.py"},
    ])
    with RawServer(site, env={"STRIPE_SECRET_KEY": "sk_test_never_used_here"}) as server:
        server.initialize()
        server.close_stdin()
        assert server.wait_exit() == 0
        server.stderr.wait_closed()
        lines = server.stderr.lines
    warned = [line for line in lines if "can spend money" in line]
    assert len(warned) == 1, lines
    record = json.loads(warned[0])
    assert record["level"] == "warning" and record["time"] and record["event"]
    assert "'refund'" in json.dumps(record) and "money" in json.dumps(record)
    assert not any("'echo'" in line for line in lines if "warning" in line)


def test_a_manifest_problem_exits_non_zero_before_anything_is_written_to_stdout(tmp_path):
    site = Site(tmp_path)
    site.program("echo.py", ECHO)
    site.write([{"name": "echo", "program": "echo.py", "colour": "blue"}])
    hello = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                        "params": INITIALIZE_PARAMS}).encode() + b"\n"
    code, stdout, stderr = run_to_end(site, hello)
    assert code != 0
    assert stdout == b""
    assert "colour" in stderr
    assert not site.journals.exists()


def test_a_program_with_check_problems_stops_the_server_at_start(tmp_path):
    site = Site(tmp_path)
    site.program("echo.py", ECHO)
    site.program("broken.py", "def main(order):\n    return {}\n")
    site.write([{"name": "echo", "program": "echo.py"},
                {"name": "broken", "program": "broken.py"}])
    hello = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                        "params": INITIALIZE_PARAMS}).encode() + b"\n"
    code, stdout, stderr = run_to_end(site, hello)
    assert code != 0
    assert stdout == b""
    assert "broken" in stderr
    assert site.ledger_events() == []
