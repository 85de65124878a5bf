"""Running one cell of the crash matrix."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from staal.money import Money
from staal.supervisor.ledger import read_ledger
from tests.payments import Payments

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = (ROOT / "examples" / "refund.py").read_text()
CALL = {"order": "", "amount": {"amount": "20.00", "currency": "USD"}}
TIMEOUT_S = 60


@dataclass(frozen=True)
class Cell:
    process: str
    point: str
    rule: str
    # What the first call's client sees: its answer, or the server gone.
    first_answered: bool
    once: bool = True
    # Refunds at the service once the repeat is answered.
    refunds: int = 1

    @property
    def name(self) -> str:
        return f"{self.process}:{self.point}" + ("" if self.once else " (no once)")


CELLS = (
    Cell("supervisor", "reserve", "released: it never started", False, refunds=1),
    Cell("supervisor", "inputs", "released: it never started", False, refunds=1),
    Cell("worker", "journal", "resumed in a new worker", True),
    Cell("worker", "intent", "resumed in a new worker (the read resent)", True),
    Cell("worker", "intent#2", "resumed in a new worker (the keyed refund resent once)", True),
    Cell("worker", "outcome#2", "resumed in a new worker (the refund replayed)", True),
    Cell("supervisor", "waiting", "resumed at start: the keyed refund resent, then settled", False),
    Cell("supervisor", "settle", "nothing to recover; its arguments file removed", False),
    Cell("supervisor", "answer", "nothing to recover", False),
    Cell("supervisor", "reserve", "released: it never started; the repeat is a new run",
         False, once=False, refunds=1),
    Cell("supervisor", "settle", "nothing to recover; the repeat is a new run", False,
         once=False, refunds=2),
    Cell("worker", "intent#2", "resumed in a new worker; the repeat is a new run", True,
         once=False, refunds=2),
)


@dataclass
class Observed:
    cell: Cell
    first: Any = None
    repeat: Any = None
    rules: list[str] = field(default_factory=list)
    requests: dict[str, int] = field(default_factory=dict)
    refunds: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems


def manifest(workdir: Path, base: str, once: bool) -> Path:
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
        "net": {"timeout_ms": 5000, "connect_timeout_ms": 2000},
        "quota": {"window": "24h", "calls": 10, "money": {"amount": "500.00", "currency": "USD"}},
    }
    if once:
        tool["once"] = {"by": ["order"], "keep": "1d"}
    data = {"server": {"name": "crash", "journals": "journals"}, "tools": [tool]}
    path = workdir / "manifest.json"
    path.write_text(json.dumps(data))
    return path


async def call(manifest_path: Path, env: dict[str, str], stderr: Path, arguments: dict) -> Any:
    """One server process, one call; the answer, or "server gone"."""
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "staal.supervisor.cli", "serve", str(manifest_path)],
        env=env, cwd=str(manifest_path.parent))
    with open(stderr, "a") as errlog:
        try:
            async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
                result = await client.call_tool("refund_order", arguments,
                                                read_timeout_seconds=TIMEOUT_S)
                return {"is_error": result.is_error, "structured": result.structured_content,
                        "text": result.content[0].text if result.content else ""}
        except Exception as exc:  # the server died under the client
            return {"server_gone": f"{type(exc).__name__}"}


def recovered_rules(stderr: Path) -> list[str]:
    rules = []
    for line in stderr.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") == "recovered":
            rules.append(event["rule"])
        elif event.get("event") == "worker_lost":
            rules.append("worker lost: resumed in a new worker")
    return rules


def check_ledger(journals: Path, observed: Observed, payments: Payments) -> None:
    state = read_ledger(journals / "server.ledger")
    runs = state.runs()
    unsettled = [e.run for e in runs if e.state == "unsettled"]
    if unsettled:
        observed.problems.append(f"runs left unsettled: {unsettled}")
    charged = Money.zero("USD")
    for entry in runs:
        for money in entry.charged or ():
            charged = charged + money
    refunded = sum(r["amount"] for r in payments.refunds())
    if charged.minor != refunded:
        observed.problems.append(f"the ledger settled {charged} but the service refunded {refunded}")


def run_cell(cell: Cell) -> Observed:
    observed = Observed(cell)
    workdir = Path(tempfile.mkdtemp(prefix="staal-crash-"))
    payments = Payments()
    try:
        intent = payments.intent(amount=5000, currency="usd")
        arguments = {**CALL, "order": intent["id"]}
        path = manifest(workdir, payments.base, cell.once)
        base_env = {k: v for k, v in os.environ.items() if not k.startswith("STAAL_KILL")}
        base_env.pop("STAAL_TEST_KILL_POINTS", None)
        base_env["STRIPE_SECRET_KEY"] = payments.key
        killing = {**base_env, "STAAL_TEST_KILL_POINTS": "1",
                   "STAAL_KILL_AT": f"{cell.process}:{cell.point}",
                   "STAAL_KILL_ONCE": str(workdir / "killed")}
        if cell.point == "waiting":
            payments.fault("/v1/refunds", "close_after", times=3)
        first_log, second_log = workdir / "first.log", workdir / "second.log"
        observed.first = asyncio.run(call(path, killing, first_log, arguments))
        if not (workdir / "killed").exists():
            observed.problems.append("the kill point was never reached")
        answered = "server_gone" not in observed.first
        if answered != cell.first_answered:
            observed.problems.append(f"first call answered={answered}, expected {cell.first_answered}")
        observed.repeat = asyncio.run(call(path, base_env, second_log, arguments))
        observed.rules = recovered_rules(first_log) + recovered_rules(second_log)
        judge(cell, observed, payments, workdir / "journals")
    finally:
        payments.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return observed


def judge(cell: Cell, observed: Observed, payments: Payments, journals: Path) -> None:
    requests = payments.requests()
    observed.requests = {
        "GET": sum(1 for r in requests if r["method"] == "GET"),
        "POST": sum(1 for r in requests if r["method"] == "POST"),
    }
    refunds = payments.refunds()
    observed.refunds = len(refunds)
    if observed.refunds != cell.refunds:
        observed.problems.append(f"{observed.refunds} refunds at the service, expected {cell.refunds}")
    repeat = observed.repeat
    if "server_gone" in repeat or repeat["is_error"]:
        observed.problems.append(f"the repeated call was not done: {repeat}")
    elif cell.once:
        refund_ids = {r["id"] for r in refunds}
        got = repeat["structured"]["result"]["refund"]
        if got not in refund_ids:
            observed.problems.append(f"the repeat answered refund {got}, not the one made")
        if "server_gone" not in observed.first and observed.first["structured"] != repeat["structured"]:
            observed.problems.append("the repeat's answer differs from the first answer")
    check_ledger(journals, observed, payments)
    left = sorted(p.name for p in journals.glob("*/*/*.inputs.json"))
    if left:
        observed.problems.append(f"arguments files left after every run settled: {left}")
