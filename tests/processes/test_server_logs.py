"""The server's own log on standard error: one JSON object per line with
time, level and event (and the run and tool where there is one), and no
secret value anywhere: not in stderr, not on the protocol stream, not in
any file under the journal directory."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import anyio
import pytest

from tests.helpers.servers import Closer, Site, sdk_session, stripe_refund_grant

ECHO = """
def main(text: str) -> dict:
    print("echoing", text)
    return {"echo": text}
"""

FAILS = """
from staal import fail
def main(why: str) -> dict:
    fail("validation", why)
"""

SEND = """
from staal.caps import HttpPost

def main(url: str, post: HttpPost) -> dict:
    return {"status": post.post(url, json={"pay": 1}).status_code}
"""

REFUND = """
from staal import Money
from staal.caps import StripeRefund

def main(order: str, amount: Money, pay: StripeRefund) -> dict:
    intent = pay.payment_intent(order)
    refund = pay.refund(order, amount, "requested_by_customer")
    print("refunded", refund["id"], "of", intent["id"])
    return {"refund": refund["id"]}
"""

TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
LEVELS = {"debug", "info", "warning", "error"}
RUN_EVENTS = {"run_started", "run_ended", "print", "run_waiting", "run_waits_for_operator"}


@pytest.fixture
def closer() -> Iterator[Closer]:
    service = Closer()
    try:
        yield service
    finally:
        service.stop()


def test_stderr_is_one_json_object_per_line_with_time_level_event_and_the_run_and_tool(tmp_path, closer):
    site = Site(tmp_path)
    site.program("echo.py", ECHO)
    site.program("fails.py", FAILS)
    site.program("send.py", SEND)
    site.write([
        {"name": "echo", "program": "echo.py"},
        {"name": "fails", "program": "fails.py"},
        {"name": "send", "program": "send.py",
         "grants": {"post": {"cap": "net.http.post", "only": [closer.base + "/*"]}}},
    ])

    async def scenario():
        async with sdk_session(site, "auto") as session:
            call = session.client.call_tool
            await call("echo", {"text": "one"})
            await call("echo", {"text": 2})  # refused arguments
            failed = await call("fails", {"why": "no reason"})
            assert failed.is_error is True and failed.content[0].text == "validation: no reason"
            stopped = await call("send", {"url": closer.base + "/x"})
            await call("staal_run_status", {"run": stopped.structured_content["run"]})
            return session

    session = anyio.run(scenario)
    text = session.stderr.wait_closed()
    assert text.strip(), "the server logged nothing"
    records = []
    for line in text.splitlines():
        record = json.loads(line)
        assert isinstance(record, dict), line
        assert TIME.match(record["time"]), line
        assert record["level"] in LEVELS, line
        assert isinstance(record["event"], str) and record["event"], line
        if record["event"] in RUN_EVENTS:
            assert re.fullmatch(r"[0-9a-f]{32}", record["run"]), line
            assert record["tool"] in ("echo", "fails", "send"), line
        records.append(record)
    events = [r["event"] for r in records]
    assert events.count("run_started") == 3
    assert {"print", "run_ended", "run_waits_for_operator"} <= set(events)
    [printed] = [r for r in records if r["event"] == "print"]
    assert printed["text"] == "echoing one" and printed["tool"] == "echo"
    waiting = [r for r in records if r["event"] == "run_waits_for_operator"]
    assert waiting and waiting[0]["level"] == "warning" and waiting[0]["tool"] == "send"
    # The file it was captured in says the same.
    assert site.stderr_path.read_text().splitlines() == text.splitlines()


def test_no_secret_value_reaches_stderr_the_protocol_stream_or_the_journal_files(tmp_path, payments):
    site = Site(tmp_path)
    site.program("refund.py", REFUND)
    site.write([{"name": "refund", "program": "refund.py", "once": {"by": ["order"]},
                 "grants": {"pay": stripe_refund_grant(payments.base)}}])
    paid, small = payments.intent(amount=5000), payments.intent(amount=1000)
    key = payments.key

    async def scenario():
        async with sdk_session(site, "auto", env={"STRIPE_SECRET_KEY": key}) as session:
            call = session.client.call_tool
            done = await call("refund", {"order": paid["id"], "amount": {"amount": "20", "currency": "USD"}})
            over = await call("refund", {"order": small["id"], "amount": {"amount": "60", "currency": "USD"}})
            # The service refuses this one with its own message.
            refused = await call("refund", {"order": "pi_nope", "amount": {"amount": "5", "currency": "USD"}})
            return done, over, refused, session

    done, over, refused, session = anyio.run(scenario)
    assert done.is_error is False and over.is_error is True and refused.is_error is True
    # The key was used: the service saw it on every request the runs made.
    assert all(r["headers"]["authorization"] == f"Bearer {key}" for r in payments.requests())
    stderr = session.stderr.wait_closed()
    assert key not in stderr
    assert key not in site.stderr_path.read_text()
    for message in session.traffic.received + session.traffic.sent:
        assert key not in json.dumps(message)
    files = site.files_under_journals()
    assert any(f.suffix == ".journal" for f in files) and any(f.name == "server.ledger" for f in files)
    for path in files:
        assert key.encode() not in path.read_bytes(), path
    # Nor in the manifest, which names only the variable.
    assert key not in site.manifest.read_text() and "STRIPE_SECRET_KEY" in site.manifest.read_text()


def test_a_run_id_is_logged_when_its_run_starts(tmp_path):
    site = Site(tmp_path)
    site.program("echo.py", ECHO)
    site.write([{"name": "echo", "program": "echo.py"}])

    async def scenario():
        async with sdk_session(site, "legacy") as session:
            await session.client.call_tool("echo", {"text": "x"})
            return session

    session = anyio.run(scenario)
    started = session.stderr.wait_event("run_started", tool="echo")
    ended = session.stderr.wait_event("run_ended", run=started["run"])
    assert ended["tool"] == "echo" and ended["outcome"] == "done"
    lines = session.stderr.lines
    assert lines.index(next(line for line in lines if '"run_started"' in line)) < lines.index(
        next(line for line in lines if '"run_ended"' in line))


def test_a_log_line_s_time_is_the_utc_clock_to_the_millisecond_from_one_second_to_the_next():
    """The formatted second is kept between lines (supervisor/telemetry/log.py `_now`):
    a line's time is still the clock's, read between two readings of it."""
    import datetime

    from staal.supervisor.telemetry.log import _now

    seconds = set()
    while len(seconds) < 2:  # across at least one change of second
        before = datetime.datetime.now(datetime.UTC)
        text = _now()
        after = datetime.datetime.now(datetime.UTC)
        assert TIME.match(text), text
        moment = datetime.datetime.fromisoformat(text)
        assert before.replace(microsecond=before.microsecond // 1000 * 1000) <= moment <= after
        seconds.add(text[:19])
