"""Exactly once across kill and resume (DESIGN.md section 5): a `staal run`
process is SIGKILLed with an action in doubt, then resumed; a real local
service records every request it got."""

from __future__ import annotations

import json

import pytest

from tests.helpers.recorder import WAIT, Recorder
from tests.helpers.runs import KILL_AT_INTENT, Workspace

GET_PROGRAM = """
from staal.caps import HttpGet

def main(order: str, get: HttpGet) -> dict:
    answer = get.get(BASE + "/v1/orders/" + order)
    print("looked up", order)
    return {"status": answer.status_code, "order": answer.json()}
"""

POST_PROGRAM = """
from staal.caps import HttpPost

def main(order: str, post: HttpPost) -> dict:
    answer = post.post(BASE + "/v1/refunds", json={"order": order, "amount": 500})
    return {"status": answer.status_code, "refund": answer.json()}
"""


def workspace(tmp_path, service: Recorder, program: str, grants: dict) -> Workspace:
    ws = Workspace(tmp_path)
    ws.program(f"BASE = {service.base!r}\n" + program)
    ws.config(grants=grants, inputs={"order": "o1"})
    return ws


def get_workspace(tmp_path, service):
    service.route("GET", "/v1/orders/o1", 200, {"id": "o1", "total": 500})
    return workspace(tmp_path, service, GET_PROGRAM,
                     {"get": {"cap": "net.http.get", "only": [service.base + "/v1/orders/*"]}})


def post_workspace(tmp_path, service, keyed: bool):
    service.route("POST", "/v1/refunds", 200, {"id": "re_1", "status": "succeeded"})
    grant = {"cap": "net.http.post", "only": [service.base + "/v1/refunds"], "idempotency_key": keyed}
    return workspace(tmp_path, service, POST_PROGRAM, {"post": grant})


def kill_while_service_holds(ws: Workspace, service: Recorder, path: str) -> None:
    """Start a run, wait until the service has its request in hand, SIGKILL
    the run, then let the service answer into the closed connection."""
    hold = service.hold(path)
    process = ws.spawn_run()
    try:
        assert hold.arrived.wait(WAIT), process.communicate(timeout=WAIT)
        process.kill()
        process.wait(timeout=WAIT)
    finally:
        if process.poll() is None:
            process.kill()
        hold.release.set()
    with service.lock:
        del service.holds[path]


def header_run(ws: Workspace) -> str:
    return ws.records("header")[0]["run"]


# -- killed while the service had the request --------------------------------


def test_a_get_in_doubt_after_a_kill_is_sent_again_on_resume(tmp_path, service):
    ws = get_workspace(tmp_path, service)
    kill_while_service_holds(ws, service, "/v1/orders/o1")
    assert [r["type"] for r in ws.journal_lines()] == ["header", "intent"]

    done = ws.resume()
    assert done.code == 0, done.stderr
    assert done.outcome["result"] == {"status": 200, "order": {"id": "o1", "total": 500}}
    assert len(service.seen("GET", "/v1/orders/o1")) == 2
    assert [r["type"] for r in ws.journal_lines()] == ["header", "intent", "outcome", "print", "end"]


def test_a_keyed_post_in_doubt_is_sent_again_with_the_same_key(tmp_path, service):
    ws = post_workspace(tmp_path, service, keyed=True)
    kill_while_service_holds(ws, service, "/v1/refunds")

    done = ws.resume()
    assert done.code == 0, done.stderr
    assert done.outcome["result"]["refund"] == {"id": "re_1", "status": "succeeded"}
    posts = service.seen("POST", "/v1/refunds")
    assert len(posts) == 2
    expected_key = f"{header_run(ws)}-1"
    assert [p.headers["idempotency-key"] for p in posts] == [expected_key, expected_key]
    assert posts[0].body == posts[1].body


def test_an_unkeyed_post_in_doubt_stops_and_waits_for_an_operator(tmp_path, service):
    ws = post_workspace(tmp_path, service, keyed=False)
    kill_while_service_holds(ws, service, "/v1/refunds")

    done = ws.resume()
    assert done.code == 3, done.stderr
    outcome = done.outcome
    assert outcome["outcome"] == "stopped" and outcome["op"] == 1
    assert outcome["run"] == header_run(ws)
    assert "staal resolve --journal" in outcome["message"] and "--op 1" in outcome["message"]
    assert len(service.seen("POST")) == 1
    assert "idempotency-key" not in service.seen("POST")[0].headers

    again = ws.resume()
    assert again.code == 3 and again.outcome["op"] == 1
    assert len(service.seen("POST")) == 1
    assert len(ws.records("stopped")) == 1  # stopping again writes nothing new


def test_resolving_that_it_happened_then_resuming_finishes_without_a_second_request(tmp_path, service):
    ws = post_workspace(tmp_path, service, keyed=False)
    kill_while_service_holds(ws, service, "/v1/refunds")
    assert ws.resume().code == 3

    answer = {"status": 200, "text": json.dumps({"id": "re_9", "status": "succeeded"})}
    resolved = ws.staal("resolve", "--journal", "run.journal", "--op", "1", "--happened", "yes",
                        "--result", json.dumps(answer))
    assert resolved.code == 0, resolved.stderr
    done = ws.resume()
    assert done.code == 0, done.stderr
    assert done.outcome["result"] == {"status": 200, "refund": {"id": "re_9", "status": "succeeded"}}
    assert len(service.seen("POST")) == 1
    assert done.outcome["usage"] == {"post": {"actions": 1, "charged": []}}


def test_a_keyed_post_that_timed_out_is_sent_again_under_its_key_in_the_run_and_done(
        tmp_path, service):
    """Its answer is late (held past net.timeout_ms): the run sends it again
    under the same key, and is done once the service answers; no stop."""
    service.route("POST", "/v1/refunds", 200, {"id": "re_1", "status": "succeeded"})
    grant = {"cap": "net.http.post", "only": [service.base + "/v1/refunds"], "idempotency_key": True}
    ws = Workspace(tmp_path)
    ws.program(f"BASE = {service.base!r}\n" + POST_PROGRAM)
    ws.config(grants={"post": grant}, inputs={"order": "o1"},
              net={"timeout_ms": 1000, "connect_timeout_ms": 1000})
    hold = service.hold("/v1/refunds")
    process = ws.spawn_run()
    try:
        with service.lock:
            sent_again = service.arrived.wait_for(
                lambda: len(service.requests) >= 2 or process.poll() is not None, WAIT)
    finally:
        hold.release.set()
        stdout, stderr = process.communicate(timeout=WAIT)
    assert sent_again and process.returncode == 0, stderr
    assert json.loads(stdout)["result"] == {"status": 200, "refund": {"id": "re_1", "status": "succeeded"}}
    posts = service.seen("POST", "/v1/refunds")
    assert len(posts) >= 2
    assert {p.headers["idempotency-key"] for p in posts} == {f"{header_run(ws)}-1"}
    assert ws.records("stopped") == []


# -- killed right after the intent was durable -------------------------------


def test_killed_after_a_get_intent_the_resume_sends_it_once(tmp_path, service):
    ws = get_workspace(tmp_path, service)
    killed = ws.run(env=KILL_AT_INTENT)
    assert killed.code == -9 and killed.stdout == ""
    assert service.seen() == []

    done = ws.resume()
    assert done.code == 0, done.stderr
    assert len(service.seen("GET")) == 1


def test_killed_after_a_keyed_post_intent_the_resume_sends_it_once_with_its_key(tmp_path, service):
    ws = post_workspace(tmp_path, service, keyed=True)
    assert ws.run(env=KILL_AT_INTENT).code == -9
    assert service.seen() == []

    done = ws.resume()
    assert done.code == 0, done.stderr
    posts = service.seen("POST")
    assert len(posts) == 1 and posts[0].headers["idempotency-key"] == f"{header_run(ws)}-1"


def test_killed_after_an_unkeyed_post_intent_the_run_waits_and_no_answer_means_send_it(tmp_path, service):
    ws = post_workspace(tmp_path, service, keyed=False)
    assert ws.run(env=KILL_AT_INTENT).code == -9
    stopped = ws.resume()
    assert stopped.code == 3
    assert service.seen() == []

    resolved = ws.staal("resolve", "--journal", "run.journal", "--op", "1", "--happened", "no")
    assert resolved.code == 0, resolved.stderr
    assert "staal resume --journal run.journal" in resolved.stdout  # no server: resume it yourself
    done = ws.resume()
    assert done.code == 0, done.stderr
    assert len(service.seen("POST")) == 1


def test_killed_after_an_outcome_the_resume_replays_it_without_a_request(tmp_path, service):
    ws = get_workspace(tmp_path, service)
    killed = ws.run(env={"STAAL_TEST_KILL_POINTS": "1", "STAAL_KILL_AT": "worker:outcome"})
    assert killed.code == -9
    assert len(service.seen()) == 1

    done = ws.resume()
    assert done.code == 0, done.stderr
    assert done.outcome["result"]["order"] == {"id": "o1", "total": 500}
    assert len(service.seen()) == 1
    assert done.outcome["usage"] == {"get": {"actions": 1, "charged": []}}
    # The line printed after the action was not printed before the kill.
    assert [p["text"] for p in ws.records("print")] == ["looked up o1"]


def test_a_keyed_post_in_doubt_for_longer_than_a_day_is_not_sent_again(tmp_path, service):
    ws = post_workspace(tmp_path, service, keyed=True)
    assert ws.run(env=KILL_AT_INTENT).code == -9
    journal = tmp_path / "run.journal"
    lines = journal.read_text().splitlines()
    intent = json.loads(lines[1])
    intent["time"] -= 25 * 3_600_000  # as if the run had been killed a day and an hour ago
    lines[1] = json.dumps(intent, separators=(",", ":"), sort_keys=True)
    journal.write_text("\n".join(lines) + "\n")

    done = ws.resume()
    assert done.code == 3
    assert done.outcome["outcome"] == "stopped" and done.outcome["op"] == 1
    assert service.seen() == []


def test_resolving_an_op_that_is_not_in_doubt_is_refused(tmp_path, service):
    ws = get_workspace(tmp_path, service)
    assert ws.run().code == 0
    refused = ws.staal("resolve", "--journal", "run.journal", "--op", "1", "--happened", "no")
    assert refused.code == 2
    assert len(ws.records("resolved")) == 0


@pytest.mark.parametrize("result", ["not json", '{"status": "200"}', None])
def test_an_answer_that_it_happened_needs_a_result_of_the_actions_shape(tmp_path, service, result):
    ws = post_workspace(tmp_path, service, keyed=False)
    assert ws.run(env=KILL_AT_INTENT).code == -9
    args = ["resolve", "--journal", "run.journal", "--op", "1", "--happened", "yes"]
    if result is not None:
        args += ["--result", result]
    assert ws.staal(*args).code == 2
    assert ws.records("resolved") == []
    assert service.seen() == []


def test_a_killed_run_is_not_killed_again_when_the_kill_point_is_once(tmp_path, service):
    ws = get_workspace(tmp_path, service)
    once = {**KILL_AT_INTENT, "STAAL_KILL_ONCE": str(tmp_path / "killed")}
    assert ws.run(env=once).code == -9
    done = ws.resume(env=once)
    assert done.code == 0, done.stderr
    assert len(service.seen()) == 1
