"""A hundred concurrent calls through one official SDK client session to a
write tool without `once`, on a server that runs at most four at a time:
every call is answered, done or busy; nothing runs twice; the ledger is
balanced afterwards. And a flood while bursts of worker deaths hit the
pool: every call is still answered, and the pool is whole afterwards."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator

import anyio
import pytest

from staal.supervisor.store.ledger import read_ledger
from tests.helpers.killer import Killer
from tests.helpers.recorder import Recorder
from tests.helpers.servers import WAIT, Site, sdk_session, text_of

CALLS = 100
MAX_RUNS = 4

RECORD = """
from staal.caps import HttpPost

def main(url: str, n: int, post: HttpPost) -> dict:
    return {"status": post.post(url, json={"n": n}).status_code}
"""


@pytest.fixture
def service() -> Iterator[Recorder]:
    recorder = Recorder().start()
    recorder.route("POST", "/record", 200, {"recorded": True})
    try:
        yield recorder
    finally:
        recorder.stop()


def flood_site(tmp_path, service: Recorder) -> Site:
    site = Site(tmp_path)
    site.program("record.py", RECORD)
    site.write([{"name": "record", "program": "record.py",
                 "grants": {"post": {"cap": "net.http.post", "only": [service.base + "/*"]}}}],
               max_concurrent_runs=MAX_RUNS)
    return site


def classify(results: list) -> tuple[list, list]:
    done = [r for r in results if not r.is_error]
    busy = [r for r in results if r.is_error]
    for result in done:
        assert result.structured_content == {"result": {"status": 200}}
    for result in busy:
        assert "busy" in text_of(result) and "try again later" in text_of(result), text_of(result)
    return done, busy


def balanced_ledger(site: Site, runs: int) -> None:
    """One reserve and one settle per run, nothing else, nothing held."""
    events = site.ledger_events()
    reserves = Counter(e["run"] for e in events if e["event"] == "reserve")
    settles = Counter(e["run"] for e in events if e["event"] == "settle")
    assert [e for e in events if e["event"] not in ("reserve", "settle")] == []
    assert len(reserves) == runs and set(reserves.values()) == {1}
    assert settles == reserves
    state = read_ledger(site.ledger_path)
    assert state.unsettled() == ()
    assert len(state.runs()) == runs
    assert {(entry.state, entry.outcome) for entry in state.runs()} == {("settled", "done")}


def most_runs_at_once(records: list[dict]) -> int:
    """The most runs the server's log shows started and not yet ended."""
    running, most = set(), 0
    for record in records:
        if record.get("event") == "run_started":
            running.add(record["run"])
            most = max(most, len(running))
        elif record.get("event") in ("run_ended", "run_waiting"):
            running.discard(record["run"])
    return most


def test_a_flood_of_calls_is_answered_done_or_busy_and_nothing_runs_twice(tmp_path, service):
    site = flood_site(tmp_path, service)

    async def scenario():
        async with sdk_session(site, "auto", read_timeout=WAIT * 4) as session:
            call = session.client.call_tool
            results = await asyncio.gather(*(
                call("record", {"url": service.base + "/record", "n": n}) for n in range(CALLS)))
            # The session is still good afterwards.
            after = await call("record", {"url": service.base + "/record", "n": CALLS})
            return results, after, session

    results, after, session = anyio.run(scenario)
    assert len(results) == CALLS
    done, busy = classify(results)
    assert len(done) + len(busy) == CALLS and len(done) >= 1
    assert after.is_error is False
    posts = service.seen("POST", "/record")
    assert len(posts) == len(done) + 1
    # No call ran twice: every request carries a different n.
    assert len({p.json()["n"] for p in posts}) == len(posts)
    balanced_ledger(site, len(done) + 1)
    assert most_runs_at_once(session.stderr.records()) <= MAX_RUNS
    # Every line was one whole message, and every answer went to its own
    # request: one answer per tools/call sent.
    assert session.traffic.errors == []
    calls = session.traffic.sent_calls()
    assert len(calls) == CALLS + 1
    assert all(len(session.traffic.received_for(c["id"])) == 1 for c in calls)


def test_with_every_slot_held_a_flood_gets_exactly_that_many_runs_and_busy_for_the_rest(tmp_path, service):
    site = flood_site(tmp_path, service)
    held = service.hold("/record")

    async def scenario():
        async with sdk_session(site, "legacy", read_timeout=WAIT * 4) as session:
            call = session.client.call_tool
            results: list = []
            busy_all = anyio.Event()

            async def one(n: int) -> None:
                result = await call("record", {"url": service.base + "/record", "n": n})
                results.append(result)
                if sum(r.is_error for r in results) == CALLS - MAX_RUNS:
                    busy_all.set()

            async with anyio.create_task_group() as tasks:
                for n in range(CALLS):
                    tasks.start_soon(one, n)
                # The runs holding the slots are held by the service until
                # every other call has been answered busy.
                with anyio.fail_after(WAIT * 2):
                    await busy_all.wait()
                assert len(service.seen("POST", "/record")) <= MAX_RUNS
                held.release.set()
            return results

    results = anyio.run(scenario)
    done, busy = classify(results)
    assert (len(done), len(busy)) == (MAX_RUNS, CALLS - MAX_RUNS)
    assert len(service.seen("POST", "/record")) == MAX_RUNS
    balanced_ledger(site, MAX_RUNS)


LOOKUP = """
from staal.caps import HttpGet

def main(url: str, n: int, get: HttpGet) -> dict:
    return {"status": get.get(url).status_code}
"""
WAVES = 4
WAVE = 20


def test_a_flood_with_bursts_of_worker_deaths_ends_with_every_call_answered(tmp_path, service):
    # A read, so a run whose worker was killed mid-request is resumed and
    # sends it again instead of waiting for an operator.
    service.route("GET", "/lookup", 200, {"found": True})
    site = Site(tmp_path)
    site.program("lookup.py", LOOKUP)
    site.write([{"name": "lookup", "program": "lookup.py",
                 "grants": {"get": {"cap": "net.http.get", "only": [service.base + "/*"]}}}],
               max_concurrent_runs=MAX_RUNS)
    killer = Killer(site.manifest)
    url = service.base + "/lookup"

    async def scenario():
        async with sdk_session(site, "auto", read_timeout=WAIT * 4) as session:
            call = session.client.call_tool
            assert (await call("lookup", {"url": url, "n": -1})).is_error is False
            killer.bursts(on_s=0.5, off_s=1.0, bound_s=WAIT * 4)
            results: list = []
            try:
                for wave in range(WAVES):
                    results += await asyncio.gather(*(
                        call("lookup", {"url": url, "n": wave * WAVE + n}) for n in range(WAVE)))
            finally:
                killer.stop()
            after = await call("lookup", {"url": url, "n": WAVES * WAVE})
            return results, after, session

    results, after, session = anyio.run(scenario)
    assert len(killer.killed) > 0
    assert len(results) == WAVES * WAVE
    kinds: Counter = Counter()
    waiting = set()
    for result in results:
        text = text_of(result)
        if not result.is_error:
            assert result.structured_content == {"result": {"status": 200}}
            kinds["done"] += 1
        elif "busy" in text:
            assert "try again later" in text, text
            kinds["busy"] += 1
        elif (result.structured_content or {}).get("status") == "waiting_for_operator":
            # Its workers died four times with its read in flight: the
            # journal cannot say the read did not happen.
            waiting.add(result.structured_content["run"])
            kinds["waiting"] += 1
        else:
            assert text.startswith("An internal error happened in run "), text
            kinds["internal"] += 1
    # After the bursts the pool is whole again.
    assert after.is_error is False and after.structured_content == {"result": {"status": 200}}
    # Every call was answered once, each on a whole line.
    assert session.traffic.errors == []
    calls = session.traffic.sent_calls()
    assert len(calls) == WAVES * WAVE + 2
    assert all(len(session.traffic.received_for(c["id"])) == 1 for c in calls)
    # Nothing else is held: every other run was settled, or released if it
    # never started; a busy call reserved nothing.
    state = read_ledger(site.ledger_path)
    assert {entry.run for entry in state.unsettled()} == waiting
    assert all(site.waiting_record(run).exists() for run in waiting)
    runs = state.runs()
    assert sum(entry.outcome == "done" for entry in runs) == kinds["done"] + 2
    assert len(runs) == kinds["done"] + kinds["internal"] + kinds["waiting"] + 2
    print(f"\n{len(killer.killed)} workers killed; answers: {dict(kinds)}")
