"""Running one cell of the crash matrix, and judging what it saw.

A cell is one call of `refund_order` (a GET of the payment intent, then a
keyed refund POST) killed at one step; the server is started again and the
call repeated. Everything a cell expects is data: what the first call's
client sees, the recovery the servers log (their `recovered` and
`worker_lost` lines, in order), the GET and POST requests the fake service
received and the refunds it made. `run_cell` gathers what happened and
`judge` compares, so a judgement can be checked without processes.

The warm cells (issue 26) serve several calls of the tool in one worker
(`runs_per_worker` 100): calls done before the cell's call, in the same
server, each with its own order; a worker killed by the harness while it
rests between runs; or a second call made at once with the cell's.
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import psycopg

from staal.journal.records import JOURNAL, End
from staal.money import Money
from staal.records.appendlog import read_log
from staal.supervisor.store.ledger import RunEntry, read_ledger
from staal.supervisor.store.postgres.events import entries_where
from tests.helpers.payments import Payments
from tests.helpers.servers import Stderr

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
# Not a kill point either: the harness SIGKILLs a warm worker while it rests
# between runs, and waits for the pool to log its death.
RESTING = "idle"
# The pool's line for a worker that served runs and died between them.
DIED_BETWEEN_RUNS = "worker_died_between_runs"
# Runs a worker serves in the warm cells: more than any cell makes.
WARM_RUNS = 100


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
    # Warm workers: calls done in the first server before the cell's call,
    # each with its own order (and so its own run and refund).
    before: int = 0
    # A second call, with its own order, made at the same time as the cell's;
    # the pool keeps one fresh worker ahead (STAAL_TEST_POOL_AHEAD=1), so
    # the later of the two waits in the pool's line for that one's fork.
    concurrent: bool = False
    # Whether the cell's call's run starts in the worker that served the
    # call before it (None: not judged).
    reused: bool | None = None

    @property
    def label(self) -> str:
        return f"{self.process}:{self.point}" + (" (another call at once)" if self.concurrent
                                                 else "")

    @property
    def name(self) -> str:
        return self.label + ("" if self.once else " (no once)")

    @property
    def held(self) -> bool:
        return self.point == REFUND_HELD

    @property
    def resting(self) -> bool:
        return self.point == RESTING

    @property
    def warm(self) -> bool:
        return self.before > 0 or self.concurrent

    @property
    def calls(self) -> int:
        """Calls the first server is made: the earlier ones, the cell's, and the one at once."""
        return self.before + 1 + int(self.concurrent)


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
    # Warm workers. A worker that served a call is killed while it rests:
    # nothing was at stake, so there is nothing to recover, and its fork did
    # good, so no backoff; the next call is served by a fresh worker.
    Cell("worker", RESTING, ANSWERED, requests=(2, 2), refunds=2, before=1, reused=False),
    # The journal header of the warm worker's second run: that run is resumed
    # in a new worker, as a first run killed there is.
    Cell("worker", "journal#2", ANSWERED, at_first=(WORKER_LOST,), requests=(2, 2), refunds=2,
         before=1, reused=True),
    # Two calls at once, one worker ahead: one run's worker dies at its
    # refund's intent (whichever gets there first) while the other call
    # waits for a worker or runs; each is done once, under its own key.
    Cell("worker", "intent#2", ANSWERED, at_first=(WORKER_LOST,), requests=(2, 2), refunds=2,
         concurrent=True),
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
    # The cell's call's run (in a concurrent cell, the one whose worker was
    # lost), and the worker it started in.
    first_run: str | None = None
    first_worker: int | None = None
    # The first server's run_started lines, as (run id, pid), in order.
    started: list[tuple[str, int]] = field(default_factory=list)
    # What the first server's other calls (before, or at once with, the
    # cell's call) saw, in order.
    others: list[dict[str, Any]] = field(default_factory=list)
    # The first server's worker_died_unused lines: forks that did no good.
    died_unused: list[dict] = field(default_factory=list)
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
               answered: Callable[[dict[str, Any]], None] | None = None, *,
               before: Sequence[dict] = (),
               between: Callable[[Server, Stderr], dict[str, Any]] | None = None,
               alongside: dict | None = None) -> dict[str, Any]:
    """One server process, one call: {"seen": ANSWERED, ...the answer} or
    {"seen": what else}. `meanwhile` runs in a thread while the call is in
    flight; what it returns is under "meanwhile". `answered` is given the
    answer as soon as it arrives, before the server is stopped.

    Warm cells: the calls `before` are made first, one after the other;
    then `between` runs in a thread, given the server and its standard
    error to wait on (what it returns is under "between"); `alongside` is
    a call made at the same time as this one. What the other calls saw is
    under "others", in that order."""
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "staal.supervisor.app.main", "serve", str(manifest_path)],
        env=env, cwd=str(manifest_path.parent))
    # A hook that waits for the server's log lines reads them through a pipe.
    tee = Stderr(stderr) if between is not None else None
    # A local file, opened once per server.
    errlog = tee.errlog() if tee is not None else open(stderr, "a")  # noqa: ASYNC230, SIM115
    with errlog:
        try:
            async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
                if tee is not None:
                    tee.spawned()
                # As a client does before calling: the answer's schema check
                # then needs no second request after it.
                await client.list_tools()
                server = Server.of(manifest_path)

                async def one(args: dict) -> dict[str, Any]:
                    try:
                        result = await client.call_tool("refund_order", args,
                                                        read_timeout_seconds=TIMEOUT_S)
                    except Exception as exc:  # noqa: BLE001 - classified, not hidden
                        exited = await asyncio.to_thread(server.exited)
                        return {"seen": what_the_client_saw(exc, exited)}
                    return {"seen": ANSWERED, "is_error": result.is_error,
                            "structured": result.structured_content,
                            "text": result.content[0].text if result.content else ""}

                async def the_call() -> dict[str, Any]:
                    seen = await one(arguments)
                    if answered is not None and seen["seen"] == ANSWERED:
                        answered(seen)
                    return seen

                try:
                    others = [await one(args) for args in before]
                    done_between = (await asyncio.to_thread(between, server, tee)
                                    if between is not None and tee is not None else None)
                    helper = (asyncio.get_running_loop().run_in_executor(None, meanwhile, server)
                              if meanwhile else None)
                    if alongside is None:
                        seen = await the_call()
                    else:
                        seen, other = await asyncio.gather(the_call(), one(alongside))
                        others.append(other)
                    if helper is not None:
                        seen["meanwhile"] = await helper
                    if before or alongside is not None:
                        seen["others"] = others
                    if done_between is not None:
                        seen["between"] = done_between
                    return seen
                finally:
                    server.close()
        except Exception as exc:  # noqa: BLE001 - the cell reports it
            return {"seen": "; ".join(f"an error: {type(e).__name__}: {e}" for e in leaves(exc))}
        finally:
            if tee is not None:
                tee.spawned()  # if the server never started, this was never done
                # Every line in the file before it is read: the pipe ends
                # once the server and its children are gone.
                try:
                    await asyncio.to_thread(tee.wait_closed, WAIT_S)
                except AssertionError:
                    pass  # a child that outlived the server: the judgement sees what is missing


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
    if cell.warm:
        data["server"]["runs_per_worker"] = WARM_RUNS
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


def kill_resting(server: Server, stderr: Stderr) -> dict[str, Any]:
    """SIGKILL the worker the calls before ran in, resting between runs
    now that their answers arrived, and wait for the pool to log its death:
    {"killed": pid, "how": ...}, or {"error": why not}."""
    started = stderr.events("run_started")
    if not started:
        return {"error": "no run started before the worker was to be killed"}
    pid = int(started[-1]["pid"])
    family = {child.pid for child in server.process.children(recursive=True)}
    if pid not in family:
        return {"error": f"the worker {pid} of the call before is not among the server's "
                         f"children {sorted(family)}"}
    os.kill(pid, signal.SIGKILL)
    try:
        died = stderr.wait_event(DIED_BETWEEN_RUNS, timeout=WAIT_S, pid=pid)
    except AssertionError:
        return {"error": f"the pool did not log {DIED_BETWEEN_RUNS} for worker {pid} "
                         f"within {WAIT_S} s"}
    return {"killed": pid, "how": died.get("how")}


def run_cell(cell: Cell, store_dsn: str | None = None) -> Observed:
    """Run `cell`; with `store_dsn`, the ledger in that PostgreSQL store."""
    observed = Observed(cell)
    workdir = Path(tempfile.mkdtemp(prefix="staal-crash-"))
    payments = Payments()
    try:
        # One order per call: a once key each.
        calls = [{**CALL, "order": payments.intent(amount=5000, currency="usd")["id"]}
                 for _ in range(cell.calls)]
        arguments = calls[cell.before]  # the cell's call
        alongside = calls[cell.before + 1] if cell.concurrent else None
        path = manifest(workdir, payments.base, cell, postgres=store_dsn is not None)
        base_env = {k: v for k, v in os.environ.items() if not k.startswith("STAAL_KILL")}
        base_env.pop("STAAL_TEST_KILL_POINTS", None)
        base_env["STRIPE_SECRET_KEY"] = payments.key
        if store_dsn is not None:
            base_env[STORE_ENV] = store_dsn
        first_env, meanwhile = base_env, None
        between: Callable[[Server, Stderr], dict[str, Any]] | None = None
        if cell.held:
            meanwhile = kill_while_held(payments)
        elif cell.resting:
            between = kill_resting
        else:
            first_env = {**base_env, "STAAL_TEST_KILL_POINTS": "1",
                         "STAAL_KILL_AT": f"{cell.process}:{cell.point}",
                         "STAAL_KILL_ONCE": str(workdir / "killed")}
            if cell.concurrent:
                first_env["STAAL_TEST_POOL_AHEAD"] = "1"
        if cell.fault:
            kind, times = cell.fault
            payments.fault("/v1/refunds", kind, times=times,
                           hold_ms=1000 * (TIMEOUT_S + WAIT_S) if kind == "hang" else None)
        first_log, second_log = workdir / "first.log", workdir / "second.log"
        observed.first = asyncio.run(call(path, first_env, first_log, arguments, meanwhile,
                                          before=calls[:cell.before], between=between,
                                          alongside=alongside))
        observed.others = observed.first.pop("others", [])
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
        elif cell.resting:
            killed = observed.first.get("between") or {}
            observed.killed = "killed" in killed
            if "error" in killed:
                observed.problems.append(killed["error"])
        else:
            observed.killed = (workdir / "killed").exists()
        observed.repeat = asyncio.run(call(path, base_env, second_log, arguments))
        observed.at_first, started = recovery(first_log)
        observed.at_restart, _ = recovery(second_log)
        observed.started = [(e["run"], e["pid"]) for e in started]
        observed.first_run, observed.first_worker = the_cells_run(cell, observed)
        observed.died_unused = [e for e in log_events(first_log)
                                if e.get("event") == "worker_died_unused"]
        observed.requests = payments.requests()
        observed.refunds = payments.refunds()
        gather_files(workdir / "journals", observed, store_dsn)
        judge(cell, observed)
    finally:
        payments.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return observed


def the_cells_run(cell: Cell, observed: Observed) -> tuple[str | None, int | None]:
    """The cell's call's run and the worker it started in: the run started
    after the calls before; in a concurrent cell, the run whose worker was
    lost (the kill point is met by whichever of the two gets there first)."""
    started = observed.started
    if cell.concurrent:
        lost = [run for run, event in observed.at_first if event.startswith("worker lost")]
        run = lost[0] if lost else (started[0][0] if started else None)
        return run, next((pid for r, pid in started if r == run), None)
    if len(started) > cell.before:
        return started[cell.before]
    return None, None


def log_events(stderr: Path) -> list[dict]:
    """Every line of a server's standard error that is a JSON object."""
    events: list[dict] = []
    for line in stderr.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def recovery(stderr: Path) -> tuple[list[tuple[str, str]], list[dict]]:
    """The recovery one server logged, as (run id, event) in order, and its
    run_started lines. A worker lost counts as WORKER_LOST only when the
    same run then started again, resumed, in another worker."""
    events = log_events(stderr)
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


def every_run(dsn: str) -> tuple[RunEntry, ...]:
    """Every run a PostgreSQL store holds, in the ledger's order (the test
    reads the whole ledger; status and the console never do)."""
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        return tuple(entries_where(cur, "true", {}))


def gather_files(journals: Path, observed: Observed, store_dsn: str | None = None) -> None:
    runs = (read_ledger(journals / "server.ledger").runs() if store_dsn is None
            else every_run(store_dsn))
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
        problems.append("the service never held the refund, so nothing was killed" if cell.held
                        else "the resting worker was never killed" if cell.resting
                        else "the kill point was never reached")
    if cell.held and observed.first_worker not in observed.family:
        problems.append(f"the run's worker {observed.first_worker} was not among the supervisor's "
                        f"children {observed.family} when it was killed")
    if observed.survivors:
        problems.append(f"the supervisor's children {observed.survivors} outlived it")
    if observed.first.get("seen") != cell.first:
        problems.append(f"the first call saw {observed.first.get('seen')!r}, expected {cell.first!r}")
    judge_recovery(cell, observed)
    judge_warm(cell, observed)
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


def judge_warm(cell: Cell, observed: Observed) -> None:
    """The calls besides the cell's are done, each by a refund of its own;
    the cell's call ran in the worker it should have; and no worker died
    unused (a warm worker killed between runs served runs: its fork did good)."""
    problems = observed.problems
    if len(observed.others) != cell.calls - 1:
        problems.append(f"{len(observed.others)} other calls were answered, expected "
                        f"{cell.calls - 1}")
    made = {r["id"] for r in observed.refunds}
    answered = [observed.first] if observed.first.get("seen") == ANSWERED else []
    for at, other in enumerate(observed.others):
        if other.get("seen") != ANSWERED or other.get("is_error"):
            problems.append(f"the other call {at + 1} was not done: {other}")
        else:
            answered.append(other)
    if cell.once and answered:
        named = [a["structured"]["result"]["refund"] for a in answered if a["structured"]]
        if len(set(named)) != len(named) or not set(named) <= made:
            problems.append(f"the calls answered refunds {named}, not one each of those made "
                            f"{sorted(made)}")
    if cell.reused is not None and cell.before:
        if len(observed.started) <= cell.before:
            problems.append(f"the cell's call never started: runs started {observed.started}")
        else:
            previous, own = observed.started[cell.before - 1][1], observed.started[cell.before][1]
            if (previous == own) != cell.reused:
                problems.append(f"the cell's call started in worker {own}, "
                                + (f"not in the warm worker {previous} of the call before it"
                                   if cell.reused else "the worker killed after the call before it"))
    if observed.died_unused:
        problems.append(f"workers died unused: {[e.get('how') for e in observed.died_unused]}")


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
