"""The example tool set (examples/) works as the README's "Running the
examples by hand" says: every command of that section runs for real, in
order, and prints what the section shows.

The section's ```sh blocks are read out of README.md, so README and test
cannot drift. Two substitutions, and only these: the fake payment service
runs on a free port instead of 8765 (the README's URLs and a copy of the
examples' configs point at it), and the commands run in a copy of
examples/ under the test's own folder.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from staal.manifest.check import load_manifest
from staal.records.runconfig import from_tool, load_run_config
from tests.helpers.payments import Payments
from tests.helpers.readme import (
    BASE,
    ENV,
    EXAMPLES,
    README,
    Step,
    blocks,
    copy_examples,
    normalized,
    run_steps,
    section,
    shell_env,
)
from tests.helpers.readme import steps as readme_steps
from tests.helpers.runs import EXIT_CODES, TIMEOUT, Workspace

SECTION_TITLE = "Running the examples by hand"
RUN_CONFIGS = ("lookup.run.json", "refund.run.json", "refund_over_limit.run.json")
OVER_EACH = ("'payments.stripe.refund' allows at most 50.00 USD per action; "
             "this action needs 80.00 USD")


def steps() -> list[Step]:
    return readme_steps(blocks(section(SECTION_TITLE)))


def start_command() -> str:
    return steps()[0].command


def readme_key() -> str:
    match = re.fullmatch(r"python examples/fake_payments\.py --key (sk_test_\w+)", start_command())
    assert match, f"the section opens by starting the fake: {start_command()!r}"
    return match.group(1)


# -- the fake service and a copy of examples/ pointed at it ----------------------------


@pytest.fixture
def fake() -> Iterator[Payments]:
    """The fake payment service with the README's key, on a free port."""
    service = Payments(key=readme_key())
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def shop(tmp_path: Path, fake: Payments) -> Workspace:
    """A workspace holding a copy of examples/, with the payment of order
    ord_1001 made at the fake, as the README has the operator make it."""
    copy_examples(tmp_path, fake.base)
    fake.intent(id="pi_shop1001", amount=12000, currency="usd")
    return Workspace(tmp_path)


def order_rows(db: Path) -> list[dict]:
    conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM orders ORDER BY id")]
    finally:
        conn.close()


def dump(conn: sqlite3.Connection) -> list[str]:
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


# -- the README, for real ---------------------------------------------------------------


def test_every_command_of_the_readme_section_runs_and_prints_what_the_readme_shows(tmp_path, fake):
    first, *rest = steps()
    assert first.command == f"python examples/fake_payments.py --key {fake.key}"
    assert rest, "the section has commands after starting the fake"
    copy_examples(tmp_path, fake.base)
    (tmp_path / "tmp").mkdir()
    ran = run_steps(rest, lambda command: command.replace(BASE, fake.base), tmp_path,
                    {**shell_env(), "TMPDIR": str(tmp_path / "tmp")}, tmp_path / "steps")

    for r in ran:
        where = f"README step:\n{r.step.command}\nprinted:\n{r.out}\n{r.err}"
        expected = 0
        if r.step.shown is not None:
            if r.step.shown.startswith("{"):
                expected = EXIT_CODES[json.loads(r.step.shown)["outcome"]]
            assert normalized(r.out) == normalized(r.step.shown), where
        assert r.code == expected, where

    # The README's curl made the payment shop.sql says order ord_1001 was paid with.
    [created] = re.findall(r"-d '(\{.*?\})' " + re.escape(BASE) + "/_control/intents", section(SECTION_TITLE))
    created = json.loads(created)
    [order] = [r for r in order_rows(EXAMPLES / "shop.db") if r["payment_intent"] == created["id"]]
    assert (order["total_minor"], order["currency"].lower()) == (created["amount"], created["currency"])
    # One refund, of the README's 20.00 USD: the refusal over `each` sent nothing.
    [refund] = fake.refunds()
    assert (refund["payment_intent"], refund["amount"], refund["currency"]) == (
        "pi_shop1001", 2000, "usd")
    assert len(fake.requests("POST", "/v1/refunds")) == 1


def test_the_readme_section_comes_after_what_is_here_and_uses_the_examples_default_port():
    assert README.index("## What is here") < README.index("## " + SECTION_TITLE)
    manifest = json.loads((EXAMPLES / "manifest.json").read_text())
    [refund] = [t for t in manifest["tools"] if t["name"] == "refund_order"]
    assert refund["grants"]["pay"]["base_url"] == BASE
    assert "--port" not in start_command()  # the fake's default, 8765, is what the configs name
    assert re.search(r'default=8765\b', (EXAMPLES / "fake_payments.py").read_text())


# -- the shop's database --------------------------------------------------------------


def test_the_committed_shop_db_holds_exactly_what_shop_sql_says():
    expected = sqlite3.connect(":memory:")
    expected.executescript((EXAMPLES / "shop.sql").read_text())
    committed = sqlite3.connect(f"{(EXAMPLES / 'shop.db').as_uri()}?mode=ro", uri=True)
    assert dump(committed) == dump(expected), "run python examples/make_shop_db.py and commit shop.db"


def test_make_shop_db_rebuilds_the_database_from_shop_sql(tmp_path):
    out = tmp_path / "shop.db"
    done = subprocess.run([sys.executable, str(EXAMPLES / "make_shop_db.py"), str(out)],
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out)
    committed = sqlite3.connect(f"{(EXAMPLES / 'shop.db').as_uri()}?mode=ro", uri=True)
    assert dump(sqlite3.connect(out)) == dump(committed)
    assert [p.name for p in tmp_path.iterdir()] == ["shop.db"]  # no temporary file left


# -- the configs and the programs ------------------------------------------------------


@pytest.mark.parametrize("name", RUN_CONFIGS)
def test_each_run_config_is_its_manifest_tool_plus_inputs(name):
    manifest = load_manifest(EXAMPLES / "manifest.json")
    config, inputs = load_run_config(EXAMPLES / name)
    [tool] = [t for t in manifest.tools if t.name == config.tool]
    # The very config the server runs the tool under: the same journal header hash.
    assert config.to_json() == from_tool(manifest, tool).to_json()
    assert config.sha256() == from_tool(manifest, tool).sha256()
    assert set(inputs) >= {"order"}


def test_the_example_programs_pass_staal_check_with_their_manifest_grants():
    manifest = json.loads((EXAMPLES / "manifest.json").read_text())
    for tool in manifest["tools"]:
        done = subprocess.run(
            [sys.executable, "-m", "staal.worker.commands.cli", "check", tool["program"],
             "--grants", json.dumps(tool["grants"])],
            cwd=EXAMPLES, capture_output=True, text=True, timeout=TIMEOUT, check=False)
        assert done.returncode == 0, (tool["name"], done.stderr)
        assert done.stdout.startswith(f"{tool['program']}: ok: inputs order (str)"), done.stdout


def test_the_example_manifest_serves_until_stdin_closes_then_exits_cleanly(tmp_path):
    copy = copy_examples(tmp_path, BASE)
    done = subprocess.run(
        [sys.executable, "-m", "staal.supervisor.app.main", "serve", str(copy / "manifest.json")],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""


# -- the lookup -----------------------------------------------------------------------


def test_lookup_gives_each_orders_status_total_as_money_and_payment_intent(tmp_path):
    copy_examples(tmp_path, BASE)
    ws = Workspace(tmp_path)
    config = json.loads((tmp_path / "examples" / "lookup.run.json").read_text())
    shown = {"USD": lambda minor: f"{minor // 100}.{minor % 100:02d}", "JPY": str}
    for row in order_rows(EXAMPLES / "shop.db"):
        config["inputs"] = {"order": row["id"]}
        (tmp_path / "examples" / "lookup.run.json").write_text(json.dumps(config))
        done = ws.run("examples/lookup.run.json", journal=f"{row['id']}.journal")
        assert done.code == 0, done.stderr
        assert done.outcome["result"] == {
            "order": row["id"], "status": row["status"], "payment_intent": row["payment_intent"],
            "total": {"amount": shown[row["currency"]](row["total_minor"]),
                      "currency": row["currency"]},
        }
        assert done.outcome["usage"] == {"db": {"actions": 1, "charged": []}}


def test_looking_up_an_order_that_is_not_there_fails_as_validation_naming_it(tmp_path):
    copy_examples(tmp_path, BASE)
    path = tmp_path / "examples" / "lookup.run.json"
    config = json.loads(path.read_text())
    config["inputs"] = {"order": "ord_9999"}
    path.write_text(json.dumps(config))
    done = Workspace(tmp_path).run("examples/lookup.run.json")
    assert done.code == 1
    assert done.outcome["failure"] == {"kind": "validation",
                                       "message": "there is no order 'ord_9999'"}


# -- the refund -----------------------------------------------------------------------


def test_a_refund_over_each_is_refused_by_the_broker_and_the_service_sees_no_refund(shop, fake):
    done = shop.run("examples/refund_over_limit.run.json", env={ENV: fake.key})
    assert done.code == 1, done.stderr
    assert done.outcome["failure"] == {"kind": "capability", "message": OVER_EACH}
    assert done.outcome["usage"] == {"pay": {"actions": 1, "charged": []}}
    # The program read the payment (it was within what was paid); the refund never left.
    assert [r["path"] for r in fake.requests("GET")] == ["/v1/payment_intents/pi_shop1001"]
    assert fake.requests("POST") == []
    assert fake.refunds() == []


def test_refunding_the_same_order_twice_through_staal_run_is_two_runs_and_two_refunds(shop, fake):
    first = shop.run("examples/refund.run.json", journal="first.journal", env={ENV: fake.key})
    second = shop.run("examples/refund.run.json", journal="second.journal", env={ENV: fake.key})
    assert first.code == second.code == 0, first.stderr + second.stderr
    assert first.outcome["run"] != second.outcome["run"]
    refunds = fake.refunds()
    assert [(r["payment_intent"], r["amount"]) for r in refunds] == [("pi_shop1001", 2000)] * 2
    assert [first.outcome["result"]["refund"], second.outcome["result"]["refund"]] == [
        r["id"] for r in refunds]
    # New runs, new idempotency keys: only the server's `once` dedupes a repeated call.
    keys = [r["headers"]["idempotency-key"] for r in fake.requests("POST", "/v1/refunds")]
    assert keys == [f"{first.outcome['run']}-2", f"{second.outcome['run']}-2"]


def test_a_refund_without_the_key_in_the_environment_sends_nothing(shop, fake, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    done = shop.run("examples/refund.run.json")
    assert done.code == 1
    assert done.outcome["failure"]["kind"] == "capability"
    assert ENV in done.outcome["failure"]["message"]
    assert fake.requests() == []


def test_the_example_manifest_serves_the_shops_orders_as_resources(tmp_path):
    copy = copy_examples(tmp_path, BASE)
    base = "staal://staal-examples/orders"

    async def session():
        params = StdioServerParameters(command=sys.executable, args=[
            "-m", "staal.supervisor.app.main", "serve", str(copy / "manifest.json")], cwd=str(copy))
        async with Client(params, mode="auto") as client:
            first = await client.read_resource(f"{base}?limit=3")
            page = json.loads(first.contents[0].text)
            rest = await client.read_resource(f"{base}?limit=3&cursor={page['nextCursor']}")
            one = await client.read_resource(f"{base}/ord_1003")
            return page, json.loads(rest.contents[0].text), json.loads(one.contents[0].text)

    page, rest, one = anyio.run(session)
    assert [o["id"] for o in page["items"]] == ["ord_1001", "ord_1002", "ord_1003"]
    assert rest == {"items": [{"id": "ord_1004", "status": "delivered",
                               "total": {"amount": "250.00", "currency": "USD"},
                               "payment_intent": "pi_shop1004"}]}
    assert one["total"] == {"amount": "4500", "currency": "JPY"} and one["status"] == "paid"
