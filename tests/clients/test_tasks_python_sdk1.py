"""The official Python SDK 1.x's experimental tasks client (MCP 2025-11-25,
`mcp` 1.30.0 pinned in tests/py1/requirements.txt, in a venv of its own:
the project's has mcp 2.x, which dropped that client) against the real
`staal-supervisor serve`, over stdio and over Streamable HTTP. A refund
tool that may be a task (`"task": "optional"`): the SDK sees the tasks
capability and the tool's execution.taskSupport, creates a task with
`call_tool_as_task`, polls it with `poll_task` (its refund held at the
fake payment service until a poll has answered `working`, then let go),
fetches its result and lists it. The task is the run the ledger holds,
settled done, and the refund was made once. The SDK's own models check
every answer.

tests/py1/tasks_session.py is the client; it runs with tests/py1/.venv's
Python, which the README's first command makes. Without it these tests
fail saying how to make it; they are never skipped.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from staal.protocol.mcp.revisions import LEGACY
from tests.clients.test_client_typescript import ROOT, TIMEOUT, server_env, supervisor_command
from tests.helpers.flood import ledger_holds, refunded_exactly_once
from tests.helpers.http_servers import HttpServer
from tests.helpers.payments import Payments
from tests.helpers.servers import Site, stripe_refund_grant

PY1 = ROOT / "tests" / "py1"
PY1_PYTHON = PY1 / ".venv" / "bin" / "python"
PINS = PY1 / "requirements.txt"
INSTALL_PY1 = ("python3 -m venv tests/py1/.venv && "
               "tests/py1/.venv/bin/pip install -r tests/py1/requirements.txt")
REFUNDS = "/v1/refunds"
REFUND = """
from staal import Money
from staal.caps import StripeRefund

def main(order: str, pay: StripeRefund) -> dict:
    pay.payment_intent(order)
    return {"refund": pay.refund(order, Money("20", "USD"), "requested_by_customer")["id"]}
"""
HELD_MS = 60_000  # the refund is held until the client lets it go


def pins() -> dict[str, str]:
    """tests/py1/requirements.txt: every package's exact version, by normalized name."""
    found = {}
    for line in PINS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            found[re.sub(r"[-_.]+", "-", name).lower()] = version
    return found


def require_py1() -> None:
    """tests/py1/.venv holds the pinned SDK 1.x, or the test fails saying how."""
    if not PY1_PYTHON.is_file():
        pytest.fail(f"{PY1_PYTHON} is missing: run `{INSTALL_PY1}` from the project root (the "
                    "Python SDK 1.x the tasks tests drive is pinned in tests/py1/requirements.txt)")


def installed_py1() -> dict[str, str]:
    """Every distribution in tests/py1/.venv but pip and setuptools, by normalized name."""
    require_py1()
    listing = ("import importlib.metadata as m, json; print(json.dumps("
               "{d.metadata['Name']: d.version for d in m.distributions()}))")
    # Run from tests/py1: from the project root, `-c` would also find its staal.egg-info.
    done = subprocess.run([str(PY1_PYTHON), "-c", listing], cwd=PY1, capture_output=True,
                          text=True, timeout=TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr
    return {re.sub(r"[-_.]+", "-", name).lower(): version
            for name, version in json.loads(done.stdout).items()
            if name.lower() not in ("pip", "setuptools")}


def test_the_python_sdk1_is_pinned_exactly_in_its_own_venv_and_installed_as_pinned():
    wanted = pins()
    assert wanted["mcp"].startswith("1."), wanted["mcp"]
    assert installed_py1() == wanted


def refund_site(root: Path, payments: Payments) -> Site:
    root.mkdir()
    site = Site(root)
    site.program("refund.py", REFUND)
    site.write([{"name": "refund", "program": "refund.py", "task": "optional",
                 "grants": {"pay": stripe_refund_grant(payments.base)}}])
    return site


def session(plan: dict[str, Any]) -> dict[str, Any]:
    require_py1()
    done = subprocess.run([str(PY1_PYTHON), str(PY1 / "tasks_session.py")],
                          input=json.dumps({"timeoutS": 60, **plan}), cwd=PY1, check=False,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert "fatal" not in out, f"{out['fatal']}\nclient stderr:\n{done.stderr}"
    return out


@contextmanager
def reached(transport: str, site: Site, tmp_path: Path, key: str) -> Iterator[dict[str, Any]]:
    """Where the client finds the server: a command it starts (stdio), or
    the URL of one serving Streamable HTTP."""
    env = {"STRIPE_SECRET_KEY": key}
    if transport == "stdio":
        yield {"server": {"command": supervisor_command(), "args": ["serve", str(site.manifest)],
                          "cwd": str(site.root), "env": {**server_env(tmp_path / "tmp"), **env}}}
    else:
        with HttpServer(site, env=env) as http:
            yield {"url": http.url}


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_the_python_sdk1_tasks_client_creates_polls_and_fetches_a_task(tmp_path, payments, transport):
    site = refund_site(tmp_path / "server", payments)
    intent = payments.intent(amount=5000)["id"]
    payments.fault(REFUNDS, "hang", times=1, hold_ms=HELD_MS)
    # Once a poll answered `working`: wait until the refund is held, then let it go.
    gate = [{"method": "GET", "url": f"{payments.base}/_control/wait?path={REFUNDS}&held=1"
                                     f"&timeout_ms={HELD_MS}"},
            {"method": "POST", "url": f"{payments.base}/_control/release"}]
    with reached(transport, site, tmp_path, payments.key) as where:
        out = session({**where, "tool": "refund", "arguments": {"order": intent},
                       "afterFirstWorking": gate})
    assert out["steps"] == ["listed", "created", "polled", "fetched", "closed"], out
    assert out["protocolVersion"] == LEGACY
    assert out["capabilities"]["tasks"]["requests"] == {"tools": {"call": {}}}
    (refund,) = [t for t in out["tools"] if t["name"] == "refund"]
    assert refund["execution"] == {"taskSupport": "optional"}
    task = out["created"]["task"]
    task_id = task["taskId"]
    assert task["status"] == "working"
    # Polled while its refund was held, then to its end.
    statuses = [p["status"] for p in out["polled"]]
    assert statuses[0] == "working" and statuses[-1] == "completed", out["polled"]
    assert set(statuses) == {"working", "completed"}
    assert {p["taskId"] for p in out["polled"]} == {task_id}
    assert out["polled"][-1]["pollInterval"] == 1000  # the manifest's default, 1s
    result = out["result"]
    assert result["isError"] is False
    assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
    assert [t["taskId"] for t in out["listed"]["tasks"]] == [task_id]
    # The task is the run the ledger holds, settled done; one refund, the one answered.
    refunds = refunded_exactly_once(payments, [intent])
    assert result["structuredContent"] == {"result": {"refund": refunds[intent]["id"]}}
    events = site.ledger_events()
    assert ledger_holds(events) == {task_id: ["reserve", "settle"]}
    assert [e["outcome"] for e in events if e["event"] == "settle"] == ["done"]
