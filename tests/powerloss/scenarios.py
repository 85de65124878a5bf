"""The scenarios a power loss is enumerated over, and recording one.

Each scenario prepares a journal directory (servers run normally, nothing
recorded), syncs it, then runs the phase a power loss may cut short with
`STAAL_TEST_FS_RECORD` set: every file operation of the server, its zygote
and workers goes to the recording (staal.records.fsio), the fake payment service
marks each refund it makes there, and this process marks each answer its
client received, all in the order they happened.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from staal.records.appendlog import AppendLog, read_log
from staal.records.fsio import RECORD_VARIABLE
from staal.records.ledger_records import LEDGER
from staal.supervisor.store.file_ledger import TOGETHER_VARIABLE
from staal.supervisor.store.ledger import LEDGER_FILE, read_ledger
from tests.crash.harness import ANSWERED, CALL, Cell, call, manifest
from tests.helpers.payments import Payments
from tests.powerloss.client import call_all

DAY_MS = 24 * 3600 * 1000
INTENT_AMOUNT = 5000


@dataclass(frozen=True)
class Scenario:
    name: str
    what: str
    # Prepares the journal directory before the recorded phase.
    setup: Callable[[Context], None]
    # Refunds the service may hold once the repeat is answered.
    max_refunds: int = 1
    # Whether a run settled before the recorded phase may leave the ledger.
    drops_settled: bool = False
    # A fault on the refund POST during the recorded call.
    fault: tuple[str, int] | None = None
    # How many calls the recorded phase sends at once, each refunding its
    # own order; their repeat on each state too.
    calls: int = 1
    # Whether their reserves are held to share one fsync (the ledger's
    # group commit; TOGETHER_VARIABLE), whatever the timing.
    together: bool = False
    # Whether the calls go one after another instead (each once the one
    # before was answered): the place of "a warm worker's second run"
    # (WARM_SECOND_RUN below).
    in_series: bool = False


@dataclass
class Context:
    """One scenario's fixed places: the program's path is in every journal
    header, and the service's address in the tool's config hash, so every
    state is tried in the same directory against the same service."""

    workdir: Path
    payments: Payments
    recording: Path
    manifest: Path
    # Each call's arguments, and the payment intent (the order) it refunds.
    calls: list[dict[str, Any]]
    intents: list[dict[str, Any]]

    @property
    def journals(self) -> Path:
        return self.workdir / "journals"

    @property
    def arguments(self) -> dict[str, Any]:
        """The first call's: the one call of a set-up."""
        return self.calls[0]

    def env(self, record: bool = False, kill_at: str | None = None,
            together: int = 0) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("STAAL_KILL") and k not in ("STAAL_TEST_KILL_POINTS",
                                                               RECORD_VARIABLE, TOGETHER_VARIABLE)}
        env["STRIPE_SECRET_KEY"] = self.payments.key
        if record:
            env[RECORD_VARIABLE] = str(self.recording)
        if together:
            env[TOGETHER_VARIABLE] = str(together)
        if kill_at:
            env.update(STAAL_TEST_KILL_POINTS="1", STAAL_KILL_AT=kill_at,
                       STAAL_KILL_ONCE=str(self.workdir / "killed"))
        return env

    def call(self, env: dict[str, str], log: str,
             answered: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        return asyncio.run(call(self.manifest, env, self.workdir / log, self.arguments,
                                answered=answered))

    def call_all(self, env: dict[str, str], log: str,
                 answered: Callable[[int, dict[str, Any]], None] | None = None,
                 in_series: bool = False) -> list[dict[str, Any]]:
        """Every call at once, or `in_series`, in one server session (one
        call: `call`'s)."""
        if len(self.calls) == 1:
            one = None if answered is None else (lambda seen: answered(0, seen))
            return [self.call(env, log, one)]
        return asyncio.run(call_all(self.manifest, env, self.workdir / log, self.calls,
                                    answered=answered, in_series=in_series))

    def make_intents(self) -> None:
        """Each call's payment intent at the service, as first made."""
        for intent in self.intents:
            self.payments.intent(amount=intent["amount"], currency="usd", id=intent["id"])


def mark(recording: Path, what: str, **fields: Any) -> None:
    """One line in the recording, in one O_APPEND write, as staal.records.fsio's are."""
    line = json.dumps({"pid": os.getpid(), "op": "mark", "what": what, **fields})
    fd = os.open(recording, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def refund_of(seen: dict[str, Any]) -> str | None:
    if seen.get("seen") != ANSWERED or seen.get("is_error"):
        return None
    return (seen.get("structured") or {}).get("result", {}).get("refund")


# -- the set-ups ------------------------------------------------------------------


def started_once(ctx: Context) -> None:
    """A server started and stopped: the ledger, lock and run folders exist."""
    seen = ctx.call(ctx.env(), "setup.log")
    assert seen.get("seen") == ANSWERED, seen
    # The setup's own call is not the one under test: start from no run.
    _reset_journals(ctx, keep_structure=True)


def _reset_journals(ctx: Context, keep_structure: bool) -> None:
    ledger = ctx.journals / LEDGER_FILE
    for path in sorted(ctx.journals.glob("*/*/*")):
        path.unlink()
    if keep_structure:
        ledger.unlink()
        AppendLog.create(ledger).close()
    ctx.payments.reset()
    mark(ctx.recording, "reset")  # the refunds marked so far are forgotten
    ctx.make_intents()


def killed_after_reserve(ctx: Context) -> None:
    """A server killed once its reservation was durable: the next start
    releases the run, and its ledger compaction drops it."""
    started_once(ctx)
    ctx.call(ctx.env(kill_at="supervisor:reserve"), "setup-killed.log")
    assert (ctx.workdir / "killed").exists(), "the kill point was never reached"


def settled_days_ago(ctx: Context) -> None:
    """A refund settled three days ago (its ledger times moved back): past
    `server.keep` (1 day), its quota window and its once key's keep, so the
    next start's sweep deletes its files and compaction drops it."""
    seen = ctx.call(ctx.env(), "setup.log")
    assert refund_of(seen), seen
    ledger = ctx.journals / LEDGER_FILE
    events = read_log(ledger, LEDGER.decode).records
    ledger.unlink()
    with AppendLog.create(ledger) as log:
        for event in events:
            log.append(LEDGER.encode(dataclasses.replace(event, time=event.time - 3 * DAY_MS)))


SCENARIOS = (
    Scenario("refund", "one refund_order call: reserve, arguments, journal (header, GET, "
             "POST), end, settle, answer", started_once),
    Scenario("stopped run", "the refund made but its answer lost five times, while the tool's "
             "max_wait of sending it again lasts: the run stops in doubt and waits for an "
             "operator", started_once, fault=("close_after", 5)),
    Scenario("compaction", "a start that releases a run killed after its reservation and "
             "compacts the ledger without it, then a refund", killed_after_reserve),
    Scenario("retention sweep", "a start that deletes the files of a refund settled three "
             "days ago and compacts the ledger without it, then a refund", settled_days_ago,
             max_refunds=2, drops_settled=True),
    Scenario("two in flight", "two refund_order calls of two orders at once, their reserves "
             "held to share one fsync of the ledger (group commit); each call's steps as in "
             "refund", started_once, max_refunds=2, calls=2, together=True),
    # Issue 26 item 4: the second call runs in the worker that served the
    # first (runs_per_worker is above 1), so its journal is made by a process
    # that already made one, reusing its descriptor numbers; the disk model
    # maps (pid, fd) to a file at each recorded open, so the second
    # journal's writes land on the second file.
    Scenario("warm second run", "two refund_order calls of two orders, one after the other, "
             "the second a warm worker's second run", started_once, max_refunds=2, calls=2,
             in_series=True),
)

def scenario_named(name: str) -> Scenario:
    [scenario] = [s for s in SCENARIOS if s.name == name]
    return scenario


# -- recording ------------------------------------------------------------------------


def prepare(scenario: Scenario) -> Context:
    workdir = Path(tempfile.mkdtemp(prefix="staal-powerloss-"))
    recording = workdir / "recording.jsonl"
    payments = Payments(record=recording)
    try:
        intents = [payments.intent(amount=INTENT_AMOUNT, currency="usd")
                   for _ in range(scenario.calls)]
        path = manifest(workdir, payments.base, Cell("supervisor", "powerloss", ANSWERED,
                                                     fault=scenario.fault))
        data = json.loads(path.read_text())
        data["server"]["keep"] = 1
        path.write_text(json.dumps(data))
        ctx = Context(workdir, payments, recording, path,
                      [{**CALL, "order": intent["id"]} for intent in intents], intents)
        scenario.setup(ctx)
    except BaseException:
        payments.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return ctx


def record(scenario: Scenario, ctx: Context) -> list[dict[str, Any]]:
    """The phase under test, recorded; what its client saw of each call.
    The directory it starts from is synced first, so it is all durable."""
    os.sync()
    mark(ctx.recording, "begin")
    if scenario.fault:
        kind, times = scenario.fault
        ctx.payments.fault("/v1/refunds", kind, times=times)
    def answered(number: int, seen: dict[str, Any]) -> None:
        # The runs this answer was decided on are durable by now (the
        # ledger answers only once they are); none may be lost.
        runs = [entry.run for entry in read_ledger(ctx.journals / LEDGER_FILE).runs()]
        mark(ctx.recording, "answered", call=number, refund=refund_of(seen), runs=runs)

    together = len(ctx.calls) if scenario.together else 0
    seen = ctx.call_all(ctx.env(record=True, together=together), "recorded.log", answered,
                        in_series=scenario.in_series)
    mark(ctx.recording, "end")
    return seen
