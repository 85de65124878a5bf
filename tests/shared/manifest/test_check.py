"""The manifest (seed 000 section 2): every rule checked at load, every
problem reported at once with its key path."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from staal.errors import ManifestError
from staal.manifest.catalogue import CATALOGUE
from staal.manifest.check import check, load_manifest
from staal.manifest.model import RUN_STATUS_TOOL
from staal.manifest.sizes import machine_mib
from staal.money import Money
from tests.helpers.manifests import STRIPE_GRANT, broken, seed_example, write_manifest, write_programs

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def here(tmp_path: Path) -> Path:
    write_programs(tmp_path)
    return tmp_path


def only_problem(problems: list[str]) -> str:
    assert len(problems) == 1, problems
    return problems[0]


# -- valid manifests --------------------------------------------------------


def test_the_seeds_example_manifest_loads_into_frozen_objects(here):
    manifest = check(seed_example(), here / "manifest.json")
    tool = manifest.tools[0]
    assert tool.name == "refund_order"
    assert tool.program == here / "refund.py"
    assert tool.grants["pay"].each == Money("50.00", "USD")
    assert tool.grants["pay"].needs["post"].idempotency_key is True
    assert tool.once.by == ("order",) and tool.once.keep.ms == 30 * 86_400_000
    assert tool.quota.money == Money("500", "USD") and tool.quota.window.text == "24h"
    assert manifest.server.keep_days == 90
    assert manifest.server.journals == here / "journals"
    with pytest.raises(dataclasses.FrozenInstanceError):
        tool.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        tool.grants["other"] = tool.grants["pay"]  # type: ignore[index]


def test_the_example_manifest_is_valid_by_the_command_line():
    done = subprocess.run(
        [sys.executable, "-m", "staal.supervisor.app.main", "check", str(ROOT / "examples/manifest.json")],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "valid: 2 tools (refund_order, lookup_order); 1 collection (orders)" in done.stdout


def test_defaults_are_filled_in(here):
    data = seed_example()
    for key in ("keep", "max_concurrent_runs", "notify", "notify_env"):
        del data["server"][key]
    tool = data["tools"][0]
    for key in ("entry", "once", "quota", "deadline", "max_concurrent_runs", "title"):
        del tool[key]
    manifest = check(data, here / "manifest.json")
    assert manifest.server.keep_days == 90
    assert manifest.server.max_concurrent_runs >= 1
    assert manifest.tools[0].entry == "main"
    assert manifest.tools[0].max_steps == 10_000_000
    assert manifest.tools[0].deadline is None


# -- every problem at once, with its key path -------------------------------


def test_five_different_mistakes_are_reported_together_with_their_key_paths(here):
    data = seed_example()
    tool = data["tools"][0]
    tool["grants"]["pay"]["each"]["amount"] = "5O.00"
    tool["gants"] = {}
    del tool["net"]["connect_timeout_ms"]
    data["server"]["keep"] = 0
    tool["once"]["by"] = []
    path = write_manifest(here, data)
    done = subprocess.run(
        [sys.executable, "-m", "staal.supervisor.app.main", "check", str(path)],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = [line.strip() for line in done.stderr.splitlines()]
    assert lines[0].endswith("manifest.json: 5 problems")
    assert 'tools[0].grants.pay.each.amount: "5O.00" is not a decimal amount' in lines
    paths = sorted(line.split(":")[0] for line in lines[1:])
    assert paths == [
        "server.keep",
        "tools[0].gants",
        "tools[0].grants.pay.each.amount",
        "tools[0].net.connect_timeout_ms",
        "tools[0].once.by",
    ]


def test_load_manifest_reads_the_file_relative_to_its_own_folder(here):
    path = write_manifest(here, seed_example())
    manifest = load_manifest(path)
    assert manifest.path == path.resolve()
    assert manifest.tools[0].program == here / "refund.py"


# -- unknown keys and required fields ---------------------------------------


@pytest.mark.parametrize(
    "where, path",
    [
        (lambda d: d, "surprise"),
        (lambda d: d["server"], "server.surprise"),
        (lambda d: d["model"], "model.surprise"),
        (lambda d: d["tools"][0], "tools[0].surprise"),
        (lambda d: d["tools"][0]["net"], "tools[0].net.surprise"),
        (lambda d: d["tools"][0]["once"], "tools[0].once.surprise"),
        (lambda d: d["tools"][0]["quota"], "tools[0].quota.surprise"),
        (lambda d: d["tools"][0]["quota"]["money"], "tools[0].quota.money.surprise"),
        (lambda d: d["tools"][0]["grants"]["pay"], "tools[0].grants.pay.surprise"),
        (lambda d: d["tools"][0]["grants"]["pay"]["each"], "tools[0].grants.pay.each.surprise"),
        (lambda d: d["tools"][0]["grants"]["pay"]["needs"], "tools[0].grants.pay.needs.surprise"),
        (lambda d: d["tools"][0]["grants"]["pay"]["needs"]["get"], "tools[0].grants.pay.needs.get.surprise"),
        (lambda d: d["tools"][0]["grants"]["pay"]["needs"]["key"], "tools[0].grants.pay.needs.key.surprise"),
        (lambda d: d["model"]["api_key"], "model.api_key.surprise"),
    ],
)
def test_unknown_keys_are_refused_at_every_level(here, where, path):
    problem = only_problem(broken(here, lambda d: where(d).__setitem__("surprise", 1)))
    assert problem.startswith(f"{path}: ")


def test_an_unknown_key_close_to_a_known_one_is_named(here):
    problem = only_problem(broken(here, lambda d: d["tools"][0].__setitem__("descripton", "x")))
    assert "did you mean 'description'" in problem


@pytest.mark.parametrize("key, meant", [("descripton", "description"), ("nmae", "name"),
                                        ("programm", "program")])
def test_a_misspelt_required_key_is_one_did_you_mean_problem(here, key, meant):
    def misspell(d):
        d["tools"][0][key] = d["tools"][0].pop(meant)
    problem = only_problem(broken(here, misspell))
    assert problem.startswith(f"tools[0].{key}: unknown key (allowed here: ")
    assert problem.endswith(f"did you mean '{meant}'?")


@pytest.mark.parametrize(
    "remove, path",
    [
        (lambda d: d.pop("server"), "server"),
        (lambda d: d.pop("tools"), "tools"),
        (lambda d: d["server"].pop("name"), "server.name"),
        (lambda d: d["server"].pop("journals"), "server.journals"),
        (lambda d: d["model"].pop("api_key"), "model.api_key"),
        (lambda d: d["model"].pop("provider"), "model.provider"),
        (lambda d: d["tools"][0].pop("name"), "tools[0].name"),
        (lambda d: d["tools"][0].pop("description"), "tools[0].description"),
        (lambda d: d["tools"][0].pop("program"), "tools[0].program"),
        (lambda d: d["tools"][0].pop("net"), "tools[0].net"),
        (lambda d: d["tools"][0]["quota"].pop("window"), "tools[0].quota.window"),
        (lambda d: d["tools"][0]["once"].pop("by"), "tools[0].once.by"),
        (lambda d: d["tools"][0]["grants"]["pay"].pop("cap"), "tools[0].grants.pay.cap"),
        (lambda d: d["tools"][0]["grants"]["pay"]["needs"].pop("key"), "tools[0].grants.pay.needs.key"),
    ],
)
def test_required_fields_are_named_when_missing(here, remove, path):
    problems = broken(here, remove)
    assert any(p.startswith(f"{path}: is required") for p in problems), problems
    # The absence is the one problem of that key: nothing more about its value.
    assert [p for p in problems if p.startswith(f"{path}:")] == [f"{path}: is required"]


def test_a_manifest_that_does_not_exist_is_named_by_its_resolved_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    with pytest.raises(ManifestError) as caught:
        load_manifest(Path("sub/../nothere.json"))
    assert caught.value.message == (f"{tmp_path.resolve() / 'nothere.json'}: 1 problem\n"
                                    "  the manifest file does not exist")
    served = subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "serve", "nothere.json"],
                            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
    assert served.returncode == 2 and served.stdout == ""
    (refused,) = [json.loads(line) for line in served.stderr.splitlines()]
    assert refused["event"] == "manifest_refused"
    assert refused["manifest"] == str(tmp_path.resolve() / "nothere.json")
    assert refused["problems"] == ["the manifest file does not exist"]


def test_a_key_written_twice_is_refused(here):
    text = json.dumps(seed_example()).replace('"keep": 90', '"keep": 90, "keep": 30', 1)
    (here / "manifest.json").write_text(text)
    with pytest.raises(ManifestError) as caught:
        load_manifest(here / "manifest.json")
    assert caught.value.problems == ("server.keep: appears more than once in this object",)


def test_a_file_that_is_not_json_names_the_line_and_column(here):
    (here / "manifest.json").write_text('{\n  "server": {,\n}')
    with pytest.raises(ManifestError) as caught:
        load_manifest(here / "manifest.json")
    assert "line 2 column" in only_problem(list(caught.value.problems))


def test_nan_is_not_a_json_number(here):
    (here / "manifest.json").write_text(json.dumps(seed_example()).replace("60000", "NaN"))
    with pytest.raises(ManifestError) as caught:
        load_manifest(here / "manifest.json")
    assert caught.value.problems == ("not valid JSON: NaN is not a JSON number",)
    assert caught.value.source == str(here / "manifest.json")


def test_a_missing_manifest_file_is_a_manifest_error(here):
    with pytest.raises(ManifestError) as caught:
        load_manifest(here / "absent.json")
    assert caught.value.kind == "manifest"


# -- tools ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["refund order", "", "a" * 129, "émile", "a/b", "x;y", 7])
def test_tool_names_use_only_mcps_allowed_characters(here, name):
    problem = only_problem(broken(here, lambda d: d["tools"][0].__setitem__("name", name)))
    assert problem.startswith("tools[0].name: ")


@pytest.mark.parametrize("name", ["a", "refund.v2", "Refund-Order_2", "a" * 128])
def test_tool_names_within_mcps_rules_are_accepted(here, name):
    assert broken(here, lambda d: d["tools"][0].__setitem__("name", name)) == []


def test_tool_names_are_unique(here):
    def twice(d):
        d["tools"].append(dict(d["tools"][0]))

    problem = only_problem(broken(here, twice))
    assert problem.startswith("tools[1].name: ") and "tools[0]" in problem


def test_a_tool_may_not_take_the_servers_own_status_tool_name(here):
    problem = only_problem(broken(here, lambda d: d["tools"][0].__setitem__("name", RUN_STATUS_TOOL)))
    assert problem.startswith("tools[0].name: ")


def test_a_manifest_serves_at_least_one_tool(here):
    assert only_problem(broken(here, lambda d: d.__setitem__("tools", []))).startswith("tools: ")


@pytest.mark.parametrize("key", ["timeout_ms", "connect_timeout_ms"])
def test_every_tool_gives_both_network_timeouts(here, key):
    def drop(d):
        d["tools"].append(dict(d["tools"][0], name="no_grants", grants={}, once=None,
                               net={"timeout_ms": 1000, "connect_timeout_ms": 1000}))
        d["tools"][1].pop("once")
        d["tools"][1].pop("quota")
        del d["tools"][1]["net"][key]

    assert only_problem(broken(here, drop)) == f"tools[1].net.{key}: is required"


@pytest.mark.parametrize("value", [0, -5, 1.5, "100", True, None, 3_600_001])
def test_timeouts_are_whole_positive_milliseconds(here, value):
    problem = only_problem(broken(here, lambda d: d["tools"][0]["net"].__setitem__("timeout_ms", value)))
    assert problem.startswith("tools[0].net.timeout_ms: ")


def test_program_paths_are_resolved_relative_to_the_manifest_and_must_exist(here):
    (here / "tools").mkdir()
    write_programs(here / "tools", "lookup.py")
    data = seed_example()
    data["tools"][0]["program"] = "tools/lookup.py"
    assert check(data, here / "manifest.json").tools[0].program == here / "tools" / "lookup.py"
    problem = only_problem(broken(here, lambda d: d["tools"][0].__setitem__("program", "nope.py")))
    assert problem.startswith("tools[0].program: ") and str(here / "nope.py") in problem


def test_a_program_is_a_python_file(here):
    (here / "refund.staal").write_text("")
    problem = only_problem(broken(here, lambda d: d["tools"][0].__setitem__("program", "refund.staal")))
    assert problem.startswith("tools[0].program: ")


@pytest.mark.parametrize("entry", ["", "1main", "main()", "class"])
def test_the_entry_is_a_python_identifier(here, entry):
    problem = only_problem(broken(here, lambda d: d["tools"][0].__setitem__("entry", entry)))
    assert problem.startswith("tools[0].entry: ")


@pytest.mark.parametrize("where", ["server", "tool"])
@pytest.mark.parametrize("value", [0, -1, 1.0, "2"])
def test_max_concurrent_runs_is_at_least_one(here, where, value):
    def change(d):
        target = d["server"] if where == "server" else d["tools"][0]
        target["max_concurrent_runs"] = value

    problem = only_problem(broken(here, change))
    prefix = "server" if where == "server" else "tools[0]"
    assert problem.startswith(f"{prefix}.max_concurrent_runs: ")


@pytest.mark.parametrize("deadline", ["120", "2 minutes", "0s", 120, "1.5m"])
def test_a_deadline_is_a_duration(here, deadline):
    problem = only_problem(broken(here, lambda d: d["tools"][0].__setitem__("deadline", deadline)))
    assert problem.startswith("tools[0].deadline: ")


# -- server.keep and once ----------------------------------------------------


@pytest.mark.parametrize("keep, days", [(1, 1), (90, 90), (36500, 36500), ("forever", None)])
def test_server_keep_is_whole_days_or_forever(here, keep, days):
    data = seed_example()
    data["server"]["keep"] = keep
    del data["tools"][0]["once"]["keep"]
    assert check(data, here / "manifest.json").server.keep_days == days


@pytest.mark.parametrize("keep", [0, -1, 1.5, "90", "90d", "always", None, True])
def test_server_keep_refuses_anything_else(here, keep):
    problem = only_problem(broken(here, lambda d: d["server"].__setitem__("keep", keep)))
    assert problem.startswith("server.keep: ")


def test_once_keep_may_not_outlast_server_keep(here):
    def change(d):
        d["server"]["keep"] = 7
        d["tools"][0]["once"]["keep"] = "8d"

    assert only_problem(broken(here, change)).startswith("tools[0].once.keep: ")

    def equal(d):
        d["server"]["keep"] = 7
        d["tools"][0]["once"]["keep"] = "168h"

    assert broken(here, equal) == []


def test_once_keep_defaults_to_server_keep(here):
    data = seed_example()
    data["server"]["keep"] = 12
    del data["tools"][0]["once"]["keep"]
    assert check(data, here / "manifest.json").tools[0].once.keep.ms == 12 * 86_400_000
    data["server"]["keep"] = "forever"
    assert check(data, here / "manifest.json").tools[0].once.keep is None


def test_once_keep_is_in_minutes_hours_or_days(here):
    problem = only_problem(broken(here, lambda d: d["tools"][0]["once"].__setitem__("keep", "3600s")))
    assert problem.startswith("tools[0].once.keep: ")


def test_once_keep_under_a_forever_server_keep_may_be_anything(here):
    def change(d):
        d["server"]["keep"] = "forever"
        d["tools"][0]["once"]["keep"] = "36500d"

    assert broken(here, change) == []


@pytest.mark.parametrize(
    "by, path",
    [
        ([], "tools[0].once.by"),
        ("order", "tools[0].once.by"),
        (["order", "order"], "tools[0].once.by[1]"),
        (["pay"], "tools[0].once.by[0]"),
        (["not an identifier"], "tools[0].once.by[0]"),
        ([3], "tools[0].once.by[0]"),
    ],
)
def test_once_by_names_at_least_one_argument_each_once(here, by, path):
    problem = only_problem(broken(here, lambda d: d["tools"][0]["once"].__setitem__("by", by)))
    assert problem.startswith(f"{path}: ")


# -- quotas -----------------------------------------------------------------


def test_a_quota_limits_calls_money_or_both(here):
    def neither(d):
        del d["tools"][0]["quota"]["calls"]
        del d["tools"][0]["quota"]["money"]

    assert only_problem(broken(here, neither)).startswith("tools[0].quota: ")
    assert broken(here, lambda d: d["tools"][0]["quota"].pop("money")) == []
    assert broken(here, lambda d: d["tools"][0]["quota"].pop("calls")) == []


@pytest.mark.parametrize(
    "key, value",
    [("window", "a day"), ("window", "0h"), ("calls", 0), ("calls", 2.5),
     ("money", {"amount": "0", "currency": "USD"}), ("money", {"amount": "-5", "currency": "USD"}),
     ("money", {"amount": 500, "currency": "USD"})],
)
def test_quota_fields_are_checked(here, key, value):
    problem = only_problem(broken(here, lambda d: d["tools"][0]["quota"].__setitem__(key, value)))
    assert problem.startswith(f"tools[0].quota.{key}")


def test_a_money_quota_needs_a_bounded_worst_case_in_its_currency(here):
    def unbounded(d):
        del d["tools"][0]["grants"]["pay"]["uses"]

    assert only_problem(broken(here, unbounded)).startswith("tools[0].quota.money: ")

    def other_currency(d):
        d["tools"][0]["quota"]["money"]["currency"] = "EUR"

    assert only_problem(broken(here, other_currency)).startswith("tools[0].quota.money: ")

    def bounded_by_max(d):
        del d["tools"][0]["grants"]["pay"]["uses"]
        d["tools"][0]["grants"]["pay"]["max"] = {"amount": "100", "currency": "USD"}

    assert broken(here, bounded_by_max) == []


# -- model ------------------------------------------------------------------


def _model_tool(d):
    d["tools"].append({
        "name": "summarise", "description": "Summarise.", "program": "refund.py",
        "grants": {"llm": {"cap": "model.complete", "uses": 2}},
        "net": {"timeout_ms": 1000, "connect_timeout_ms": 1000},
    })


@pytest.mark.parametrize("key", ["timeout_ms", "retries"])
def test_model_timeout_and_retries_are_required_when_a_tool_can_reach_a_model(here, key):
    def change(d):
        _model_tool(d)
        del d["model"][key]

    assert only_problem(broken(here, change)).startswith(f"model.{key}: is required")


def test_model_timeout_and_retries_are_optional_when_no_tool_can_reach_a_model(here):
    def change(d):
        del d["model"]["timeout_ms"]
        del d["model"]["retries"]

    assert broken(here, change) == []


def test_a_tool_that_can_reach_a_model_needs_the_model_section(here):
    def change(d):
        _model_tool(d)
        del d["model"]

    assert only_problem(broken(here, change)).startswith("model: is required")


@pytest.mark.parametrize(
    "key, value", [("provider", "openai"), ("retries", -1), ("retries", 11), ("timeout_ms", 0),
                   ("base_url", "ftp://x"), ("model", "")]
)
def test_model_fields_are_checked(here, key, value):
    problem = only_problem(broken(here, lambda d: d["model"].__setitem__(key, value)))
    assert problem.startswith(f"model.{key}: ")


# -- secrets ----------------------------------------------------------------


@pytest.mark.parametrize(
    "where, path",
    [
        (lambda d, v: d["tools"][0]["grants"]["pay"]["needs"].__setitem__("key", v),
         "tools[0].grants.pay.needs.key"),
        (lambda d, v: d["model"].__setitem__("api_key", v), "model.api_key"),
        (lambda d, v: d["tools"][0]["grants"].__setitem__("db", {"cap": "db.postgres.read", "dsn": v}),
         "tools[0].grants.db.dsn"),
    ],
)
def test_a_secret_written_as_a_value_is_refused_without_repeating_it(here, where, path):
    secret = "sk_live_51Hx-never-print-me"
    problem = only_problem(broken(here, lambda d: where(d, secret)))
    assert problem.startswith(f"{path}: ")
    assert secret not in problem and "sk_live" not in problem


@pytest.mark.parametrize("env", ["", "1ABC", "A-B", "A B", 5])
def test_a_secret_names_an_environment_variable(here, env):
    problem = only_problem(
        broken(here, lambda d: d["model"].__setitem__("api_key", {"env": env}))
    )
    assert problem.startswith("model.api_key.env: ")


# -- grants: one shape per capability ----------------------------------------

MINIMAL_GRANTS = {
    "net.http.get": {"only": ["https://example.com/v1/**"]},
    "net.http.post": {"only": ["https://example.com/v1/items"], "idempotency_key": True},
    "payments.stripe.refund": {k: v for k, v in STRIPE_GRANT.items() if k != "cap"},
    "model.complete": {"uses": 3},
    "db.sqlite.read": {"path": "shop.db"},
    "db.sqlite.write": {"path": "shop.db"},
    "db.postgres.read": {"dsn": {"env": "SHOP_DSN"}},
    "db.postgres.write": {"dsn": {"env": "SHOP_DSN"}},
    "clock.now": {},
    "random.bytes": {"uses": 2},
    "ffi.c": {"library": "libc.so.6"},
}


def _with_grant(cap: str, fields: dict):
    def change(d):
        d["tools"][0]["grants"]["extra"] = {"cap": cap, **fields}
    return change


def test_the_catalogue_and_the_minimal_grants_cover_the_same_capabilities():
    assert set(MINIMAL_GRANTS) == set(CATALOGUE)


@pytest.mark.parametrize("cap", sorted(CATALOGUE))
def test_every_capability_accepts_its_own_grant_shape(here, cap):
    assert broken(here, _with_grant(cap, MINIMAL_GRANTS[cap])) == []


@pytest.mark.parametrize("cap", ["db.sqlite.read", "db.sqlite.write"])
def test_a_sqlite_grant_whose_database_file_does_not_exist_is_refused(here, cap):
    (here / "shop.db").unlink()
    assert broken(here, _with_grant(cap, {"path": "shop.db"})) == [
        f"tools[0].grants.extra.path: no database file at {(here / 'shop.db').resolve()} "
        "(a grant never creates its database)"]
    assert not (here / "shop.db").exists()


@pytest.mark.parametrize("cap", sorted(CATALOGUE))
def test_every_capability_refuses_keys_it_does_not_take(here, cap):
    foreign = next(k for k in ("library", "path", "base_url", "idempotency_key")
                   if k not in CATALOGUE[cap].keys)
    value = {"library": "libc.so.6", "path": "x.db", "base_url": "https://x",
             "idempotency_key": True}[foreign]
    problem = only_problem(broken(here, _with_grant(cap, {**MINIMAL_GRANTS[cap], foreign: value})))
    assert problem.startswith(f"tools[0].grants.extra.{foreign}: not a key of a '{cap}' grant")


@pytest.mark.parametrize("cap", sorted(c for c in CATALOGUE if CATALOGUE[c].required))
def test_every_capability_requires_its_own_keys(here, cap):
    for key in CATALOGUE[cap].required:
        fields = {k: v for k, v in MINIMAL_GRANTS[cap].items() if k != key}
        problems = broken(here, _with_grant(cap, fields))
        assert any(p.startswith(f"tools[0].grants.extra.{key}: is required") for p in problems), problems


def test_an_unknown_capability_is_refused_naming_the_known_ones(here):
    problem = only_problem(broken(here, _with_grant("net.http.delete", {})))
    assert problem.startswith("tools[0].grants.extra.cap: ") and "net.http.get" in problem


def test_grant_names_are_parameter_names(here):
    problem = only_problem(broken(
        here, lambda d: d["tools"][0]["grants"].__setitem__("my-pay", {"cap": "clock.now"})))
    assert problem.startswith("tools[0].grants.my-pay: ")


def test_a_need_must_be_of_the_capability_the_composite_acts_through(here):
    def change(d):
        d["tools"][0]["grants"]["pay"]["needs"]["get"]["cap"] = "net.http.post"

    problem = only_problem(broken(here, change))
    assert problem.startswith("tools[0].grants.pay.needs.get.cap: must be 'net.http.get'")


def test_a_payment_posts_with_idempotency_keys(here):
    def change(d):
        d["tools"][0]["grants"]["pay"]["needs"]["post"]["idempotency_key"] = False

    problem = only_problem(broken(here, change))
    assert problem.startswith("tools[0].grants.pay.needs.post.idempotency_key: must be true")


def test_a_money_capability_needs_a_money_limit(here):
    def change(d):
        del d["tools"][0]["grants"]["pay"]["each"]
        del d["tools"][0]["quota"]["money"]

    assert only_problem(broken(here, change)).startswith("tools[0].grants.pay: ")


@pytest.mark.parametrize(
    "each, most, path",
    [
        ({"amount": "60", "currency": "USD"}, {"amount": "50", "currency": "USD"},
         "tools[0].grants.pay.each"),
        ({"amount": "10", "currency": "USD"}, {"amount": "50", "currency": "EUR"}, "tools[0].grants.pay.max"),
        ({"amount": "0.00", "currency": "USD"}, {"amount": "50", "currency": "USD"},
         "tools[0].grants.pay.each.amount"),
        ({"amount": "5O.00", "currency": "USD"}, {"amount": "50", "currency": "USD"},
         "tools[0].grants.pay.each.amount"),
        ({"amount": "5.00", "currency": "usd"}, {"amount": "50", "currency": "USD"},
         "tools[0].grants.pay.each.currency"),
    ],
)
def test_each_and_max_are_positive_money_in_one_currency(here, each, most, path):
    def change(d):
        d["tools"][0]["grants"]["pay"]["each"] = each
        d["tools"][0]["grants"]["pay"]["max"] = most
        del d["tools"][0]["quota"]["money"]

    problem = only_problem(broken(here, change))
    assert problem.startswith(f"{path}: ")


@pytest.mark.parametrize("uses", [0, -1, 1.5, "1", 1_000_001])
def test_uses_is_a_positive_count(here, uses):
    problem = only_problem(broken(here, lambda d: d["tools"][0]["grants"]["pay"].__setitem__("uses", uses)))
    assert problem.startswith("tools[0].grants.pay.uses: ")


@pytest.mark.parametrize(
    "pattern",
    ["api.stripe.com/v1/refunds", "ftp://api.stripe.com/x", "https:///v1", "https://*.stripe.com/v1",
     "https://api.stripe.com/v1/refunds?x=1", "https://api.stripe.com/v1/re**", "https://u:p@api.stripe.com/v1",
     "https://api.stripe.com:99999/v1", "https://api.stripe.com:port/v1"],
)
def test_only_patterns_are_http_urls_with_wildcards_in_the_path(here, pattern):
    def change(d):
        d["tools"][0]["grants"]["pay"]["needs"]["get"]["only"] = [pattern]

    problem = only_problem(broken(here, change))
    assert problem.startswith("tools[0].grants.pay.needs.get.only[0]: ")


def test_an_empty_only_allows_nothing_and_is_refused(here):
    def change(d):
        d["tools"][0]["grants"]["pay"]["needs"]["get"]["only"] = []

    assert only_problem(broken(here, change)).startswith("tools[0].grants.pay.needs.get.only: ")


def test_grant_paths_are_resolved_relative_to_the_manifest(here):
    data = seed_example()
    data["tools"][0]["grants"]["db"] = {"cap": "db.sqlite.read", "path": "data/shop.db"}
    (here / "data").mkdir()
    (here / "data" / "shop.db").write_bytes(b"")
    assert check(data, here / "manifest.json").tools[0].grants["db"].path == here / "data" / "shop.db"


def test_a_library_path_must_exist(here):
    problem = only_problem(broken(here, _with_grant("ffi.c", {"library": "./libnothing.so"})))
    assert problem.startswith("tools[0].grants.extra.library: ")


# -- notify ----------------------------------------------------------------


def test_the_notify_command_must_be_runnable(here):
    problem = only_problem(broken(here, lambda d: d["server"].__setitem__("notify", ["./no-such-notifier"])))
    assert problem.startswith("server.notify[0]: ")
    problem = only_problem(broken(here, lambda d: d["server"].__setitem__("notify", [])))
    assert problem.startswith("server.notify: ")


def test_notify_env_names_environment_variables(here):
    problem = only_problem(broken(here, lambda d: d["server"].__setitem__("notify_env", ["OK", "not ok"])))
    assert problem.startswith("server.notify_env[1]: ")


# -- warnings ----------------------------------------------------------------


def test_a_tool_that_can_spend_money_without_once_is_warned_about(here):
    data = seed_example()
    assert check(data, here / "manifest.json").warnings() == []
    del data["tools"][0]["once"]
    warnings = check(data, here / "manifest.json").warnings()
    assert len(warnings) == 1 and "'refund_order'" in warnings[0]


def test_the_command_line_prints_the_warning_on_stderr(here):
    # check runs the program in a worker, as serve does: a real refund program.
    (here / "refund.py").write_text((ROOT / "examples" / "refund.py").read_text())
    data = seed_example()
    del data["tools"][0]["once"]
    done = subprocess.run(
        [sys.executable, "-m", "staal.supervisor.app.main", "check", str(write_manifest(here, data))],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0
    assert "warning: tool 'refund_order' can spend money and has no once" in done.stderr


# -- the limits a tool sets: max_memory, max_wait, max_cpu -------------------------------


def _setting(key: str, value: object):
    return lambda data: data["tools"][0].__setitem__(key, value)


@pytest.mark.parametrize("value, problem", [
    (512, 'tools[0].max_memory: expected a size as a string (a whole number followed by MiB or GiB'),
    ("512MB", 'tools[0].max_memory: "512MB" is not a size'),
    ("16MiB", 'tools[0].max_memory: "16MiB" is less than 32MiB'),
    ("99999999GiB", 'tools[0].max_memory: "99999999GiB" is not a size'),
    ("999999MiB", 'tools[0].max_memory: "999999MiB" is more than this machine has'),
])
def test_a_wrong_max_memory_is_refused_naming_its_key_path(here, value, problem):
    if "machine" in problem and machine_mib() >= 999_999:
        pytest.skip("this machine has more than 999999 MiB")
    assert only_problem(broken(here, _setting("max_memory", value))).startswith(problem)


@pytest.mark.parametrize("key", ["max_wait", "max_cpu"])
@pytest.mark.parametrize("value, problem", [
    ("2d", '"2d": this duration takes s, m or h, not d'),
    (120, "expected a duration as a string"),
])
def test_a_wrong_max_wait_or_max_cpu_is_refused_naming_its_key_path(here, key, value, problem):
    assert only_problem(broken(here, _setting(key, value))).startswith(f"tools[0].{key}: {problem}")
