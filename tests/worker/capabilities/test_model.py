"""`model.complete` against a fake Anthropic Messages API running as its own
process (tests/helpers/fake_model.py): end to end through `staal run` and `staal
resume`, and the retry loop in this process with the waits observed instead
of waited."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from staal.journal.records import Header
from staal.journal.writer import JournalWriter
from staal.manifest.catalogue import CATALOGUE
from staal.manifest.model import Grant, ModelConfig, SecretRef
from staal.records.runconfig import RunConfig
from staal.runtime.clock import FixedClock
from staal.worker.capabilities import implementation
from staal.worker.capabilities.model import (
    ANTHROPIC_VERSION,
    MAX_TOKENS,
    MAX_WAIT_S,
    AnthropicProvider,
    ModelCapability,
)
from staal.worker.capabilities.services import Services
from staal.worker.runs.broker import GrantState
from staal.worker.runs.engine import RunContext
from tests.helpers.fake_model import FakeModel, running_fake_model
from tests.helpers.runs import Workspace

KEY = "sk-ant-test-3f9c2e7a1b5d4c6e8f0a-never-printed"
MODEL = "claude-test-1"
ENV = {"ANTHROPIC_API_KEY": KEY}
KILL_AT_OUTCOME = {"STAAL_TEST_KILL_POINTS": "1", "STAAL_KILL_AT": "worker:outcome"}
KILL_AT_INTENT = {"STAAL_TEST_KILL_POINTS": "1", "STAAL_KILL_AT": "worker:intent"}

ASK = """
from staal.caps import Model

def main(question: str, model: Model) -> dict:
    return {"answer": model.complete(question, max_tokens=64)}
"""


@pytest.fixture
def fake_model() -> Iterator[FakeModel]:
    """A fake model API process accepting KEY, killed at teardown."""
    with running_fake_model(KEY) as fake:
        yield fake


@pytest.fixture(autouse=True)
def no_key_from_outside(monkeypatch):
    """Only what a test passes reaches `staal`, whatever this machine has set."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)


def workspace(tmp_path: Path, fake: FakeModel, program: str = ASK, grant: dict | None = None,
              model: dict | None = None, question: str = "what is staal", **fields) -> Workspace:
    ws = Workspace(tmp_path)
    ws.program(program)
    ws.config(
        grants={"model": {"cap": "model.complete", **(grant or {})}},
        inputs={"question": question},
        model={"provider": "anthropic", "model": MODEL, "api_key": {"env": "ANTHROPIC_API_KEY"},
               "timeout_ms": 5000, "retries": 2, "base_url": fake.base, **(model or {})},
        **fields,
    )
    return ws


def model_intents(ws: Workspace) -> list[dict]:
    return [r for r in ws.records("intent") if r["cap"] == "model.complete"]


# -- a completion ------------------------------------------------------------------


def test_a_completion_is_done_and_journaled_with_its_answer(tmp_path, fake_model):
    ws = workspace(tmp_path, fake_model)
    done = ws.run(env=ENV)
    assert done.code == 0, done.stderr
    assert done.outcome["result"] == {"answer": "echo: what is staal"}
    assert done.outcome["usage"] == {"model": {"actions": 1, "charged": []}}
    assert [r["type"] for r in ws.journal_lines()] == ["header", "intent", "outcome", "end"]
    (intent,) = ws.records("intent")
    assert (intent["cap"], intent["action"], intent["param"]) == ("model.complete", "complete", "model")
    (outcome,) = ws.records("outcome")
    assert outcome["ok"] is True and outcome["result"] == "echo: what is staal"
    assert len(fake_model.requests()) == 1


def test_the_request_speaks_the_anthropic_messages_api(tmp_path, fake_model):
    ws = workspace(tmp_path, fake_model)
    assert ws.run(env=ENV).code == 0
    (request,) = fake_model.requests()
    assert (request["method"], request["path"]) == ("POST", "/v1/messages")
    assert request["headers"]["x-api-key"] == KEY
    assert request["headers"]["anthropic-version"] == ANTHROPIC_VERSION == "2023-06-01"
    assert request["headers"]["content-type"] == "application/json"
    assert request["body"] == {"model": MODEL, "max_tokens": 64,
                               "messages": [{"role": "user", "content": "what is staal"}]}


def test_the_answer_is_the_text_blocks_of_the_message_joined(tmp_path, fake_model):
    fake_model.script({"content": [
        {"type": "text", "text": "first, "},
        {"type": "thinking", "thinking": "not shown", "signature": "x"},
        {"type": "text", "text": "then second"},
    ]})
    done = workspace(tmp_path, fake_model).run(env=ENV)
    assert done.outcome["result"] == {"answer": "first, then second"}


# -- resume ---------------------------------------------------------------------------


def test_a_resumed_run_replays_the_answer_and_the_model_is_not_asked_again(tmp_path, fake_model):
    ws = workspace(tmp_path, fake_model)
    killed = ws.run(env={**ENV, **KILL_AT_OUTCOME})
    assert killed.code == -9
    assert len(fake_model.requests()) == 1
    assert ws.records("end") == []
    done = ws.resume(env=ENV)
    assert done.code == 0, done.stderr
    assert done.outcome["result"] == {"answer": "echo: what is staal"}
    assert done.outcome["usage"] == {"model": {"actions": 1, "charged": []}}
    assert len(fake_model.requests()) == 1


def test_a_model_call_in_doubt_after_a_crash_is_asked_again_on_resume(tmp_path, fake_model):
    ws = workspace(tmp_path, fake_model)
    assert ws.run(env={**ENV, **KILL_AT_INTENT}).code == -9
    assert fake_model.requests() == []  # killed between its intent and sending it
    done = ws.resume(env=ENV)
    assert done.code == 0, done.stderr
    assert done.outcome["result"] == {"answer": "echo: what is staal"}
    assert len(fake_model.requests()) == 1
    assert ws.records("stopped") == []


# -- retries ----------------------------------------------------------------------------


def test_retryable_failures_are_retried_up_to_retries_and_then_the_call_succeeds(tmp_path, fake_model):
    failures = [{"close": True}] + [{"status": s, "retry_after": "0"}
                                    for s in (429, 500, 502, 503, 504, 529)]
    fake_model.script(*failures)
    ws = workspace(tmp_path, fake_model, model={"retries": len(failures)})
    done = ws.run(env=ENV)
    assert done.code == 0, done.stderr
    assert done.outcome["result"] == {"answer": "echo: what is staal"}
    assert len(fake_model.requests()) == len(failures) + 1
    # One action, whatever it took: the attempts are the provider's business.
    assert len(model_intents(ws)) == len(ws.records("outcome")) == 1


def test_after_the_last_attempt_the_run_fails_as_provider_having_asked_retries_plus_one_times(
        tmp_path, fake_model):
    fake_model.script(*[{"status": 529, "retry_after": "0"}] * 3)
    ws = workspace(tmp_path, fake_model, model={"retries": 2})
    done = ws.run(env=ENV)
    assert done.code == 1
    failure = done.outcome["failure"]
    assert failure["kind"] == "provider"
    assert failure["message"].startswith("the model provider failed all 3 attempts; the last: "
                                         "HTTP 529 overloaded_error: Overloaded")
    assert len(fake_model.requests()) == 3
    (outcome,) = ws.records("outcome")
    assert outcome["ok"] is False and outcome["failure"]["kind"] == "provider"


def test_with_no_retries_a_retryable_failure_is_asked_once(tmp_path, fake_model):
    fake_model.script({"status": 503, "retry_after": "0"})
    done = workspace(tmp_path, fake_model, model={"retries": 0}).run(env=ENV)
    assert done.outcome["failure"]["kind"] == "provider"
    assert "failed the only attempt" in done.outcome["failure"]["message"]
    assert len(fake_model.requests()) == 1


def test_a_program_may_handle_a_provider_failure(tmp_path, fake_model):
    fake_model.script(*[{"status": 500, "retry_after": "0"}] * 2)
    ws = workspace(tmp_path, fake_model, model={"retries": 1}, program="""
from staal import ActionFailed
from staal.caps import Model

def main(question: str, model: Model) -> dict:
    try:
        return {"answer": model.complete(question)}
    except ActionFailed as exc:
        return {"kind": exc.kind, "fallback": "no answer today"}
""")
    done = ws.run(env=ENV)
    assert done.code == 0, done.stderr
    assert done.outcome["result"] == {"kind": "provider", "fallback": "no answer today"}
    assert len(fake_model.requests()) == 2


@pytest.mark.parametrize("status, kind", [
    (400, "invalid_request_error"),
    (401, "authentication_error"),
    (403, "permission_error"),
    (404, "not_found_error"),
    (413, "request_too_large"),
])
def test_a_client_error_is_not_retried(tmp_path, fake_model, status, kind):
    fake_model.script({"status": status, "retry_after": "0"})
    done = workspace(tmp_path, fake_model, model={"retries": 3}).run(env=ENV)
    assert done.code == 1
    failure = done.outcome["failure"]
    assert failure["kind"] == "provider"
    assert failure["message"].startswith(f"the model provider failed: HTTP {status} {kind}: ")
    assert failure["message"].endswith("(not retried)")
    assert len(fake_model.requests()) == 1


def test_a_wrong_api_key_is_refused_by_the_provider_and_not_retried(tmp_path, fake_model):
    done = workspace(tmp_path, fake_model).run(env={"ANTHROPIC_API_KEY": "sk-ant-wrong"})
    assert done.outcome["failure"]["kind"] == "provider"
    assert "HTTP 401 authentication_error" in done.outcome["failure"]["message"]
    assert len(fake_model.requests()) == 1


def test_retry_after_is_waited_for_for_real(tmp_path, fake_model):
    fake_model.script({"status": 529, "retry_after": "1"})
    done = workspace(tmp_path, fake_model).run(env=ENV)
    assert done.code == 0, done.stderr
    first, second = fake_model.requests()
    assert 1.0 <= second["at"] - first["at"] < 1.0 + 3.0


def test_a_provider_that_never_answers_times_out_within_timeout_ms_per_attempt(tmp_path, fake_model):
    fake_model.script({"hang": True}, {"hang": True})
    ws = workspace(tmp_path, fake_model, model={"timeout_ms": 300, "retries": 1})
    began = time.monotonic()
    done = ws.run(env=ENV)
    took = time.monotonic() - began
    assert done.code == 1
    failure = done.outcome["failure"]
    assert failure["kind"] == "provider"
    assert failure["message"] == ("the model provider failed all 2 attempts; the last: "
                                  "no complete answer within 300 ms")
    first, second = fake_model.requests()
    # The second attempt began after the first timed out, not when the fake
    # let it go (it would have held both 60 s). No lower bound: the fake
    # stamps a request when its body has arrived, later than the attempt's
    # clock started, by as much as a loaded machine makes it.
    assert second["at"] - first["at"] < 30
    assert took < 15


# -- the waits, observed ---------------------------------------------------------------


def provider(fake: FakeModel, waits: list[float], retries: int = 8, **kw) -> AnthropicProvider:
    config = ModelConfig("anthropic", MODEL, SecretRef("ANTHROPIC_API_KEY"), timeout_ms=5000,
                         retries=retries, base_url=fake.base)
    return AnthropicProvider(config, KEY, sleep=waits.append, **kw)


def test_retry_after_is_honored_and_no_wait_is_longer_than_60_s(fake_model):
    fake_model.script(
        {"status": 529, "retry_after": "120"},
        {"status": 429, "retry_after": "3"},
        {"status": 503, "retry_after": "0"},
        {"status": 500, "retry_after": "0.25"},
        {"status": 502, "retry_after": "86400"},
    )
    waits: list[float] = []
    done = provider(fake_model, waits).complete("hello", 16)
    assert done.result == "echo: hello" and done.failure is None
    assert waits == [MAX_WAIT_S, 3.0, 0.0, 0.25, MAX_WAIT_S] and MAX_WAIT_S == 60.0
    assert len(fake_model.requests()) == 6


def test_without_retry_after_the_waits_back_off_exponentially_up_to_60_s(fake_model):
    fake_model.script(*[{"status": 529}] * 10)
    waits: list[float] = []
    done = provider(fake_model, waits, retries=9, jitter=lambda low, high: high).complete("x", 8)
    assert done.failure_kind == "provider" and "all 10 attempts" in done.failure
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
    assert len(fake_model.requests()) == 10


def test_backoff_waits_are_jittered_below_their_step_and_never_past_60_s(fake_model):
    waits: list[float] = []
    shortest = provider(fake_model, waits, jitter=lambda low, high: low)
    assert [shortest.wait_before(n, None) for n in (2, 3, 4)] == [0.375, 0.75, 1.5]
    real = provider(fake_model, waits)
    for attempt in range(2, 30):
        wait = real.wait_before(attempt, None)
        step = min(0.5 * 2 ** (attempt - 2), 60.0)
        assert 0.75 * step <= wait <= step <= 60.0


def test_an_answer_that_trickles_in_is_given_up_after_timeout_ms_all_told(fake_model):
    # Each read arrives well within the timeout; the whole answer never does.
    fake_model.script({"drip": 0.4})
    config = ModelConfig("anthropic", MODEL, SecretRef("ANTHROPIC_API_KEY"), timeout_ms=500,
                         retries=0, base_url=fake_model.base)
    began = time.monotonic()
    done = AnthropicProvider(config, KEY, sleep=[].append).complete("x", 8)
    took = time.monotonic() - began
    assert done.failure == ("the model provider failed the only attempt; the last: "
                            "no complete answer within 500 ms")
    assert took >= 0.5  # not before timeout_ms (a lower bound holds on any machine)
    # Given up, not read on: the provider hung up while the body was still
    # coming (all of it would take about 100 s), on its one attempt.
    (drip,) = fake_model.drips(at_least=1)
    assert drip["ended"] == "hung_up" and drip["sent"] < drip["of"]
    assert len(fake_model.requests()) == 1


def test_a_retry_after_date_is_waited_for_until_then(fake_model):
    clock = FixedClock(1_445_412_475_000)  # five seconds before Wed, 21 Oct 2015 07:28:00 GMT
    fake_model.script({"status": 529, "retry_after": "Wed, 21 Oct 2015 07:28:00 GMT"},
                      {"status": 529, "retry_after": "not a date"})
    waits: list[float] = []
    done = provider(fake_model, waits, clock=clock, jitter=lambda low, high: high).complete("x", 8)
    assert done.result == "echo: x"
    assert waits == [5.0, 0.5 * 2]


def test_the_capability_waits_through_the_runs_sleeper_and_journals_one_action(tmp_path, fake_model):
    fake_model.script({"status": 529, "retry_after": "7"}, {"status": 429, "retry_after": "90"})
    clock = FixedClock(1_760_000_000_000)
    writer = JournalWriter.create(tmp_path / "run.journal", Header(
        run="0" * 32, tool="t", program=str(tmp_path / "p.py"), program_sha256="ab" * 32,
        config_sha256="ab" * 32, inputs_sha256="ab" * 32, runtime="staal 0.1.0",
        time=clock.now_ms()), clock)
    ctx = RunContext("0" * 32, writer, clock, clock.now_ms(), secrets=(KEY,))
    grant = Grant(cap="model.complete")
    config = RunConfig(tool="t", program=tmp_path / "p.py", entry="main", grants={"model": grant},
                       model=ModelConfig("anthropic", MODEL, SecretRef("ANTHROPIC_API_KEY"),
                                         timeout_ms=5000, retries=2, base_url=fake_model.base))
    services = Services(clock=clock,
                        secrets={"ANTHROPIC_API_KEY": KEY}, config=config)
    waits: list[float] = []
    services.sleep = waits.append  # type: ignore[attr-defined]
    state = GrantState.for_param("model", grant)
    ctx.params["model"] = state
    model = implementation("model.complete")(ctx, state, services)
    try:
        assert isinstance(model, ModelCapability)
        assert model.complete("hi") == "echo: hi"
    finally:
        writer.close()
    assert waits == [7.0, 60.0]
    assert len(fake_model.requests()) == 3
    assert state.usage.frozen().actions == 1


# -- refusals: the fake sees nothing -------------------------------------------------------


def test_over_uses_is_refused_and_the_model_sees_only_the_allowed_calls(tmp_path, fake_model):
    ws = workspace(tmp_path, fake_model, grant={"uses": 2}, program="""
from staal.caps import Model

def main(question: str, model: Model) -> dict:
    return {"answers": [model.complete(question + str(i)) for i in range(3)]}
""")
    done = ws.run(env=ENV)
    assert done.code == 1
    assert done.outcome["failure"] == {
        "kind": "capability",
        "message": "'model.complete' allows 2 actions per run; this would be action 3"}
    assert len(fake_model.requests()) == 2
    assert len(model_intents(ws)) == 2
    assert done.outcome["usage"] == {"model": {"actions": 2, "charged": []}}


def test_a_missing_api_key_is_refused_and_the_model_sees_nothing(tmp_path, fake_model):
    ws = workspace(tmp_path, fake_model)
    done = ws.run()  # no ANTHROPIC_API_KEY in its environment
    assert done.code == 1
    assert done.outcome["failure"] == {
        "kind": "capability",
        "message": "'model.complete' needs the secret ANTHROPIC_API_KEY, which is not set in "
                   "the server's environment"}
    assert fake_model.requests() == []
    assert ws.records("intent") == []


@pytest.mark.parametrize("call, says", [
    ('model.complete("")', "a prompt that is a non-empty string, not ''"),
    ("model.complete(5)", "a prompt that is a non-empty string, not 5"),
    ('model.complete(None)', "a prompt that is a non-empty string, not None"),
    ('model.complete("\\ud800")', "a prompt of valid Unicode text"),
    ('model.complete("hi", max_tokens=0)', f"max_tokens from 1 to {MAX_TOKENS}, not 0"),
    ('model.complete("hi", max_tokens=True)', f"max_tokens from 1 to {MAX_TOKENS}, not True"),
    ('model.complete("hi", max_tokens="64")', f"max_tokens from 1 to {MAX_TOKENS}, not '64'"),
    (f'model.complete("hi", max_tokens={MAX_TOKENS + 1})', f"max_tokens from 1 to {MAX_TOKENS}"),
])
def test_a_misused_complete_is_refused_and_the_model_sees_nothing(tmp_path, fake_model, call, says):
    ws = workspace(tmp_path, fake_model, program=f"""
from staal.caps import Model

def main(question: str, model: Model) -> dict:
    try:
        return {{"answer": {call}}}
    except Exception:
        return {{"swallowed": True}}
""")
    done = ws.run(env=ENV)
    assert done.code == 1, done.stderr
    assert done.outcome["failure"]["kind"] == "capability"
    assert says in done.outcome["failure"]["message"]
    assert fake_model.requests() == []
    assert ws.records("intent") == []


def test_past_the_deadline_no_model_call_starts(tmp_path, fake_model):
    ws = workspace(tmp_path, fake_model, limits={"deadline_ms": 1}, program="""
import time
from staal.caps import Model

def main(question: str, model: Model) -> dict:
    until = time.monotonic() + 0.05
    while time.monotonic() < until:
        pass
    return {"answer": model.complete(question)}
""")
    done = ws.run(env=ENV)
    assert done.code == 1
    assert done.outcome["failure"]["kind"] == "deadline"
    assert fake_model.requests() == []
    assert ws.records("intent") == []


def test_a_resumed_run_past_its_deadline_replays_its_answer_then_starts_no_new_call(
        tmp_path, fake_model):
    ws = workspace(tmp_path, fake_model, limits={"deadline_ms": 1000}, program="""
from staal.caps import Model

def main(question: str, model: Model) -> dict:
    return {"answers": [model.complete(question), model.complete(question + "?")]}
""")
    assert ws.run(env={**ENV, **KILL_AT_OUTCOME}).code == -9
    journal = tmp_path / "run.journal"
    lines = journal.read_text().splitlines()
    header = json.loads(lines[0])
    header["time"] -= 5_000  # the run began long enough ago for its deadline to be past
    lines[0] = json.dumps(header, separators=(",", ":"), sort_keys=True)
    journal.write_text("\n".join(lines) + "\n")
    done = ws.resume(env=ENV)
    assert done.outcome["failure"]["kind"] == "deadline"
    assert len(fake_model.requests()) == 1
    assert done.outcome["usage"] == {"model": {"actions": 1, "charged": []}}


# -- the secret ----------------------------------------------------------------------------


def test_the_api_key_never_appears_in_stdout_stderr_or_the_journal(tmp_path, fake_model):
    ws = workspace(tmp_path, fake_model, program="""
from staal import ActionFailed
from staal.caps import Model

def main(question: str, model: Model) -> dict:
    answer = model.complete(question)
    print("the model said", answer)
    try:
        model.complete(question + " again")
    except ActionFailed as exc:
        print("and then", exc)
        raise
    return {}
""")
    # A provider that echoes the key back in an error message.
    fake_model.script({}, {"status": 400, "message": f"key {KEY} is not allowed here"})
    done = ws.run(env=ENV)
    assert done.code == 1
    assert done.outcome["failure"]["kind"] == "provider"
    assert "key [redacted] is not allowed here" in done.outcome["failure"]["message"]
    journal = (tmp_path / "run.journal").read_text()
    assert "the model said echo: what is staal" in done.stderr
    assert "[redacted]" in journal
    for text in (done.stdout, done.stderr, journal):
        assert KEY not in text
    assert [r["headers"]["x-api-key"] for r in fake_model.requests()] == [KEY, KEY]


# -- what the capability declares -------------------------------------------------------


def test_a_model_grant_is_read_only_and_reaches_the_open_world():
    spec = CATALOGUE["model.complete"]
    assert (spec.writes, spec.open_world, spec.money) == (False, True, False)
    assert spec.keys == frozenset({"uses"})


def test_an_operators_result_for_a_completion_is_a_string():
    ModelCapability.check_result("complete", "the answer")
    for wrong in (None, 5, {"text": "the answer"}, ["the answer"]):
        with pytest.raises(ValueError, match="a model completion is a string"):
            ModelCapability.check_result("complete", wrong)



# -- the fake itself ---------------------------------------------------------------------


def _post(fake: FakeModel, headers: dict[str, str], body: object) -> tuple[int, dict, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=10)
    try:
        conn.request("POST", "/v1/messages", body=json.dumps(body).encode(), headers=headers)
        response = conn.getresponse()
        return response.status, dict(response.headers), json.loads(response.read())
    finally:
        conn.close()


def test_the_fake_answers_and_refuses_in_anthropics_shapes(fake_model):
    good = {"x-api-key": KEY, "anthropic-version": ANTHROPIC_VERSION,
            "content-type": "application/json"}
    body = {"model": MODEL, "max_tokens": 3, "messages": [{"role": "user", "content": "a b c d"}]}
    status, headers, message = _post(fake_model, good, body)
    assert status == 200 and headers["request-id"].startswith("req_")
    assert message == {
        "id": message["id"], "type": "message", "role": "assistant", "model": MODEL,
        "content": [{"type": "text", "text": "echo: a b"}], "stop_reason": "max_tokens",
        "stop_sequence": None, "usage": {"input_tokens": 4, "output_tokens": 3}}
    cases = [
        ({**good, "x-api-key": "wrong"}, body, 401, "authentication_error"),
        ({k: v for k, v in good.items() if k != "anthropic-version"}, body, 400,
         "invalid_request_error"),
        (good, {**body, "max_tokens": 0}, 400, "invalid_request_error"),
        (good, {"model": MODEL, "max_tokens": 5, "messages": []}, 400, "invalid_request_error"),
    ]
    for headers_sent, sent, want_status, want_type in cases:
        status, headers, error = _post(fake_model, headers_sent, sent)
        assert status == want_status
        assert error["type"] == "error" and error["error"]["type"] == want_type
        assert error["request_id"] == headers["request-id"]
    assert len(fake_model.requests()) == 1 + len(cases)
