"""Running one cell of the crash matrix, and judging what it saw.

A cell is one call of `refund_order` (a GET of the payment intent, then a
keyed refund POST) killed at one step; the server is started again and the
call repeated. Everything a cell expects is data: what the first call's
client sees, the recovery the servers log (their `recovered` and
`worker_lost` lines, in order), the GET and POST requests the fake service
received and the refunds it made. `run_cell` gathers what happened and
`judge` compares, so a judgement can be checked without processes.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from staal.journal.records import JOURNAL, End
from staal.money import Money
from staal.records.appendlog import read_log
from staal.supervisor.store.ledger import read_ledger
from staal.supervisor.store.postgres.view import read_postgres
from tests.helpers.payments import Payments

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = (ROOT / "examples" / "refund.py").read_text()
CALL = {"order": "", "amount": {"amount": "20.00", "currency": "USD"}}
# The client's read timeout: a server that hangs instead of dying is seen
# as a timeout, which no cell expects.
TIMEOUT_S = 60
# How long a process may take to be gone once it was killed (or its
# connection closed), and the service to get to a state a cell waits for.
WAIT_S = 20
# The refund's place in the program: its idempotency key is `<run id>-2`.
REFUND_OP = 2

# What the first call's client sees.
ANSWERED = "answered"
CLOSED = "connection closed"  # end of file on stdout from a server that is gone

# Recovery, as the servers log it (supervisor/recovery/runner.py, supervisor/calls/pipeline.py).
WORKER_LOST = "worker lost, resumed in a new worker"
RELEASED = "released: it never started"
SETTLED = "settled from its end"
RESUMED = ("resuming", "resumed: done")

# Not a kill point: the harness SIGKILLs the supervisor while the service
# holds the refund POST its worker sent.
REFUND_HELD = "refund held"


@dataclass(frozen=True)
class Cell:
    process: str
    point: str
    # What the first call's client sees: ANSWERED or CLOSED.
    first: str
    # The recovery the first server logs while it runs, and the one the
    # restarted server logs at its start, each in order.
    at_first: tuple[str, ...] = ()
    at_restart: tuple[str, ...] = ()
    # GET and POST requests at the service, and refunds it made, once the
    # repeat is answered.
    requests: tuple[int, int] = (1, 1)
    refunds: int = 1
    once: bool = True
    # A fault on POST /v1/refunds for the first call: (kind, times).
    fault: tuple[str, int] | None = None

    @property
    def name(self) -> str:
        return f"{self.process}:{self.point}" + ("" if self.once else " (no once)")

    @property
    def held(self) -> bool:
        return self.point == REFUND_HELD


CELLS = (
    Cell("supervisor", "reserve", CLOSED, at_restart=(RELEASED,)),
    Cell("supervisor", "inputs", CLOSED, at_restart=(RELEASED,)),
    # Inside the journal's creation: the file exists, its header not yet
    # written. No journal, so the run never started: the new worker starts it.
    Cell("worker", "journal_file", ANSWERED, at_first=(WORKER_LOST,)),
    Cell("worker", "journal", ANSWERED, at_first=(WORKER_LOST,)),
    # The GET's intent: it was never sent, and the new worker sends it.
    Cell("worker", "intent", ANSWERED, at_first=(WORKER_LOST,)),
    # The GET's outcome: the new worker replays it instead of reading again.
    Cell("worker", "outcome", ANSWERED, at_first=(WORKER_LOST,)),
    # The refund's intent: never sent; the new worker sends it, under its key.
    Cell("worker", "intent#2", ANSWERED, at_first=(WORKER_LOST,)),
    Cell("worker", "outcome#2", ANSWERED, at_first=(WORKER_LOST,)),
    # The end record: the new worker finds the journal ended and reports it.
    Cell("worker", "end", ANSWERED, at_first=(WORKER_LOST,)),
    # A refund whose answers were lost (one refund made, then sent again
    # under its key) until the tool's max_wait of sending it again (3 s: at
    # most five attempts) passed: the run waits; the next start sends it
    # again until the sixth POST gets the refund's saved answer.
    Cell("supervisor", "waiting", CLOSED, at_restart=RESUMED, requests=(1, 6),
         fault=("close_after", 5)),
    # The service holds the refund; the supervisor dies, its zygote and worker
    # with it; the service makes the refund for nobody, and the next start
    # sends it again under its key and gets that refund's saved answer.
    Cell("supervisor", REFUND_HELD, CLOSED, at_restart=RESUMED, requests=(1, 2),
         fault=("hang", 1)),
    Cell("supervisor", "ended", CLOSED, at_restart=(SETTLED,)),
    Cell("supervisor", "settle", CLOSED),
    Cell("supervisor", "answer", ANSWERED),
    Cell("supervisor", "reserve", CLOSED, at_restart=(RELEASED,), once=False),
    Cell("supervisor", "settle", CLOSED, requests=(2, 2), refunds=2, once=False),
    Cell("worker", "intent#2", ANSWERED, at_first=(WORKER_LOST,), requests=(2, 2), refunds=2,
         once=False),
)


def cell_named(name: str) -> Cell:
    [cell] = [c for c in CELLS if c.name == name]
    return cell


@dataclass
class Observed:
    cell: Cell
    first: dict[str, Any] = field(default_factory=dict)
    repeat: dict[str, Any] = field(default_factory=dict)
    killed: bool = False
    # The held cell: the supervisor's children (zygote, workers) when it was
    # killed, and those still running afterwards.
    family: list[int] = field(default_factory=list)
    survivors: list[int] = field(default_factory=list)
    # (run id, event) per server, in order.
    at_first: list[tuple[str, str]] = field(default_factory=list)
    at_restart: list[tuple[str, str]] = field(default_factory=list)
    # The first run the first server started, and the worker it started in.
    first_run: str | None = None
    first_worker: int | None = None
    requests: list[dict] = field(default_factory=list)
    refunds: list[dict] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    unsettled: list[str] = field(default_factory=list)
    charged_minor: int = 0
    inputs_left: list[str] = field(default_factory=list)
    # Per journal: its record types, in order.
    journals: dict[str, list[str]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems

    def count(self, method: str) -> int:
        return sum(1 for r in self.requests if r["method"] == method)

    def explain(self) -> str:
        return "; ".join(self.problems) + (
            f"\nfirst {self.first}\nrepeat {self.repeat}\nrecovery at first {self.at_first}"
            f"\nrecovery at restart {self.at_restart}\nrequests "
            f"{[(r['method'], r['path'], r['headers'].get('idempotency-key')) for r in self.requests]}")


# -- the client ----------------------------------------------------------------


def what_the_client_saw(error: BaseException, exited: bool) -> str:
    """CLOSED only for the transport ending because the server process is
    gone; a read timeout, an error the server sent, or a connection closed
    by a server still running are each something else."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

    if isinstance(error, MCPError):
        if error.error.code == CONNECTION_CLOSED and error.error.message == "Connection closed":
            return CLOSED if exited else "the connection closed while the server still ran"
        if error.error.code == REQUEST_TIMEOUT:
            return f"a read timeout ({error.error.message})"
        return f"an error from the server: {error.error.code} {error.error.message}"
    return f"an error: {type(error).__name__}: {error}"


def leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


@dataclass
class Server:
    """The server process one call started (a child of this process), with a
    pidfd that becomes readable when it exits: waiting on it neither polls
    nor reaps (the SDK's event loop does that)."""

    process: psutil.Process
    pidfd: int

    @classmethod
    def of(cls, manifest_path: Path) -> Server:
        [process] = [p for p in psutil.Process().children()
                     if str(manifest_path) in p.cmdline() and "serve" in p.cmdline()]
        return cls(process, os.pidfd_open(process.pid))

    def exited(self, timeout: float = WAIT_S) -> bool:
        return gone(self.pidfd, timeout)

    def close(self) -> None:
        os.close(self.pidfd)


def gone(pidfd: int, timeout: float) -> bool:
    readable, _, _ = select.select([pidfd], [], [], timeout)
    return bool(readable)


async def call(manifest_path: Path, env: dict[str, str], stderr: Path, arguments: dict,
               meanwhile: Callable[[Server], Any] | None = None,
               answered: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """One server process, one call: {"seen": ANSWERED, ...the answer} or
    {"seen": what else}. `meanwhile` runs in a thread while the call is in
    flight; what it returns is under "meanwhile". `answered` is given the
    answer as soon as it arrives, before the server is stopped."""
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "staal.supervisor.app.main", "serve", str(manifest_path)],
        env=env, cwd=str(manifest_path.parent))
    with open(stderr, "a") as errlog:  # noqa: ASYNC230 - a local file, opened once per server
        try:
            async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
                # As a client does before calling: the answer's schema check
                # then needs no second request after it.
                await client.list_tools()
                server = Server.of(manifest_path)
                try:
                    helper = (asyncio.get_running_loop().run_in_executor(None, meanwhile, server)
                              if meanwhile else None)
                    try:
                        result = await client.call_tool("refund_order", arguments,
                                                        read_timeout_seconds=TIMEOUT_S)
                    except Exception as exc:  # noqa: BLE001 - classified, not hidden
                        exited = await asyncio.to_thread(server.exited)
                        seen: dict[str, Any] = {"seen": what_the_client_saw(exc, exited)}
                    else:
                        seen = {"seen": ANSWERED, "is_error": result.is_error,
                                "structured": result.structured_content,
                                "text": result.content[0].text if result.content else ""}
                        if answered is not None:
                            answered(seen)
                    if helper is not None:
                        seen["meanwhile"] = await helper
                    return seen
                finally:
                    server.close()
        except Exception as exc:  # noqa: BLE001 - the cell reports it
            return {"seen": "; ".join(f"an error: {type(e).__name__}: {e}" for e in leaves(exc))}


# -- one cell ---------------------------------------------------------------------


# The variable a cell on the PostgreSQL store names for its DSN.
STORE_ENV = "STAAL_CRASH_STORE_DSN"


def manifest(workdir: Path, base: str, cell: Cell, postgres: bool = False) -> Path:
    (workdir / "refund.py").write_text(PROGRAM)
    tool: dict[str, Any] = {
        "name": "refund_order", "description": "Refund part of an order.",
        "program": "refund.py",
        "grants": {"pay": {
            "cap": "payments.stripe.refund", "each": {"amount": "50.00", "currency": "USD"},
            "uses": 1, "base_url": base,
            "needs": {"get": {"cap": "net.http.get", "only": [base + "/v1/payment_intents/*"]},
                      "post": {"cap": "net.http.post", "only": [base + "/v1/refunds"],
                               "idempotency_key": True},
                      "key": {"env": "STRIPE_SECRET_KEY"}}}},
        # A held refund must outlast the time the harness takes to kill the
        # supervisor, or the worker would give up on it first.
        "net": {"timeout_ms": 120_000 if cell.held else 5000, "connect_timeout_ms": 2000},
        "quota": {"window": "24h", "calls": 10, "money": {"amount": "500.00", "currency": "USD"}},
    }
    if cell.once:
        tool["once"] = {"by": ["order"], "keep": "1d"}
    if cell.fault and cell.fault[0] == "close_after":
        # A keyed refund whose answers are lost is sent again for max_wait
        # (worker/runs/resend.py): waits of 0, 0.2, 0.4 and 0.8 s fit in 3 s, a
        # sixth attempt never does, so five lost answers make the run wait.
        tool["max_wait"] = "3s"
    data: dict[str, Any] = {"server": {"name": "crash", "journals": "journals"}, "tools": [tool]}
    if postgres:
        data["server"]["store"] = {"postgres": {"dsn": {"env": STORE_ENV}}}
    path = workdir / "manifest.json"
    path.write_text(json.dumps(data))
    return path


def kill_while_held(payments: Payments) -> Callable[[Server], dict[str, list[int]]]:
    """Once the service holds the refund: SIGKILL the supervisor; the pids
    of its children (zygote, workers) then, and of those that outlived it."""

    def kill(server: Server) -> dict[str, list[int]]:
        payments.wait("/v1/refunds", held=1, timeout=WAIT_S)
        family = []
        for child in server.process.children(recursive=True):
            try:
                family.append((child.pid, os.pidfd_open(child.pid)))
            except ProcessLookupError:
                pass  # already gone
        try:
            os.kill(server.process.pid, signal.SIGKILL)
            return {"family": [pid for pid, _ in family],
                    "survivors": [pid for pid, fd in family if not gone(fd, WAIT_S)]}
        finally:
            for _, fd in family:
                os.close(fd)

    return kill


def run_cell(cell: Cell, store_dsn: str | None = None) -> Observed:
    """Run `cell`; with `store_dsn`, the ledger in that PostgreSQL store."""
    observed = Observed(cell)
    workdir = Path(tempfile.mkdtemp(prefix="staal-crash-"))
    payments = Payments()
    try:
        intent = payments.intent(amount=5000, currency="usd")
        arguments = {**CALL, "order": intent["id"]}
        path = manifest(workdir, payments.base, cell, postgres=store_dsn is not None)
        base_env = {k: v for k, v in os.environ.items() if not k.startswith("STAAL_KILL")}
        base_env.pop("STAAL_TEST_KILL_POINTS", None)
        base_env["STRIPE_SECRET_KEY"] = payments.key
        if store_dsn is not None:
            base_env[STORE_ENV] = store_dsn
        first_env, meanwhile = base_env, None
        if cell.held:
            meanwhile = kill_while_held(payments)
        else:
            first_env = {**base_env, "STAAL_TEST_KILL_POINTS": "1",
                         "STAAL_KILL_AT": f"{cell.process}:{cell.point}",
                         "STAAL_KILL_ONCE": str(workdir / "killed")}
        if cell.fault:
            kind, times = cell.fault
            payments.fault("/v1/refunds", kind, times=times,
                           hold_ms=1000 * (TIMEOUT_S + WAIT_S) if kind == "hang" else None)
        first_log, second_log = workdir / "first.log", workdir / "second.log"
        observed.first = asyncio.run(call(path, first_env, first_log, arguments, meanwhile))
        if cell.held:
            killed = observed.first.get("meanwhile") or {}
            observed.killed = bool(killed)
            observed.family, observed.survivors = killed.get("family", []), killed.get("survivors", [])
            # The worker is gone: let the service finish the refund it holds,
            # for nobody, before the restart sends it again.
            payments.release()
            try:
                payments.wait("/v1/refunds", finished=1, timeout=WAIT_S)
            except AssertionError as exc:
                observed.problems.append(f"the held refund never finished: {exc}")
        else:
            observed.killed = (workdir / "killed").exists()
        observed.repeat = asyncio.run(call(path, base_env, second_log, arguments))
        observed.at_first, started = recovery(first_log)
        observed.at_restart, _ = recovery(second_log)
        if started:
            observed.first_run, observed.first_worker = started[0]["run"], started[0]["pid"]
        observed.requests = payments.requests()
        observed.refunds = payments.refunds()
        gather_files(workdir / "journals", observed, store_dsn)
        judge(cell, observed)
    finally:
        payments.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return observed


def recovery(stderr: Path) -> tuple[list[tuple[str, str]], list[dict]]:
    """The recovery one server logged, as (run id, event) in order, and its
    run_started lines. A worker lost counts as WORKER_LOST only when the
    same run then started again, resumed, in another worker."""
    events: list[dict] = []
    for line in stderr.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    started = [e for e in events if e.get("event") == "run_started"]
    found = []
    for at, event in enumerate(events):
        if event.get("event") == "recovered":
            rule = event["rule"] + (f": {event['outcome']}" if "outcome" in event else "")
            found.append((event["run"], rule))
        elif event.get("event") == "worker_lost":
            again = [e for e in events[at + 1:] if e.get("event") == "run_started"
                     and e["run"] == event["run"] and e.get("resume") and e["pid"] != event["pid"]]
            found.append((event["run"], WORKER_LOST if again else "worker lost, not resumed"))
    return found, started


def gather_files(journals: Path, observed: Observed, store_dsn: str | None = None) -> None:
    state = (read_ledger(journals / "server.ledger") if store_dsn is None
             else read_postgres(store_dsn).state)
    runs = state.runs()
    observed.runs = [e.run for e in runs]
    observed.unsettled = [e.run for e in runs if e.state == "unsettled"]
    charged = Money.zero("USD")
    for entry in runs:
        for money in entry.charged or ():
            charged = charged + money
    observed.charged_minor = charged.minor
    observed.inputs_left = sorted(p.name for p in journals.glob("*/*/*.inputs.json"))
    for path in sorted(journals.glob("*/*/*.journal")):
        records = read_log(path, decode=JOURNAL.decode).records
        observed.journals[path.stem] = [type(r).__name__ for r in records]


# -- the judgement --------------------------------------------------------------


def judge(cell: Cell, observed: Observed) -> None:
    problems = observed.problems
    if not observed.killed:
        problems.append("the kill point was never reached" if not cell.held
                        else "the service never held the refund, so nothing was killed")
    if cell.held and observed.first_worker not in observed.family:
        problems.append(f"the run's worker {observed.first_worker} was not among the supervisor's "
                        f"children {observed.family} when it was killed")
    if observed.survivors:
        problems.append(f"the supervisor's children {observed.survivors} outlived it")
    if observed.first.get("seen") != cell.first:
        problems.append(f"the first call saw {observed.first.get('seen')!r}, expected {cell.first!r}")
    judge_recovery(cell, observed)
    judge_service(cell, observed)
    repeat = observed.repeat
    if repeat.get("seen") != ANSWERED or repeat["is_error"]:
        problems.append(f"the repeated call was not done: {repeat}")
    elif cell.once:
        got = repeat["structured"]["result"]["refund"]
        if got not in {r["id"] for r in observed.refunds}:
            problems.append(f"the repeat answered refund {got}, not the one made")
        first = observed.first
        if first.get("seen") == ANSWERED and first["structured"] != repeat["structured"]:
            problems.append("the repeat's answer differs from the first answer")
    if observed.unsettled:
        problems.append(f"runs left unsettled: {observed.unsettled}")
    refunded = sum(r["amount"] for r in observed.refunds)
    if observed.charged_minor != refunded:
        problems.append(f"the ledger settled {observed.charged_minor} (minor units) but the "
                        f"service refunded {refunded}")
    if observed.inputs_left:
        problems.append(f"arguments files left after every run settled: {observed.inputs_left}")
    for run, records in observed.journals.items():
        if records.count(End.__name__) != 1 or records[-1] != End.__name__:
            problems.append(f"run {run}'s journal does not end once, at its end: {records}")


def judge_recovery(cell: Cell, observed: Observed) -> None:
    for where, expected, got in (("the first server", cell.at_first, observed.at_first),
                                 ("the restarted server", cell.at_restart, observed.at_restart)):
        events = tuple(event for _, event in got)
        if events != expected:
            observed.problems.append(f"{where} logged recovery {list(events) or 'none'}, "
                                     f"expected {list(expected) or 'none'}")
    runs = {run for run, _ in observed.at_first + observed.at_restart}
    if observed.first_run is not None:
        runs.add(observed.first_run)
    if len(runs) > 1:
        observed.problems.append(f"recovery concerned runs {sorted(runs)}, not only the first call's")


def judge_service(cell: Cell, observed: Observed) -> None:
    """Counted at the service, so a duplicate POST is caught even when its
    key made the service answer it without a second refund."""
    problems = observed.problems
    seen = (observed.count("GET"), observed.count("POST"))
    if seen != cell.requests or len(observed.requests) != sum(seen):
        problems.append(f"the service got {seen[0]} GET and {seen[1]} POST "
                        f"({len(observed.requests)} requests), expected {cell.requests[0]} GET "
                        f"and {cell.requests[1]} POST")
    if len(observed.refunds) != cell.refunds:
        problems.append(f"{len(observed.refunds)} refunds at the service, expected {cell.refunds}")
    posts = [r for r in observed.requests if r["method"] == "POST"]
    keys = [r["headers"].get("idempotency-key") for r in posts]
    runs_keys = {f"{run}-{REFUND_OP}" for run in observed.runs}
    strangers = sorted({str(k) for k in keys if k not in runs_keys})
    if strangers:
        problems.append(f"POSTs under keys no run of the ledger sends: {strangers}")
    if len(set(keys)) != len(observed.refunds):
        problems.append(f"{len(set(keys))} idempotency keys for {len(observed.refunds)} refunds")
    if cell.held:
        held = [r for r in posts if r["finished"] and r["hung_up"]]
        if len(held) != 1 or posts[0] is not held[0]:
            problems.append("the held refund's client did not hang up before its answer "
                            f"(POSTs finished/hung up: "
                            f"{[(r['finished'], r['hung_up']) for r in posts]})")
    elif any(r["hung_up"] for r in observed.requests):
        problems.append("a client hung up on the service, though nobody died inside a request")
