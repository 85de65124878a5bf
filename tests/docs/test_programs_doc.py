"""docs/programs.md, the program API reference, says what the code does:
every example on it runs and prints what the page shows.

What each fenced block of the page is, its info string says:

- ```python program: a whole program, whose first line is `# NAME.py`;
- ```json config: a run config for the program above it, run with `staal
  run`; the block right after it is its ```json outcome, what the run prints;
- ```json resumed: after an outcome, what `staal resume` prints for that run
  when its process was killed just after its first action's outcome was
  journaled;
- ```json service: requests the stand-in for https://api.example.com answers;
- ```python fragment: part of a program, compiled;
- ```pycon: a session, run as a doctest.

No other block is allowed, so nothing on the page goes untested. Each run
gets its own stand-ins of the services the page names, on free ports: the
page's addresses are swapped for theirs in the program and its config, and
back in what the run prints, which is compared with the page's as
tests/helpers/readme.py normalizes it (run ids and the services' ids aside).
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import json
import re
import shutil
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import staal.caps
from staal.manifest.catalogue import CATALOGUE
from tests.helpers import services
from tests.helpers.fake_model import running_fake_model
from tests.helpers.payments import Payments
from tests.helpers.readme import EXAMPLES, Block, blocks, normalized
from tests.helpers.recorder import Recorder
from tests.helpers.runs import EXIT_CODES, KILL_AT_OUTCOME, Done, Workspace

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "programs.md"
TEXT = PAGE.read_text()

# The services the page's examples talk to, by the address the page gives.
PAYMENTS = "http://127.0.0.1:8765"  # examples/fake_payments.py
MODEL = "http://127.0.0.1:8766"  # tests/helpers/fake_model.py
SHOP = "https://api.example.com"  # a Recorder answering the page's service blocks
STRIPE_KEY = "sk_test_example"
MODEL_KEY = "sk-ant-test-programs-doc"
DSN_VARIABLE = "SHOP_DSN"

KINDS = {("python", "program"), ("python", "fragment"), ("json", "config"), ("json", "outcome"),
         ("json", "resumed"), ("json", "service"), ("pycon", "")}
CAPABILITY_TABLE = "| class | capability | grant keys (required in bold) | actions |"


# -- the page, read ------------------------------------------------------------------------


@dataclass
class Example:
    """One run of one program on the page."""

    name: str  # the program's file name
    source: str
    config: dict[str, Any]
    outcome: dict[str, Any]
    resumed: dict[str, Any] | None = None
    id: str = ""


def page_blocks() -> list[Block]:
    return blocks(TEXT)


def program_name(block: Block) -> str:
    first = block.body.splitlines()[0]
    match = re.fullmatch(r"# (\w+\.py)", first)
    assert match, f"a program's first line names its file (# NAME.py), not {first!r}"
    return match.group(1)


def examples() -> list[Example]:
    """Every run the page shows, in its order."""
    found: list[Example] = []
    program: Block | None = None
    config: dict[str, Any] | None = None
    previous: tuple[str, str] | None = None
    for block in page_blocks():
        kind = (block.lang, block.role)
        if config is not None:
            assert kind == ("json", "outcome"), f"a config's outcome follows it:\n{block.body}"
            name = program_name(program)
            assert config["program"] == name, f"the config runs {config['program']}, not {name}"
            runs = sum(1 for e in found if e.name == name) + 1
            found.append(Example(name, program.body, config, json.loads(block.body),
                                 id=f"{name}-{runs}"))
            config = None
        elif kind == ("python", "program"):
            program = block
        elif kind == ("json", "config"):
            assert program is not None, f"a config follows a program:\n{block.body}"
            config = json.loads(block.body)
        elif kind == ("json", "outcome"):
            raise AssertionError(f"an outcome follows its config:\n{block.body}")
        elif kind == ("json", "resumed"):
            assert previous == ("json", "outcome"), f"a resumed run follows one:\n{block.body}"
            found[-1].resumed = json.loads(block.body)
        previous = kind
    assert config is None, "the last config has its outcome"
    return found


def service_routes() -> dict[tuple[str, str], tuple[int, Any]]:
    """What the page's service blocks say https://api.example.com answers."""
    routes: dict[tuple[str, str], tuple[int, Any]] = {}
    for block in page_blocks():
        if (block.lang, block.role) == ("json", "service"):
            for request, answer in json.loads(block.body).items():
                method, path = request.split(" ", 1)
                routes[(method, path)] = (answer["status"], answer["json"])
    return routes


EXAMPLES_ON_PAGE = examples()
RESUMED_ON_PAGE = [e for e in EXAMPLES_ON_PAGE if e.resumed is not None]


# -- the services, stood in for ---------------------------------------------------------------


@dataclass
class StandIns:
    """The services one run talks to: their addresses, the environment that
    holds their secrets, and how many requests each has had."""

    bases: dict[str, str] = field(default_factory=dict)  # the page's address -> the stand-in's
    env: dict[str, str] = field(default_factory=dict)
    counters: list[Callable[[], int]] = field(default_factory=list)

    def local(self, text: str) -> str:
        for page, here in sorted(self.bases.items(), key=lambda b: -len(b[0])):
            text = text.replace(page, here)
        return text

    def shown(self, text: str) -> str:
        for page, here in sorted(self.bases.items(), key=lambda b: -len(b[1])):
            text = text.replace(here, page)
        return text

    def requests(self) -> list[int]:
        return [count() for count in self.counters]


def shop_payments() -> list[tuple[str, int, str]]:
    """The payment of each order of examples/shop.db: intent, minor units, currency."""
    conn = sqlite3.connect(f"{(EXAMPLES / 'shop.db').as_uri()}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT payment_intent, total_minor, currency FROM orders").fetchall()
    finally:
        conn.close()


@contextmanager
def shop_database() -> Iterator[str]:
    """A schema holding examples/shop.sql's tables; a DSN that reaches it."""
    dsn = services.postgres_dsn()  # started if it is the local one and not running
    schema = f"staal_doc_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"SET search_path TO {schema}")
        conn.execute((EXAMPLES / "shop.sql").read_text())
    try:
        yield make_conninfo(dsn, options=f"-csearch_path={schema}")
    finally:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@contextmanager
def stand_ins(example: Example) -> Iterator[StandIns]:
    """Only the services this example names, started for it and stopped after."""
    text = example.source + json.dumps(example.config)
    ins = StandIns()
    with ExitStack() as stack:
        if PAYMENTS in text:
            fake = Payments(key=STRIPE_KEY)
            stack.callback(fake.stop)
            for intent, minor, currency in shop_payments():
                fake.intent(id=intent, amount=minor, currency=currency.lower())
            ins.bases[PAYMENTS] = fake.base
            ins.env["STRIPE_SECRET_KEY"] = STRIPE_KEY
            ins.counters.append(lambda: len(fake.requests()))
        if MODEL in text:
            model = stack.enter_context(running_fake_model(MODEL_KEY))
            ins.bases[MODEL] = model.base
            ins.env["ANTHROPIC_API_KEY"] = MODEL_KEY
            ins.counters.append(lambda: len(model.requests()))
        if SHOP in text:
            shop = Recorder()
            for (method, path), (status, body) in service_routes().items():
                shop.route(method, path, status, body)
            shop.start()
            stack.callback(shop.stop)
            ins.bases[SHOP] = shop.base
            ins.counters.append(lambda: len(shop.seen()))
        if DSN_VARIABLE in text:
            ins.env[DSN_VARIABLE] = stack.enter_context(shop_database())
        yield ins


def workspace(tmp_path: Path, example: Example, ins: StandIns) -> Workspace:
    """The program and its config (as config.json), with shop.db beside
    them if the config names it."""
    ws = Workspace(tmp_path)
    ws.program(ins.local(example.source), example.name)
    config = ins.local(json.dumps(example.config))
    (tmp_path / "config.json").write_text(config)
    if "shop.db" in config:
        shutil.copy(EXAMPLES / "shop.db", tmp_path / "shop.db")
    return ws


def comparable(outcome: dict[str, Any]) -> list[str]:
    return normalized(json.dumps(outcome, sort_keys=True))


def printed(done: Done, ins: StandIns) -> list[str]:
    return comparable(json.loads(ins.shown(json.dumps(done.outcome))))


# -- every block is tested ---------------------------------------------------------------------


def test_every_block_on_the_page_is_tested_and_every_python_one_is_a_program_or_a_fragment():
    found = page_blocks()
    assert found, "the page has examples"
    assert [(b.lang, b.role) for b in found if (b.lang, b.role) not in KINDS] == []
    programs = [b for b in found if (b.lang, b.role) == ("python", "program")]
    assert {program_name(b) for b in programs} == {e.name for e in EXAMPLES_ON_PAGE}, (
        "every program is run at least once")
    for block in found:
        if block.lang == "python":
            compile(block.body, f"{PAGE.name}: {block.body.splitlines()[0]}", "exec")
    assert RESUMED_ON_PAGE, "the page shows a resumed run"


# -- the examples, run -------------------------------------------------------------------------


@pytest.mark.parametrize("example", EXAMPLES_ON_PAGE, ids=lambda e: e.id)
def test_each_program_on_the_page_prints_the_outcome_the_page_shows(example: Example, tmp_path):
    with stand_ins(example) as ins:
        ws = workspace(tmp_path, example, ins)
        done = ws.run("config.json", env=ins.env)
        where = f"{example.id} printed:\n{done.stdout}\n{done.stderr}"
        assert printed(done, ins) == comparable(example.outcome), where
        assert done.code == EXIT_CODES[example.outcome["outcome"]], where


@pytest.mark.parametrize("example", RESUMED_ON_PAGE, ids=lambda e: e.id)
def test_a_run_killed_after_its_first_action_resumes_as_the_page_shows_and_nothing_happens_twice(
        example: Example, tmp_path):
    with stand_ins(example) as ins:
        ws = workspace(tmp_path, example, ins)
        killed = ws.run("config.json", env={**ins.env, **KILL_AT_OUTCOME})
        assert killed.code == -9, killed.stdout + killed.stderr
        requests, values = ins.requests(), ws.records("value")
        lines = [p["text"] for p in ws.records("print")]
        resumed = ws.resume(env=ins.env)
        where = f"{example.id} resumed printed:\n{resumed.stdout}\n{resumed.stderr}"
        assert printed(resumed, ins) == comparable(example.resumed), where
        assert resumed.code == EXIT_CODES[example.resumed["outcome"]], where
        assert ins.requests() == requests, "no service was asked again"
        assert ws.records("value") == values, "no value was drawn again"
        assert [line for line in lines if line in resumed.stderr.splitlines()] == []


# -- what the page says of the API -----------------------------------------------------------


def test_the_money_session_on_the_page_prints_what_it_shows():
    sessions = [b.body for b in page_blocks() if b.lang == "pycon"]
    assert sessions, "the page has a Money session"
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for i, session in enumerate(sessions):
        test = doctest.DocTestParser().get_doctest(session, {}, f"session {i + 1}", str(PAGE), 0)
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)


def test_the_imports_the_page_names_are_what_staal_gives_a_program():
    imports = dict(re.findall(r"`from (staal[\w.]*) import ([\w, ]+)`", TEXT))
    assert set(imports) == {"staal", "staal.caps", "staal.errors", "staal.verifier"}
    for module, names in imports.items():
        found = importlib.import_module(module)
        missing = [n for n in names.split(", ") if not hasattr(found, n)]
        assert missing == [], f"{module} has no {', '.join(missing)}"
    named = set(imports["staal.caps"].split(", "))
    assert named == {cls.__name__ for cls in staal.caps.CAPABILITY_CLASSES.values()}


def _table_rows() -> list[list[str]]:
    lines = TEXT[TEXT.index(CAPABILITY_TABLE):].splitlines()[2:]
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def _signature(cls: type, name: str) -> tuple[str, str]:
    """A method as the table writes it: `get(url, headers=None)`, `Response`."""
    sig = inspect.signature(getattr(cls, name))
    params = [p.name if p.default is inspect.Parameter.empty else f"{p.name}={p.default!r}"
              for p in sig.parameters.values() if p.name != "self"]
    return f"{name}({', '.join(params)})", str(sig.return_annotation)


def test_the_capability_table_gives_each_class_its_capability_grant_keys_and_actions_as_coded():
    rows = _table_rows()
    assert {row[1].strip("`") for row in rows} == set(CATALOGUE)
    for class_cell, cap_cell, keys_cell, actions_cell in rows:
        cls = getattr(staal.caps, class_cell.strip("`"))
        spec = CATALOGUE[cap_cell.strip("`")]
        assert (cls.CAP, spec.class_name) == (spec.name, cls.__name__)
        keys = [key.strip() for key in keys_cell.split(",")]
        assert {k.strip("*`") for k in keys} == spec.keys, cls.__name__
        assert {k.strip("*`") for k in keys if k.startswith("**")} == spec.required, cls.__name__
        shown = re.findall(r"`([^`]+)` → `([^`]+)`", actions_cell)
        methods = sorted(n for n, v in inspect.getmembers(cls, inspect.isfunction)
                         if not n.startswith("_") and n != "narrow")
        assert sorted(shown) == sorted(_signature(cls, n) for n in methods), cls.__name__
