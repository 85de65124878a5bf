"""`staal check`, `staal schema` and `staal config` (DESIGN.md section 3)."""

from __future__ import annotations

import json

import jsonschema

from tests.helpers.runs import Workspace

ALL_TYPES = """
from decimal import Decimal
from typing import Literal, TypedDict
from staal import Json, Money
from staal.caps import Clock

class Address(TypedDict):
    street: str
    number: int

def main(name: str, count: int, flag: bool, ratio: Decimal, price: Money, tags: list[str],
         scores: dict[str, int], maybe: int | None, colour: Literal["red", "blue"],
         home: Address, extra: Json, clock: Clock, note: str = "n/a") -> dict:
    return {"name": name, "count": count, "colour": colour, "note": note, "t": clock.now() > 0}
"""


def test_check_reports_every_problem_of_a_program_at_once(tmp_path):
    ws = Workspace(tmp_path)
    ws.program("""
from staal.caps import HttpGet, StripeRefund

def main(x: float, y, pay: StripeRefund, get: HttpGet) -> dict:
    return {}
""")
    grants = {"get": {"cap": "net.http.post", "only": ["https://x.com/a"]},
              "z": {"cap": "clock.now"}}
    done = ws.staal("check", "prog.py", "--grants", json.dumps(grants))
    assert done.code == 2
    lines = [line.strip() for line in done.stderr.splitlines()]
    assert lines[0] == "prog.py: 5 problems"
    assert [line.split(":")[0] for line in lines[1:]] == ["x", "y", "pay", "grants.get", "grants.z"]


def test_an_annotation_that_cannot_be_evaluated_is_its_own_parameters_problem(tmp_path):
    ws = Workspace(tmp_path)
    ws.program("""
from staal.caps import HttpGet

def main(a: int, b: "NoSuchType", c: float, get: HttpGet, d: "list[Nope]" = None) -> dict:
    return {}
""")
    grants = {"get": {"cap": "net.http.get", "only": ["https://x.com/*"]}, "z": {"cap": "clock.now"}}
    done = ws.staal("check", "prog.py", "--grants", json.dumps(grants))
    assert done.code == 2
    lines = [line.strip() for line in done.stderr.splitlines()]
    assert lines == [
        "prog.py: 4 problems",
        "b: its annotation 'NoSuchType' cannot be evaluated: NameError: name 'NoSuchType' is "
        "not defined",
        "c: float is not supported as an input type: a float cannot hold every decimal "
        "exactly; use decimal.Decimal, or staal.Money for an amount of money",
        "d: its annotation 'list[Nope]' cannot be evaluated: NameError: name 'Nope' is not "
        "defined",
        "grants.z: names no parameter of main()",
    ]


def test_an_unreadable_annotation_under_postponed_evaluation_names_its_parameter(tmp_path):
    ws = Workspace(tmp_path)
    ws.program("from __future__ import annotations\n\n"
               "def main(a: int, b: NoSuchType) -> Missing:\n    return {}\n")
    done = ws.staal("check", "prog.py")
    assert done.code == 2
    assert [line.strip() for line in done.stderr.splitlines()][1:] == [
        "b: its annotation 'NoSuchType' cannot be evaluated: NameError: name 'NoSuchType' is "
        "not defined",
        "return: its annotation 'Missing' cannot be evaluated: NameError: name 'Missing' is "
        "not defined",
    ]


def test_check_names_a_missing_entry(tmp_path):
    ws = Workspace(tmp_path)
    ws.program("def helper() -> int:\n    return 1\n")
    done = ws.staal("check", "prog.py")
    assert done.code == 2
    assert "entry: the program has no function 'main'" in done.stderr
    assert ws.staal("check", "prog.py", "--entry", "helper").code == 0


def test_check_of_a_good_program_lists_its_inputs_and_capabilities(tmp_path):
    ws = Workspace(tmp_path)
    ws.program(ALL_TYPES)
    done = ws.staal("check", "prog.py", "--grants", json.dumps({"clock": {"cap": "clock.now"}}))
    assert done.code == 0, done.stderr
    assert "inputs name (str), count (int)" in done.stdout
    assert "capabilities clock (clock.now)" in done.stdout


def test_check_imports_the_program_confined(tmp_path):
    ws = Workspace(tmp_path)
    ws.program(f"open({str(tmp_path / 'side-effect')!r}, 'w').write('x')\n"
               "def main() -> dict:\n    return {}\n")
    done = ws.staal("check", "prog.py")
    assert done.code == 2
    assert "importing it failed: CapabilityRefused" in done.stderr
    assert not (tmp_path / "side-effect").exists()


def test_schema_prints_the_inputs_json_schema(tmp_path):
    ws = Workspace(tmp_path)
    ws.program(ALL_TYPES)
    done = ws.staal("schema", "prog.py")
    assert done.code == 0, done.stderr
    schema = json.loads(done.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["required"] == ["name", "count", "flag", "ratio", "price", "tags", "scores",
                                  "maybe", "colour", "home", "extra"]
    assert "clock" not in schema["properties"]
    assert schema["properties"]["note"]["default"] == "n/a"
    assert schema["additionalProperties"] is False


def test_config_prints_a_run_config_that_runs_as_it_is(tmp_path):
    ws = Workspace(tmp_path)
    ws.program(ALL_TYPES)
    made = ws.staal("config", "prog.py")
    assert made.code == 0, made.stderr
    config = json.loads(made.stdout)
    assert config["grants"]["clock"]["cap"] == "clock.now"
    (tmp_path / "config.json").write_text(made.stdout)
    done = ws.run()
    assert done.code == 0, done.stdout + done.stderr
    assert done.outcome["result"]["note"] == "n/a"
    assert done.outcome["result"]["colour"] == "red"


def test_placeholder_inputs_satisfy_both_the_schema_and_the_runtime(tmp_path):
    ws = Workspace(tmp_path)
    ws.program(ALL_TYPES)
    config = json.loads(ws.staal("config", "prog.py").stdout)
    schema = json.loads(ws.staal("schema", "prog.py").stdout)
    jsonschema.Draft202012Validator(schema).validate(config["inputs"])
    # A placeholder for every input, the one with a default included, and no other.
    assert list(config["inputs"]) == [*schema["required"], "note"]
    assert set(config["inputs"]) == set(schema["properties"])
    (tmp_path / "config.json").write_text(json.dumps(config))
    done = ws.run()
    assert done.code == 0, done.stdout + done.stderr
    assert done.outcome["result"] == {"name": "", "count": 0, "colour": "red", "note": "n/a",
                                      "t": True}
