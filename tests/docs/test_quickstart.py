"""The README's quickstart, start to finish, with the real clients it names
(issue 7, item 6): every command in it runs, in order, and prints what the
README shows.

The section's blocks are read out of README.md, so README and test cannot
drift. What differs from an operator's machine, and only that:

- the fake payment service runs on a free port instead of 8765 (the
  README's URLs and a copy of examples/ point at it), and the commands run
  in a folder of the test's own, standing for the checkout, whose `.venv` is
  the virtual environment the tests run in;
- `npx -y @modelcontextprotocol/inspector@VERSION` is the Inspector pinned
  in tests/js (the same version; a test checks that), and `claude` is Claude
  Code pinned there, with HOME in the test's folder;
- what a command prints is compared after the test's folder is written as
  the README's `/home/you/staal`, and run ids, the fake's object ids and
  times are masked (tests/helpers/readme.py).

The Claude Desktop snippet is started the way a client starts a server: its
command, its arguments and its env over a bare environment, from another
folder, by the official Python SDK's stdio client.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.clients.test_client_typescript import JS, NODE_MODULES, on_node22, require_node_modules
from tests.helpers.payments import Payments
from tests.helpers.readme import (
    BASE,
    ENV,
    EXAMPLES,
    Block,
    Ran,
    Step,
    blocks,
    copy_examples,
    normalized,
    run_steps,
    section,
    shell_env,
)
from tests.helpers.readme import steps as readme_steps
from tests.helpers.runs import TIMEOUT

TITLE = "Quickstart"
HOME = "/home/you/staal"  # the README's stand-in for the checkout
INSPECTOR_NPX = re.compile(r"npx -y @modelcontextprotocol/inspector@(\S+)")
INSPECTOR = NODE_MODULES / ".bin" / "mcp-inspector"
CLAUDE = NODE_MODULES / ".bin" / "claude"
INSPECTOR_TOOL_ERROR = 5  # the Inspector CLI's exit code for a result with isError true
INTENT_CREATED = re.compile(r"'(\"pi_\w+\", \"amount\": \d+)'")


@dataclass
class Quickstart:
    steps: list[Step]
    desktop: dict[str, Any]  # the Claude Desktop snippet


def quickstart() -> Quickstart:
    found: list[Block] = blocks(section(TITLE))
    desktop = [b for b in found if b.lang == "json" and "mcpServers" in b.body]
    assert len(desktop) == 1, "the quickstart has one Claude Desktop snippet"
    rest = [b for b in found if b is not desktop[0]]
    return Quickstart(readme_steps(rest), json.loads(desktop[0].body))


def fake_command(steps: list[Step]) -> tuple[int, str]:
    """The step that starts the fake payment service, and its key."""
    for i, step in enumerate(steps):
        match = re.fullmatch(r"python examples/fake_payments\.py --key (sk_test_\w+)", step.command)
        if match:
            return i, match.group(1)
    raise AssertionError("the quickstart starts the fake payment service")


@pytest.fixture
def fake() -> Iterator[Payments]:
    _, key = fake_command(quickstart().steps)
    service = Payments(key=key)
    try:
        yield service
    finally:
        service.stop()


def checkout(tmp_path: Path, base: str) -> Path:
    """A folder standing for the operator's checkout: examples/ pointed at
    the fake, and .venv the environment these tests run in."""
    root = tmp_path / "staal"
    root.mkdir()
    copy_examples(root, base)
    (root / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    return root


def pinned(package: str) -> str:
    return json.loads((JS / "package.json").read_text())["dependencies"][package]


def local(command: str, base: str) -> str:
    """The README's command as this machine runs it (see the module's doc)."""
    match = INSPECTOR_NPX.search(command)
    if match:
        command = command.replace(match.group(0), shlex.quote(str(INSPECTOR)))
    return command.replace(BASE, base)


def printed(text: str, root: Path, base: str) -> list[str]:
    return normalized(text.replace(str(root), HOME).replace(base, BASE))


def expected_exit(shown: str | None) -> int:
    return INSPECTOR_TOOL_ERROR if shown and '"isError": true' in shown else 0


def run_walkthrough(steps: list[Step], root: Path, base: str, home: Path) -> list[Ran]:
    env = shell_env({"HOME": str(home), "TMPDIR": str(root.parent / "tmp")})
    env["PATH"] = on_node22(os.pathsep.join([str(NODE_MODULES / ".bin"), env["PATH"]]))
    return run_steps(steps, lambda command: local(command, base), root, env,
                     root.parent / "steps")


# -- the walk-through ----------------------------------------------------------------------


def test_every_command_of_the_quickstart_runs_and_prints_what_it_shows(tmp_path, fake):
    require_node_modules()
    qs = quickstart()
    start, _ = fake_command(qs.steps)
    steps = qs.steps[:start] + qs.steps[start + 1:]
    root = checkout(tmp_path, fake.base)
    (tmp_path / "tmp").mkdir()
    home = tmp_path / "home"
    home.mkdir()

    ran = run_walkthrough(steps, root, fake.base, home)
    for r in ran:
        where = f"README step:\n{r.step.command}\nprinted:\n{r.out}\n{r.err}"
        if r.step.shown is not None:
            assert printed(r.out, root, fake.base) == normalized(r.step.shown), where
        assert r.code == expected_exit(r.step.shown), where

    refunds = [r for r in ran if r.step.command.startswith("refund '")]
    # A repeated once call is answered with the first answer, byte for byte.
    assert refunds[0].step.command == refunds[1].step.command
    assert refunds[1].out == refunds[0].out
    # What the fake saw: ord_1001's refund once, ord_1002's after the operator
    # answered; nothing for the refused calls (the other amount, over each).
    made = [(r["payment_intent"], r["amount"]) for r in fake.refunds()]
    assert made == [("pi_shop1001", 2000), ("pi_shop1002", 1000)]
    posted = fake.requests("POST", "/v1/refunds")
    assert not any("pi_shop1004" in json.dumps(r) for r in posted)
    first, *waited = [r["headers"]["idempotency-key"] for r in posted]
    # The waiting run: two tries with its key in the call (the 500, then the
    # same 500 replayed under the key: sending again cannot settle it), one
    # more when the next start resumed it (replayed again), then the attempt
    # the operator's "did not happen" allowed, under a key of its own.
    key = waited[0]
    assert waited == [key] * 3 + [f"{key}-2"] and first != key
    # Three runs (the refund, the refusal over each, the one that waited),
    # each with its journal; the waiting record went when its run ended.
    journals = root / "examples" / "journals"
    assert len(list((journals / "refund_order").rglob("*.journal"))) == 3
    assert list((journals / "waiting").iterdir()) == []


def test_the_payments_the_quickstart_makes_are_the_shops_orders():
    conn = sqlite3.connect(f"{(EXAMPLES / 'shop.db').as_uri()}?mode=ro", uri=True)
    try:
        orders = {pi: (total, currency.lower()) for pi, total, currency in
                  conn.execute("SELECT payment_intent, total_minor, currency FROM orders")}
    finally:
        conn.close()
    made = [json.loads('{"id": ' + fields + ', "currency": "usd"}')
            for step in quickstart().steps for fields in INTENT_CREATED.findall(step.command)]
    assert len(made) == 3, "the quickstart creates three of the shop's payments at the fake"
    for intent in made:
        assert orders[intent["id"]] == (intent["amount"], intent["currency"])


def test_the_inspector_the_quickstart_runs_is_the_pinned_one():
    versions = {m.group(1) for step in quickstart().steps
                for m in INSPECTOR_NPX.finditer(step.command)}
    assert versions == {pinned("@modelcontextprotocol/inspector")}


# -- the client configurations -------------------------------------------------------------


def desktop_server(qs: Quickstart, root: Path) -> dict[str, Any]:
    (server,) = qs.desktop["mcpServers"].values()
    text = json.dumps(server).replace(HOME, str(root))
    return json.loads(text)


def test_claude_code_records_the_same_server_as_the_claude_desktop_snippet(tmp_path, fake):
    """`claude mcp add` as the README has it, run by the pinned Claude Code,
    configures exactly the command, arguments and env of the Desktop snippet."""
    require_node_modules()
    qs = quickstart()
    (add,) = [s for s in qs.steps if s.command.startswith("claude mcp add")]
    root = checkout(tmp_path, fake.base)
    home = tmp_path / "home"
    home.mkdir()
    env = {**shell_env({"HOME": str(home)}), "PWD": str(root)}
    env["PATH"] = on_node22(os.pathsep.join([str(NODE_MODULES / ".bin"), env["PATH"]]))
    done = subprocess.run(["bash", "--noprofile", "--norc", "-c", add.command.splitlines()[0]],
                          cwd=root, env=env, capture_output=True, text=True, timeout=TIMEOUT,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    config = json.loads((home / ".claude.json").read_text())
    (name, server), = config["projects"][str(root)]["mcpServers"].items()
    (desktop_name,) = qs.desktop["mcpServers"]
    assert name == desktop_name
    wanted = desktop_server(qs, root)
    assert {k: server[k] for k in ("command", "args", "env")} == wanted


def test_the_claude_desktop_snippet_starts_a_server_that_lists_looks_up_and_refunds(
        tmp_path, fake):
    """The snippet's command, arguments and env, started over a bare
    environment from another folder: the tools are there, and the key in
    `env` is what lets the refund through."""
    qs = quickstart()
    root = checkout(tmp_path, fake.base)
    server = desktop_server(qs, root)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    fake.intent(id="pi_shop1001", amount=12000, currency="usd")

    async def session() -> dict[str, Any]:
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(command=server["command"], args=server["args"],
                                       env=server["env"], cwd=str(elsewhere))
        with (tmp_path / "server.err").open("w") as errlog:
            async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
                listed = await client.list_tools()
                lookup = await client.call_tool("lookup_order", {"order": "ord_1004"})
                refund = await client.call_tool("refund_order", {
                    "order": "pi_shop1001", "amount": {"amount": "20.00", "currency": "USD"}})
        return {"tools": [t.name for t in listed.tools], "lookup": lookup, "refund": refund}

    got = anyio.run(session)
    assert got["tools"] == ["refund_order", "lookup_order", "staal_run_status"]
    assert got["lookup"].is_error is False
    assert got["lookup"].structured_content["result"]["total"] == {"amount": "250.00",
                                                                  "currency": "USD"}
    assert got["refund"].is_error is False, got["refund"].content
    assert [(r["payment_intent"], r["amount"]) for r in fake.refunds()] == [("pi_shop1001", 2000)]
    # The journals are the manifest's, not the starting folder's.
    assert list((root / "examples" / "journals").rglob("*.journal"))
    assert list(elsewhere.iterdir()) == []
    assert ENV in server["env"]
