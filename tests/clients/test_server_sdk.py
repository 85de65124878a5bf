"""The official Python SDK (`mcp` 2.3.0) against the real server process
over stdio, in each of its modes: listing and calling tools, refusals, a
Stripe refund tool against the fake payment service (limits, `once`,
quotas), a run that stops in doubt, progress and cancellation."""

from __future__ import annotations

import json
from collections.abc import Iterator

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from staal.supervisor.store.ledger import read_ledger
from tests.helpers.payments import Payments
from tests.helpers.recorder import Recorder
from tests.helpers.servers import WAIT, Closer, Site, sdk_session, stripe_refund_grant, text_of

MODES = ["auto", "legacy", "2026-07-28"]
USD = "USD"

ECHO = """
def main(text: str, times: int = 1) -> dict:
    return {"echo": text * times}
"""

LOOKUP = """
from staal.caps import HttpGet

def main(url: str, get: HttpGet) -> dict:
    return {"status": get.get(url).status_code}
"""

SEND = """
from staal.caps import HttpPost

def main(url: str, post: HttpPost) -> dict:
    return {"status": post.post(url, json={"pay": 1}).status_code}
"""

REFUND = """
from staal import Money, fail
from staal.caps import StripeRefund

def main(order: str, amount: Money, pay: StripeRefund) -> dict:
    intent = pay.payment_intent(order)
    if amount > Money.from_minor(intent["amount_received"], intent["currency"]):
        fail("validation", "refund exceeds what was paid")
    refund = pay.refund(order, amount, "requested_by_customer")
    return {"refund": refund["id"], "status": refund["status"]}
"""


def usd(amount: str) -> dict:
    return {"amount": amount, "currency": USD}


@pytest.fixture
def service() -> Iterator[Recorder]:
    recorder = Recorder().start()
    recorder.route("GET", "/slow", 200, {"slow": True})
    recorder.route("GET", "/fast", 200, {"fast": True})
    try:
        yield recorder
    finally:
        recorder.stop()


def echo_and_lookup(site: Site, base: str, **lookup: object) -> None:
    site.program("echo.py", ECHO)
    site.program("lookup.py", LOOKUP)
    site.write([
        {"name": "echo", "title": "Echo a text", "program": "echo.py"},
        {"name": "lookup", "program": "lookup.py",
         "grants": {"get": {"cap": "net.http.get", "only": [base + "/*"]}}, **lookup},
    ])


def refund_site(site: Site, payments: Payments, **tool: object) -> None:
    """A refund tool (each 50.00 USD, 1 use) against the fake service."""
    site.program("refund.py", REFUND)
    site.write([{"name": "refund", "title": "Refund an order", "program": "refund.py",
                 "grants": {"pay": stripe_refund_grant(payments.base)},
                 "net": {"timeout_ms": 20000, "connect_timeout_ms": 2000}, **tool}])


def secret(payments: Payments) -> dict[str, str]:
    return {"STRIPE_SECRET_KEY": payments.key}


def ledger_runs(site: Site) -> list:
    return list(read_ledger(site.ledger_path).runs())


# -- listing and calling, in each mode ---------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_the_sdk_lists_the_manifest_tools_in_order_then_staal_run_status(tmp_path, payments, mode):
    site = Site(tmp_path)
    site.program("echo.py", ECHO)
    site.program("lookup.py", LOOKUP)
    site.program("refund.py", REFUND)
    base = payments.base
    site.write([
        {"name": "refund", "title": "Refund an order", "program": "refund.py",
         "grants": {"pay": stripe_refund_grant(base)}, "once": {"by": ["order"]}},
        {"name": "echo", "title": "Echo a text", "program": "echo.py"},
        {"name": "lookup", "program": "lookup.py",
         "grants": {"get": {"cap": "net.http.get", "only": [base + "/*"]}}},
    ])

    async def scenario() -> list:
        async with sdk_session(site, mode, env=secret(payments)) as session:
            return (await session.client.list_tools()).tools

    tools = anyio.run(scenario)
    assert [tool.name for tool in tools] == ["refund", "echo", "lookup", "staal_run_status"]
    refund, echo, lookup, status = tools
    assert echo.title == "Echo a text" and echo.description == "The echo tool."
    assert echo.input_schema["type"] == "object"
    assert echo.input_schema["required"] == ["text"]
    assert echo.input_schema["properties"]["text"]["type"] == "string"
    assert echo.input_schema["properties"]["times"]["type"] == "integer"
    assert echo.input_schema["properties"]["times"]["default"] == 1
    assert echo.input_schema["additionalProperties"] is False
    assert set(refund.input_schema["required"]) == {"order", "amount"}
    assert "pay" not in refund.input_schema["properties"]  # a grant is never an argument
    assert status.input_schema["required"] == ["run"]

    def hints(tool) -> tuple:
        a = tool.annotations
        return a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint

    assert hints(echo) == (True, False, True, False)  # no grants
    assert hints(lookup) == (True, False, True, True)  # a network read
    assert hints(refund) == (False, True, True, True)  # a write, with once
    assert hints(status) == (True, False, True, False)
    assert refund.annotations.title == "Refund an order"


@pytest.mark.parametrize("mode", MODES)
def test_the_sdk_calls_a_tool_and_reads_its_result_as_structured_content(tmp_path, service, mode):
    site = Site(tmp_path)
    echo_and_lookup(site, service.base)

    async def scenario() -> tuple:
        async with sdk_session(site, mode) as session:
            echoed = await session.client.call_tool("echo", {"text": "ab", "times": 2})
            looked = await session.client.call_tool("lookup", {"url": service.base + "/fast"})
            return echoed, looked, session.client.protocol_version

    echoed, looked, version = anyio.run(scenario)
    assert version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
    assert echoed.is_error is False
    assert echoed.structured_content == {"result": {"echo": "abab"}}
    assert [json.loads(text_of(echoed))] == [{"echo": "abab"}] and len(echoed.content) == 1
    assert looked.structured_content == {"result": {"status": 200}}
    assert len(service.seen("GET", "/fast")) == 1


@pytest.mark.parametrize("mode", MODES)
def test_arguments_the_types_refuse_are_a_tool_error_with_the_problem_and_nothing_runs(
        tmp_path, service, mode):
    site = Site(tmp_path)
    echo_and_lookup(site, service.base)

    async def scenario() -> tuple:
        async with sdk_session(site, mode) as session:
            wrong = await session.client.call_tool("echo", {"text": 5})
            missing = await session.client.call_tool("echo", {})
            extra = await session.client.call_tool("echo", {"text": "a", "pay": {"cap": "x"}})
            with pytest.raises(MCPError) as unknown:
                await session.client.call_tool("no_such_tool", {})
            again = await session.client.call_tool("echo", {"text": "a"})
            return wrong, missing, extra, unknown.value.error.code, again

    wrong, missing, extra, unknown, again = anyio.run(scenario)
    for refused in (wrong, missing, extra):
        assert refused.is_error is True and not refused.structured_content
    assert "text" in text_of(wrong) and "5" in text_of(wrong)
    assert "text" in text_of(missing)
    assert "pay" in text_of(extra)
    assert unknown == -32602
    # The model corrects its arguments and the call runs: one run in all.
    assert again.structured_content == {"result": {"echo": "a"}}
    assert [run.tool for run in ledger_runs(site)] == ["echo"]


# -- a Stripe refund tool --------------------------------------------------------------------------


def test_a_refund_within_the_limits_is_done_and_the_service_holds_it(tmp_path, payments):
    site = Site(tmp_path)
    refund_site(site, payments)
    intent = payments.intent(amount=5000)

    async def scenario():
        async with sdk_session(site, "auto", env=secret(payments)) as session:
            return await session.client.call_tool("refund", {"order": intent["id"], "amount": usd("20")})

    result = anyio.run(scenario)
    [refund] = payments.refunds()
    assert result.is_error is False
    assert result.structured_content == {"result": {"refund": refund["id"], "status": "succeeded"}}
    assert (refund["amount"], refund["payment_intent"]) == (2000, intent["id"])
    [run] = ledger_runs(site)
    assert run.state == "settled" and [m.to_wire() for m in run.charged] == [usd("20.00")]
    [post] = payments.requests("POST", "/v1/refunds")
    assert post["headers"]["idempotency-key"].startswith(run.run)


def test_a_refund_over_each_is_refused_with_the_brokers_message_and_no_refund_is_asked(tmp_path, payments):
    site = Site(tmp_path)
    refund_site(site, payments, once={"by": ["order"]})
    intent = payments.intent(amount=50_000)

    async def scenario():
        async with sdk_session(site, "legacy", env=secret(payments)) as session:
            first = await session.client.call_tool("refund", {"order": intent["id"], "amount": usd("300")})
            again = await session.client.call_tool("refund", {"order": intent["id"], "amount": usd("300.00")})
            return first, again

    first, again = anyio.run(scenario)
    message = "'payments.stripe.refund' allows at most 50.00 USD per action; this action needs 300.00 USD"
    assert first.is_error is True
    assert text_of(first) == message
    assert payments.requests("POST") == [] and payments.refunds() == []
    # The repeated once call gets the earlier failure, and nothing runs again.
    assert again.is_error is True and text_of(again) == message
    assert len(payments.requests("GET")) == 1
    [run] = ledger_runs(site)
    assert run.state == "settled" and run.outcome == "failed" and run.charged == ()


def test_a_repeated_once_call_gets_the_first_result_exactly_and_the_service_holds_one_refund(
        tmp_path, payments):
    site = Site(tmp_path)
    refund_site(site, payments, once={"by": ["order"], "keep": "1d"})
    intent = payments.intent(amount=5000)

    async def scenario():
        async with sdk_session(site, "2026-07-28", env=secret(payments)) as session:
            call = session.client.call_tool
            first = await call("refund", {"order": intent["id"], "amount": usd("20.00")})
            # The same operation, written as the runtime reads it the same.
            second = await call("refund", {"order": intent["id"], "amount": usd("20")})
            other = await call("refund", {"order": intent["id"], "amount": usd("30")})
            return first, second, other

    first, second, other = anyio.run(scenario)
    assert first.is_error is False
    assert second.model_dump() == first.model_dump()
    assert len(payments.refunds()) == 1
    assert len(payments.requests("POST")) == 1
    # The same key with different arguments is a different operation: refused.
    assert other.is_error is True
    [run] = ledger_runs(site)
    assert run.run in text_of(other) and "different" in text_of(other)
    assert len(payments.refunds()) == 1


def test_a_repeated_once_call_while_the_first_runs_is_in_progress_and_status_follows_it_to_done(
        tmp_path, payments):
    site = Site(tmp_path)
    # The tool's one slot is taken by the first run: the repeat is answered
    # from the ledger all the same, not as busy.
    refund_site(site, payments, once={"by": ["order"]}, max_concurrent_runs=1)
    intent = payments.intent(amount=5000)
    arguments = {"order": intent["id"], "amount": usd("20")}
    payments.fault("/v1/refunds", "hang")

    async def scenario():
        async with sdk_session(site, "auto", env=secret(payments)) as session:
            call = session.client.call_tool
            answers = {}

            async def first() -> None:
                answers["first"] = await call("refund", arguments)

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(first)
                await anyio.to_thread.run_sync(lambda: payments.wait("/v1/refunds", held=1, timeout=WAIT))
                answers["repeat"] = await call("refund", arguments)
                run = ledger_runs(site)[0].run
                answers["running"] = await call("staal_run_status", {"run": run})
                payments.release()
            answers["status"] = await call("staal_run_status", {"run": run})
            answers["again"] = await call("refund", arguments)
            return run, answers

    run, answers = anyio.run(scenario)
    repeat = answers["repeat"]
    assert repeat.is_error is True
    assert "in progress" in text_of(repeat) and run in text_of(repeat)
    assert "staal_run_status" in text_of(repeat)
    assert answers["running"].structured_content == {"run": run, "status": "running"}
    first = answers["first"]
    assert first.is_error is False
    assert answers["status"].structured_content == {
        "run": run, "status": "done", "result": first.structured_content["result"]}
    assert answers["again"].model_dump() == first.model_dump()
    assert len(payments.refunds()) == 1
    assert len(ledger_runs(site)) == 1


def test_over_the_quota_a_call_is_refused_naming_the_quota_and_nothing_runs(tmp_path, payments):
    site = Site(tmp_path)
    refund_site(site, payments, quota={"window": "24h", "calls": 2, "money": usd("60.00")})
    first, second, third = (payments.intent(amount=5000) for _ in range(3))

    async def scenario():
        async with sdk_session(site, "auto", env=secret(payments)) as session:
            call = session.client.call_tool
            done = await call("refund", {"order": first["id"], "amount": usd("20")})
            # Worst case 50.00 held on top of the 20.00 spent: over 60.00.
            by_money = await call("refund", {"order": second["id"], "amount": usd("5")})
            return done, by_money

    done, by_money = anyio.run(scenario)
    assert done.is_error is False
    assert by_money.is_error is True
    text = text_of(by_money)
    assert "quota" in text and "60.00 USD" in text and "24h" in text
    assert "20.00 USD" in text  # settled to what the first run spent, not its worst case
    assert "frees up" in text
    assert len(payments.refunds()) == 1
    assert [r["path"] for r in payments.requests()].count(f"/v1/payment_intents/{second['id']}") == 0
    assert len(ledger_runs(site)) == 1
    del third


def test_over_the_calls_quota_a_call_is_refused_and_holds_nothing(tmp_path, payments):
    site = Site(tmp_path)
    refund_site(site, payments, quota={"window": "1h", "calls": 1})
    first, second = payments.intent(amount=5000), payments.intent(amount=5000)

    async def scenario():
        async with sdk_session(site, "legacy", env=secret(payments)) as session:
            call = session.client.call_tool
            return (await call("refund", {"order": first["id"], "amount": usd("10")}),
                    await call("refund", {"order": second["id"], "amount": usd("10")}))

    done, refused = anyio.run(scenario)
    assert done.is_error is False
    assert refused.is_error is True
    assert "quota" in text_of(refused) and "1 of 1 calls" in text_of(refused)
    assert "1h" in text_of(refused) and "frees up" in text_of(refused)
    assert len(payments.refunds()) == 1
    assert len(payments.requests()) == 2  # the first run's GET and POST only
    events = site.ledger_events()
    assert [e["event"] for e in events] == ["reserve", "settle"]


def test_concurrent_calls_cannot_overspend_the_money_quota_together(tmp_path, payments):
    site = Site(tmp_path)
    # Each run holds its worst case, 50.00, until it settles: two do not fit in 60.00.
    refund_site(site, payments, quota={"window": "24h", "money": usd("60.00")})
    first, second = payments.intent(amount=5000), payments.intent(amount=5000)
    payments.fault("/v1/refunds", "hang")

    async def scenario():
        async with sdk_session(site, "auto", env=secret(payments)) as session:
            call = session.client.call_tool
            answers = {}

            async def held() -> None:
                answers["held"] = await call("refund", {"order": first["id"], "amount": usd("5")})

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(held)
                await anyio.to_thread.run_sync(lambda: payments.wait("/v1/refunds", held=1, timeout=WAIT))
                answers["refused"] = await call("refund", {"order": second["id"], "amount": usd("5")})
                payments.release()
            # Settled to the 5.00 it spent, the first leaves room for another.
            answers["after"] = await call("refund", {"order": second["id"], "amount": usd("5")})
            return answers

    answers = anyio.run(scenario)
    assert answers["held"].is_error is False
    refused = text_of(answers["refused"])
    assert answers["refused"].is_error is True
    assert "quota" in refused and "50.00 USD of 60.00 USD" in refused
    assert answers["after"].is_error is False
    assert len(payments.refunds()) == 2
    assert len(ledger_runs(site)) == 2


def test_a_once_call_answered_busy_holds_no_key_and_the_same_call_later_runs(tmp_path, payments):
    site = Site(tmp_path)
    refund_site(site, payments, once={"by": ["order"]}, max_concurrent_runs=1)
    first, second = payments.intent(amount=5000), payments.intent(amount=5000)
    payments.fault("/v1/refunds", "hang")

    async def scenario():
        async with sdk_session(site, "legacy", env=secret(payments)) as session:
            call = session.client.call_tool
            answers = {}

            async def held() -> None:
                answers["held"] = await call("refund", {"order": first["id"], "amount": usd("5")})

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(held)
                await anyio.to_thread.run_sync(lambda: payments.wait("/v1/refunds", held=1, timeout=WAIT))
                answers["busy"] = await call("refund", {"order": second["id"], "amount": usd("5")})
                payments.release()
            answers["later"] = await call("refund", {"order": second["id"], "amount": usd("5")})
            return answers

    answers = anyio.run(scenario)
    assert answers["busy"].is_error is True and "busy" in text_of(answers["busy"])
    assert answers["later"].is_error is False
    assert answers["later"].structured_content != answers["held"].structured_content
    assert len(payments.refunds()) == 2
    assert len(ledger_runs(site)) == 2


def test_once_keys_are_scoped_to_the_tool(tmp_path):
    site = Site(tmp_path)
    site.program("echo.py", ECHO)
    site.write([{"name": "one", "program": "echo.py", "once": {"by": ["text"]}},
                {"name": "two", "program": "echo.py", "once": {"by": ["text"]}}])

    async def scenario():
        async with sdk_session(site, "2026-07-28") as session:
            call = session.client.call_tool
            return [await call(name, {"text": "same"}) for name in ("one", "one", "two", "two")]

    results = anyio.run(scenario)
    assert all(r.structured_content == {"result": {"echo": "same"}} for r in results)
    runs = ledger_runs(site)
    assert sorted(run.tool for run in runs) == ["one", "two"]
    assert [e["event"] for e in site.ledger_events()].count("reserve") == 2


# -- a run that stops in doubt ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_run_that_stops_in_doubt_waits_for_an_operator_and_status_says_so(tmp_path, mode):
    closer = Closer()
    try:
        site = Site(tmp_path)
        site.program("send.py", SEND)
        site.write([{"name": "send", "program": "send.py",
                     "grants": {"post": {"cap": "net.http.post", "only": [closer.base + "/*"]}}}])

        async def scenario():
            async with sdk_session(site, mode) as session:
                call = session.client.call_tool
                stopped = await call("send", {"url": closer.base + "/pay"})
                run = stopped.structured_content["run"]
                status = await call("staal_run_status", {"run": run})
                again = await call("send", {"url": closer.base + "/pay"})
                return stopped, status, again

        stopped, status, again = anyio.run(scenario)
    finally:
        closer.stop()
    run = stopped.structured_content["run"]
    assert stopped.is_error is True
    assert stopped.structured_content == {"status": "waiting_for_operator", "run": run}
    text = text_of(stopped)
    assert run in text and "may already have happened" in text and "operator" in text
    assert "not call the tool again" in text.lower() or "do not call" in text.lower()
    record = json.loads(site.waiting_record(run).read_text())
    assert record["run"] == run
    # Its arguments are kept while it may need resuming.
    assert site.journal("send", run).with_name(f"{run}.inputs.json").is_file()
    assert status.structured_content["status"] == "waiting_for_operator"
    assert status.structured_content["run"] == run
    # It keeps its whole reservation: not settled.
    entry = read_ledger(site.ledger_path).run(run)
    assert entry.state == "unsettled" and entry.calls == 1
    # Without once, the same call again is a new run.
    assert again.structured_content["run"] != run
    assert len(closer.requests) == 2


# -- progress and cancellation ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_call_with_a_progress_callback_gets_one_progress_message_holding_its_run_id(
        tmp_path, service, mode):
    site = Site(tmp_path)
    echo_and_lookup(site, service.base)
    messages: list = []

    async def on_progress(progress, total, message) -> None:
        messages.append(message)

    async def scenario():
        async with sdk_session(site, mode) as session:
            result = await session.client.call_tool("echo", {"text": "p"}, progress_callback=on_progress)
            quiet = await session.client.call_tool("echo", {"text": "q"})
            return result, quiet, session

    result, quiet, session = anyio.run(scenario)
    assert result.is_error is False and quiet.is_error is False
    runs = [run.run for run in ledger_runs(site)]
    assert len(messages) == 1 and runs[0] in messages[0]
    assert len(session.traffic.notifications("notifications/progress")) == 1


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_call_cancelled_while_its_run_is_in_progress_runs_to_its_end_and_gets_no_answer(
        tmp_path, service, mode):
    site = Site(tmp_path)
    echo_and_lookup(site, service.base)
    slow = service.hold("/slow")

    async def scenario():
        async with sdk_session(site, mode) as session:
            call = session.client.call_tool
            # The client gives up on the call once its run has started (the
            # service holds the run's request): the SDK sends
            # notifications/cancelled, as it does on a timeout.
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(call, "lookup", {"url": service.base + "/slow"})
                assert await anyio.to_thread.run_sync(lambda: slow.arrived.wait(WAIT))
                tasks.cancel_scope.cancel()
            [sent] = [m for m in session.traffic.sent_calls() if m["params"]["name"] == "lookup"]
            # A round trip after the cancellation: once it is answered, the
            # server has read the cancellation (lines are read in order).
            assert (await call("echo", {"text": "x"})).is_error is False
            run = session.stderr.wait_event("run_started", tool="lookup")["run"]
            slow.release.set()
            ended = await anyio.to_thread.run_sync(
                lambda: session.stderr.wait_event("run_ended", run=run))
            # Asked after the run ended: an answer to the cancelled call, had
            # there been one, would have come first.
            status = await call("staal_run_status", {"run": run})
            return sent["id"], run, ended, status, session

    request_id, run, ended, status, session = anyio.run(scenario)
    [cancelled] = session.traffic.notifications_sent("notifications/cancelled")
    assert cancelled["params"]["requestId"] == request_id
    assert ended["outcome"] == "done"
    assert status.structured_content == {"run": run, "status": "done", "result": {"status": 200}}
    # Nothing was sent for the cancelled request.
    assert session.traffic.received_for(request_id) == []
    entry = read_ledger(site.ledger_path).run(run)
    assert entry.state == "settled" and entry.outcome == "done"
    assert len(service.seen("GET", "/slow")) == 1


def test_a_call_the_client_times_out_on_is_cancelled_and_its_run_still_settles(tmp_path, service):
    site = Site(tmp_path)
    echo_and_lookup(site, service.base)
    slow = service.hold("/slow")

    async def scenario():
        async with sdk_session(site, "auto") as session:
            call = session.client.call_tool
            with pytest.raises(MCPError):
                await call("lookup", {"url": service.base + "/slow"}, read_timeout_seconds=2.0)
            [sent] = session.traffic.sent_calls()
            # False only if the timeout came before the run started; then
            # the cancellation stopped it and nothing ever arrives.
            started = await anyio.to_thread.run_sync(lambda: slow.arrived.wait(WAIT))
            follow = await call("echo", {"text": "after"})  # the cancellation is read
            slow.release.set()
            if started:
                run = session.stderr.wait_event("run_started", tool="lookup")["run"]
                await anyio.to_thread.run_sync(lambda: session.stderr.wait_event("run_ended", run=run))
            await call("echo", {"text": "last"})
            return sent["id"], follow, session

    request_id, follow, session = anyio.run(scenario)
    [cancelled] = session.traffic.notifications_sent("notifications/cancelled")
    assert cancelled["params"]["requestId"] == request_id
    assert follow.structured_content == {"result": {"echo": "after"}}
    # Whether the timeout came before or after the run started, the call
    # either did nothing or ran to its end and was settled: nothing is left
    # reserved, and nothing was answered for it.
    lookups = [run for run in ledger_runs(site) if run.tool == "lookup"]
    assert all(run.state == "settled" for run in lookups)
    assert len(service.seen("GET", "/slow")) == len(lookups) <= 1
    assert session.traffic.received_for(request_id) == []


# -- busy ------------------------------------------------------------------------------------------


def test_a_tool_at_its_own_limit_answers_busy_at_once_while_other_tools_run(tmp_path, service):
    site = Site(tmp_path)
    echo_and_lookup(site, service.base, max_concurrent_runs=1)
    slow = service.hold("/slow")

    async def scenario():
        async with sdk_session(site, "auto") as session:
            call = session.client.call_tool
            answers = {}

            async def first() -> None:
                answers["first"] = await call("lookup", {"url": service.base + "/slow"})

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(first)
                await anyio.to_thread.run_sync(lambda: slow.arrived.wait(WAIT))
                answers["busy"] = await call("lookup", {"url": service.base + "/fast"})
                answers["echo"] = await call("echo", {"text": "free"})
                slow.release.set()
            return answers

    answers = anyio.run(scenario)
    assert answers["busy"].is_error is True
    assert "busy" in text_of(answers["busy"]) and "try again later" in text_of(answers["busy"])
    assert answers["echo"].structured_content == {"result": {"echo": "free"}}
    assert answers["first"].structured_content == {"result": {"status": 200}}
    # The busy call was never queued and run later.
    assert service.seen("GET", "/fast") == []
    assert sorted(run.tool for run in ledger_runs(site)) == ["echo", "lookup"]
