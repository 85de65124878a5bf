"""`staal run` end to end: outcomes, usage, the broker's refusals, limits and
confinement, each against a real local service that records every request."""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.helpers.recorder import Recorder
from tests.helpers.runs import Workspace

LOOKUP = """
from staal.caps import HttpGet

def main(order: str, get: HttpGet) -> dict:
    answer = get.get(BASE + "/v1/orders/" + order)
    return {"status": answer.status_code, "order": answer.json()}
"""


def lookup(tmp_path, service: Recorder, program: str = LOOKUP, **grant) -> Workspace:
    service.route("GET", "/v1/orders/o1", 200, {"id": "o1"})
    ws = Workspace(tmp_path)
    ws.program(f"BASE = {service.base!r}\n" + program)
    ws.config(grants={"get": {"cap": "net.http.get", "only": [service.base + "/v1/orders/*"], **grant}},
              inputs={"order": "o1"})
    return ws


# -- outcomes -----------------------------------------------------------------


def test_a_run_that_returns_is_done_with_its_result_and_usage(tmp_path, service):
    done = lookup(tmp_path, service).run()
    assert done.code == 0, done.stderr
    assert done.outcome["outcome"] == "done"
    assert done.outcome["result"] == {"status": 200, "order": {"id": "o1"}}
    assert done.outcome["usage"] == {"get": {"actions": 1, "charged": []}}
    assert len(done.outcome["run"]) == 32


def test_the_journal_records_header_intent_outcome_and_end(tmp_path, service):
    ws = lookup(tmp_path, service)
    done = ws.run()
    kinds = [r["type"] for r in ws.journal_lines()]
    assert kinds == ["header", "intent", "outcome", "end"]
    header = ws.records("header")[0]
    assert header["run"] == done.outcome["run"]
    assert header["runtime"].startswith("staal ")
    assert len(header["program_sha256"]) == 64 and len(header["config_sha256"]) == 64
    assert ws.records("intent")[0]["cap"] == "net.http.get"
    assert os.stat(tmp_path / "run.journal").st_mode & 0o777 == 0o600


def test_fail_ends_the_run_as_failed_with_its_kind(tmp_path, service):
    ws = lookup(tmp_path, service, program="""
from staal import fail
from staal.caps import HttpGet

def main(order: str, get: HttpGet) -> dict:
    try:
        fail("validation", "order o1 is closed")
    except Exception:
        return {"swallowed": True}
""")
    done = ws.run()
    assert done.code == 1
    assert done.outcome["failure"] == {"kind": "validation", "message": "order o1 is closed"}
    assert service.seen() == []


def test_an_exception_that_escapes_fails_the_run_as_value(tmp_path, service):
    ws = lookup(tmp_path, service, program="""
from staal.caps import HttpGet

def main(order: str, get: HttpGet) -> dict:
    return {"n": int(order)}
""")
    done = ws.run()
    assert done.code == 1
    assert done.outcome["failure"]["kind"] == "value"
    assert done.outcome["failure"]["message"].startswith("ValueError: ")
    assert ws.records("end")[0]["outcome"] == "failed"


def test_an_action_that_fails_fails_the_run_as_action_unless_handled(tmp_path, service):
    ws = lookup(tmp_path, service, program="""
from staal import ActionFailed
from staal.caps import HttpGet

def main(order: str, get: HttpGet) -> dict:
    try:
        get.get("http://127.0.0.1:9/v1/orders/" + order)
    except ActionFailed as exc:
        return {"handled": str(exc)[:40]}
    return {}
""")
    ws.config(grants={"get": {"cap": "net.http.get", "only": ["http://127.0.0.1:9/v1/orders/*"]}},
              inputs={"order": "o1"})
    done = ws.run()
    assert done.code == 0, done.stderr
    assert done.outcome["result"]["handled"].startswith("GET http://127.0.0.1:9/v1/orders/o1")
    assert ws.records("outcome")[0]["ok"] is False


def test_a_result_with_no_json_form_fails_as_value(tmp_path, service):
    ws = lookup(tmp_path, service, program="""
from staal.caps import HttpGet

def main(order: str, get: HttpGet) -> dict:
    return {"when": object()}
""")
    done = ws.run()
    assert done.outcome["failure"]["kind"] == "value"


def test_money_in_a_result_is_written_as_the_runtime_writes_it(tmp_path, service):
    ws = lookup(tmp_path, service, program="""
from staal import Money
from staal.caps import HttpGet

def main(order: str, get: HttpGet) -> dict:
    return {"total": Money("35", "USD") + Money("0.5", "USD")}
""")
    assert ws.run().outcome["result"] == {"total": {"amount": "35.50", "currency": "USD"}}


# -- inputs and configs --------------------------------------------------------


def test_refused_inputs_are_an_error_naming_the_argument_and_nothing_runs(tmp_path, service):
    ws = lookup(tmp_path, service)
    ws.config(grants={"get": {"cap": "net.http.get", "only": [service.base + "/**"]}},
              inputs={"order": 5, "get": "x", "extra": 1})
    done = ws.run()
    assert done.code == 2
    assert done.outcome["outcome"] == "error"
    assert done.outcome["failure"]["kind"] == "input"
    message = done.outcome["failure"]["message"]
    for name in ("order", "get", "extra"):
        assert f"{name}:" in message
    assert not (tmp_path / "run.journal").exists()
    assert service.seen() == []


def test_defaults_are_filled_in(tmp_path, service):
    ws = lookup(tmp_path, service, program="""
from staal.caps import HttpGet

def main(order: str, get: HttpGet, reason: str = "requested_by_customer", times: int = 2) -> dict:
    return {"reason": reason, "times": times}
""")
    assert ws.run().outcome["result"] == {"reason": "requested_by_customer", "times": 2}


def test_a_bad_config_is_an_error_with_its_key_path(tmp_path, service):
    ws = lookup(tmp_path, service)
    ws.config(grants={"get": {"cap": "net.http.get", "only": ["ftp://x"]}}, inputs={"order": "o1"})
    done = ws.run()
    assert done.code == 2 and done.outcome["failure"]["kind"] == "config"
    assert "grants.get.only[0]" in done.outcome["failure"]["message"]
    assert service.seen() == []


def test_a_program_whose_grants_do_not_fit_is_an_error(tmp_path, service):
    ws = lookup(tmp_path, service)
    ws.config(grants={"got": {"cap": "net.http.get", "only": [service.base + "/**"]}},
              inputs={"order": "o1"})
    done = ws.run()
    assert done.outcome["failure"]["kind"] == "config"
    message = done.outcome["failure"]["message"]
    assert "get:" in message and "grants.got:" in message


def test_a_new_run_refuses_an_existing_journal(tmp_path, service):
    ws = lookup(tmp_path, service)
    assert ws.run().code == 0
    again = ws.run()
    assert again.code == 2
    assert len(service.seen()) == 1


# -- the broker ------------------------------------------------------------------


def test_a_url_outside_only_is_refused_and_the_service_sees_nothing(tmp_path, service):
    ws = lookup(tmp_path, service, program="""
from staal.caps import HttpGet

def main(order: str, get: HttpGet) -> dict:
    return {"status": get.get(BASE + "/admin/users").status_code}
""")
    done = ws.run()
    assert done.code == 1
    assert done.outcome["failure"]["kind"] == "capability"
    assert done.outcome["failure"]["message"] == (
        f"'net.http.get' does not allow {service.base}/admin/users; "
        f"it allows {service.base}/v1/orders/*")
    assert service.seen() == []
    assert ws.records("intent") == []


def test_uses_bounds_actions_per_run(tmp_path, service):
    ws = lookup(tmp_path, service, program="""
from staal.caps import HttpGet

def main(order: str, get: HttpGet) -> dict:
    get.get(BASE + "/v1/orders/" + order)
    get.get(BASE + "/v1/orders/" + order)
    return {}
""", uses=1)
    done = ws.run()
    assert done.outcome["failure"] == {
        "kind": "capability", "message": "'net.http.get' allows 1 action per run; this would be action 2"}
    assert len(service.seen()) == 1
    assert done.outcome["usage"] == {"get": {"actions": 1, "charged": []}}


def test_a_refusal_fails_the_run_even_if_the_program_catches_it(tmp_path, service):
    ws = lookup(tmp_path, service, program="""
from staal.caps import HttpGet

def main(order: str, get: HttpGet) -> dict:
    try:
        get.get("http://127.0.0.1:9/elsewhere")
    except BaseException:
        pass
    return {"pretended": "fine"}
""")
    done = ws.run()
    assert done.outcome["outcome"] == "failed" and done.outcome["failure"]["kind"] == "capability"


def test_narrowing_in_code_tightens_and_never_widens(tmp_path, service):
    ws = lookup(tmp_path, service, program="""
from staal.caps import HttpGet

def main(order: str, get: HttpGet) -> dict:
    once = get.narrow(uses=1)
    once.get(BASE + "/v1/orders/" + order)
    once.get(BASE + "/v1/orders/" + order)
    return {}
""", uses=5)
    done = ws.run()
    assert done.outcome["failure"]["message"] == (
        "'net.http.get' allows 1 action per run; this would be action 2")
    assert len(service.seen()) == 1


def test_a_keyed_post_carries_the_run_id_and_op_as_its_idempotency_key(tmp_path, service):
    service.route("POST", "/v1/items", 201, {"id": "i1"})
    ws = Workspace(tmp_path)
    ws.program(f"BASE = {service.base!r}\n" + """
from staal.caps import HttpPost, Clock

def main(clock: Clock, post: HttpPost) -> dict:
    clock.now()
    return {"status": post.post(BASE + "/v1/items", data={"name": "x"}).status_code}
""")
    ws.config(grants={"post": {"cap": "net.http.post", "only": [service.base + "/v1/items"],
                               "idempotency_key": True},
                      "clock": {"cap": "clock.now"}})
    done = ws.run()
    assert done.outcome["result"] == {"status": 201}
    (request,) = service.seen("POST")
    assert request.headers["idempotency-key"] == f"{done.outcome['run']}-2"
    assert request.body == b"name=x"


def test_a_program_may_not_set_the_idempotency_key_itself(tmp_path, service):
    ws = Workspace(tmp_path)
    ws.program(f"BASE = {service.base!r}\n" + """
from staal.caps import HttpPost

def main(post: HttpPost) -> dict:
    post.post(BASE + "/v1/items", json={}, headers={"Idempotency-Key": "mine"})
    return {}
""")
    ws.config(grants={"post": {"cap": "net.http.post", "only": [service.base + "/v1/items"],
                               "idempotency_key": True}})
    assert ws.run().outcome["failure"]["kind"] == "capability"
    assert service.seen() == []


# -- prints, values ---------------------------------------------------------------


def test_printed_lines_go_to_stderr_and_the_journal_never_stdout(tmp_path, service):
    ws = lookup(tmp_path, service, program="""
import sys
from staal.caps import HttpGet

def main(order: str, get: HttpGet) -> dict:
    print("first")
    print("second", "line", end="")
    sys.stdout.write("\\nthird\\n")
    return {}
""")
    done = ws.run()
    assert json.loads(done.stdout)["outcome"] == "done"
    assert done.stderr.splitlines()[-3:] == ["first", "second line", "third"]
    assert [(p["seq"], p["text"]) for p in ws.records("print")] == [
        (1, "first"), (2, "second line"), (3, "third")]


def test_clock_and_random_values_are_journaled(tmp_path, service):
    ws = Workspace(tmp_path)
    ws.program("""
from staal.caps import Clock, Random

def main(clock: Clock, rnd: Random) -> dict:
    return {"now": clock.now(), "bytes": rnd.bytes(8).hex()}
""")
    ws.config(grants={"clock": {"cap": "clock.now", "uses": 1}, "rnd": {"cap": "random.bytes"}})
    done = ws.run()
    values = ws.records("value")
    assert [v["cap"] for v in values] == ["clock.now", "random.bytes"]
    assert done.outcome["result"] == {"now": values[0]["value"], "bytes": values[1]["value"]}
    assert len(bytes.fromhex(values[1]["value"])) == 8


# -- limits --------------------------------------------------------------------------


def test_past_the_deadline_no_new_action_starts(tmp_path, service):
    ws = lookup(tmp_path, service, program="""
from staal.caps import HttpGet

def main(order: str, get: HttpGet) -> dict:
    for _ in range(3):
        get.get(BASE + "/v1/orders/" + order)
    return {}
""")
    ws.config(grants={"get": {"cap": "net.http.get", "only": [service.base + "/v1/orders/*"]}},
              inputs={"order": "o1"}, limits={"deadline_ms": 1})
    done = ws.run()
    assert done.outcome["failure"]["kind"] == "deadline"
    intents, outcomes = ws.records("intent"), ws.records("outcome")
    assert len(intents) == len(outcomes) == len(service.seen()) < 3  # nothing cut in half


def test_a_resumed_run_past_its_deadline_replays_then_fails_before_the_next_action(tmp_path, service):
    ws = lookup(tmp_path, service, program="""
from staal.caps import HttpGet

def main(order: str, get: HttpGet) -> dict:
    get.get(BASE + "/v1/orders/" + order)
    get.get(BASE + "/v1/orders/" + order)
    return {}
""")
    ws.config(grants={"get": {"cap": "net.http.get", "only": [service.base + "/v1/orders/*"]}},
              inputs={"order": "o1"}, limits={"deadline_ms": 1000})
    killed = ws.run(env={"STAAL_TEST_KILL_POINTS": "1", "STAAL_KILL_AT": "worker:outcome"})
    assert killed.code == -9
    journal = tmp_path / "run.journal"
    lines = journal.read_text().splitlines()
    header = json.loads(lines[0])
    header["time"] -= 5_000  # the run began long enough ago for its deadline to be past
    lines[0] = json.dumps(header, separators=(",", ":"), sort_keys=True)
    journal.write_text("\n".join(lines) + "\n")
    done = ws.resume()
    assert done.outcome["failure"]["kind"] == "deadline"
    assert len(service.seen()) == 1
    assert done.outcome["usage"] == {"get": {"actions": 1, "charged": []}}


def test_max_steps_fails_a_long_computation_as_budget(tmp_path, service):
    ws = Workspace(tmp_path)
    ws.program("""
def main(n: int) -> int:
    total = 0
    for i in range(n):
        total += i
    return total
""")
    ws.config(inputs={"n": 1_000_000}, limits={"max_steps": 1000})
    done = ws.run()
    assert done.outcome["failure"]["kind"] == "budget"
    ws.config(inputs={"n": 10}, limits={"max_steps": 1000}, name="small.json")
    assert ws.run("small.json", journal="small.journal").outcome["result"] == 45


def test_work_inside_c_code_is_bounded_by_cpu_time(tmp_path):
    ws = Workspace(tmp_path)
    ws.program("""
import hashlib

def main(rounds: int) -> str:
    data = b"x" * (64 * 1024 * 1024)
    digest = b""
    for _ in range(rounds):
        digest = hashlib.sha256(data + digest).digest()
    return digest.hex()
""")
    ws.config(inputs={"rounds": 1_000_000}, limits={"cpu_ms": 500, "max_steps": 10**9})
    done = ws.run()
    # Either the CPU timer failed the run as budget, or RLIMIT_CPU's soft
    # limit ended a process stuck inside one C call with SIGXCPU (never
    # SIGKILL, which only a kill from outside is); it never runs to the end.
    if done.code == -signal.SIGXCPU:
        assert done.stdout == ""
    else:
        assert done.outcome["failure"]["kind"] == "budget"


# -- confinement -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, mentions",
    [
        ("import subprocess; subprocess.run(['true'])", "process"),
        ("import os; os.system('true')", "process"),
        ("open(OUT, 'w').write('x')", "write"),
        ("import ctypes; ctypes.CDLL('libc.so.6')", "native code"),
        ("import socket; socket.socket().connect(('127.0.0.1', PORT))", "connect"),
        ("import socket; socket.create_connection(('localhost', PORT))", "host names"),
        ("import sys; sys.stdin.read()", "standard input"),
        ("import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()", ""),
    ],
)
def test_reaching_out_around_the_broker_fails_the_run_as_capability(tmp_path, service, body, mentions):
    ws = Workspace(tmp_path)
    port = service.server.server_address[1]
    ws.program(f"OUT = {str(tmp_path / 'written')!r}\nPORT = {port}\n"
               f"def main() -> dict:\n    {body}\n    return {{}}\n")
    ws.config()
    done = ws.run()
    assert done.code == 1, done.stderr
    failure = done.outcome["failure"]
    assert failure["kind"] == "capability"
    assert mentions in failure["message"].lower()
    assert not (tmp_path / "written").exists()
    assert service.seen() == []


def test_the_program_sees_none_of_the_environment(tmp_path):
    ws = Workspace(tmp_path)
    ws.program("""
import os

def main() -> dict:
    return {"names": sorted(os.environ)}
""")
    ws.config()
    done = ws.run(env={"STAAL_TEST_SECRET": "hunter2-never-seen"})
    assert "STAAL_TEST_SECRET" not in done.outcome["result"]["names"]
    assert set(done.outcome["result"]["names"]) <= {"PATH"}
    assert "hunter2" not in (tmp_path / "run.journal").read_text()


# -- journals that changed -------------------------------------------------------------


def _interrupted(tmp_path, service) -> Workspace:
    ws = lookup(tmp_path, service)
    assert ws.run(env={"STAAL_TEST_KILL_POINTS": "1", "STAAL_KILL_AT": "worker:intent"}).code == -9
    return ws


def test_a_changed_program_refuses_to_resume_saying_so(tmp_path, service):
    ws = _interrupted(tmp_path, service)
    (tmp_path / "prog.py").write_text((tmp_path / "prog.py").read_text() + "\n# edited\n")
    done = ws.resume()
    assert done.code == 2
    assert "the program" in done.outcome["failure"]["message"]
    assert service.seen() == []


def test_a_changed_config_refuses_to_resume_saying_so(tmp_path, service):
    ws = _interrupted(tmp_path, service)
    ws.config(grants={"get": {"cap": "net.http.get", "only": [service.base + "/**"]}},
              inputs={"order": "o1"})
    done = ws.resume()
    assert done.code == 2 and "the config" in done.outcome["failure"]["message"]
    assert service.seen() == []


def test_a_changed_runtime_refuses_to_resume_saying_so(tmp_path, service):
    ws = _interrupted(tmp_path, service)
    journal = tmp_path / "run.journal"
    lines = journal.read_text().splitlines()
    header = json.loads(lines[0])
    header["runtime"] = "staal 0.0.1"
    lines[0] = json.dumps(header, separators=(",", ":"), sort_keys=True)
    journal.write_text("\n".join(lines) + "\n")
    done = ws.resume()
    assert done.code == 2 and "the runtime" in done.outcome["failure"]["message"]
    assert service.seen() == []


def test_a_resumed_program_that_acts_differently_stops_naming_the_op(tmp_path, service):
    # The same program, reading a data file that changed while the run was
    # interrupted: not deterministic between actions, which the journal catches.
    ws = lookup(tmp_path, service, program="""
from staal.caps import HttpGet

def main(order: str, get: HttpGet) -> dict:
    suffix = open(SUFFIX).read().strip()
    return {"status": get.get(BASE + "/v1/orders/" + order + suffix).status_code}
""".replace("SUFFIX", repr(str(tmp_path / "suffix.txt"))))
    (tmp_path / "suffix.txt").write_text("")
    assert ws.run(env={"STAAL_TEST_KILL_POINTS": "1", "STAAL_KILL_AT": "worker:intent"}).code == -9
    (tmp_path / "suffix.txt").write_text("-other")
    done = ws.resume()
    assert done.code == 3
    assert done.outcome["op"] == 1
    assert done.outcome["message"].startswith("journal mismatch at op 1: ")
    assert service.seen() == []


def test_a_resume_of_an_ended_run_prints_its_outcome_and_does_nothing(tmp_path, service):
    ws = lookup(tmp_path, service)
    first = ws.run()
    again = ws.resume()
    assert again.outcome == first.outcome
    assert len(service.seen()) == 1


def test_journal_show_prints_the_story(tmp_path, service):
    ws = lookup(tmp_path, service)
    run = ws.run().outcome["run"]
    shown = ws.staal("journal", "show", "run.journal")
    assert shown.code == 0
    assert f"run {run}" in shown.stdout
    assert "net.http.get get through 'get'" in shown.stdout
    assert "END" in shown.stdout and "done" in shown.stdout


# -- a service that never answers -------------------------------------------------


def test_a_get_to_a_service_that_never_answers_fails_within_its_timeout(tmp_path, service):
    ws = lookup(tmp_path, service)
    ws.config(grants={"get": {"cap": "net.http.get", "only": [service.base + "/v1/orders/*"]}},
              inputs={"order": "o1"}, net={"timeout_ms": 300, "connect_timeout_ms": 1000})
    service.hold("/v1/orders/o1")
    done = ws.run()
    assert done.code == 1
    assert done.outcome["failure"]["kind"] == "action"
    assert "ReadTimeout" in done.outcome["failure"]["message"]
    assert len(service.seen()) == 1


def test_a_post_whose_answer_never_comes_is_in_doubt_and_the_run_stops(tmp_path, service):
    ws = Workspace(tmp_path)
    ws.program(f"BASE = {service.base!r}\n" + """
from staal.caps import HttpPost

def main(post: HttpPost) -> dict:
    return {"status": post.post(BASE + "/v1/refunds", json={"amount": 5}).status_code}
""")
    ws.config(grants={"post": {"cap": "net.http.post", "only": [service.base + "/v1/refunds"]}},
              net={"timeout_ms": 300, "connect_timeout_ms": 1000})
    service.hold("/v1/refunds")
    done = ws.run()
    assert done.code == 3
    assert done.outcome["outcome"] == "stopped" and done.outcome["op"] == 1
    assert "may or may not have happened" in done.outcome["message"]
    assert len(service.seen()) == 1
    assert ws.records("end") == []


def test_an_object_inside_a_json_input_of_a_run_config_is_an_input_like_any(tmp_path):
    ws = Workspace(tmp_path)
    ws.program("""
from staal import Json

def main(extra: Json) -> dict:
    return {"got": extra}
""")
    ws.config(inputs={"extra": {"order": {"id": "o1", "lines": [{"n": 2}]}}})
    done = ws.run()
    assert done.code == 0, done.stderr
    assert done.outcome["result"] == {"got": {"order": {"id": "o1", "lines": [{"n": 2}]}}}


@pytest.mark.parametrize("body, says", [
    ('json={"amount": Money("5", "USD")}', "post(json=...) takes a JSON value"),
    ('data={"n": 1}', "post(data=...) takes a mapping of strings to strings"),
])
def test_a_post_body_that_cannot_be_sent_fails_the_program_and_nothing_is_in_doubt(
        tmp_path, service, body, says):
    ws = Workspace(tmp_path)
    ws.program(f"BASE = {service.base!r}\n" + f"""
from staal import Money
from staal.caps import HttpPost

def main(post: HttpPost) -> dict:
    return {{"status": post.post(BASE + "/v1/items", {body}).status_code}}
""")
    ws.config(grants={"post": {"cap": "net.http.post", "only": [service.base + "/v1/items"]}})
    done = ws.run()
    assert done.code == 1, done.stdout
    assert done.outcome["failure"]["kind"] == "value"
    assert done.outcome["failure"]["message"].startswith(f"TypeError: {says}")
    assert ws.records("intent") == [] and ws.records("stopped") == []
    assert service.seen() == []
