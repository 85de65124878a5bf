"""The manifest's `resources` section and the server name resource URIs
need (issue 16): a DNS label by seed 002's rules, collections with read
grants only, each served by two hidden tools, and every problem named by
its key path; a collection whose entries take other inputs is refused at
start, by `check` as by `serve`."""

from __future__ import annotations

from pathlib import Path

import pytest

from staal.errors import ManifestError
from staal.manifest.check import check
from staal.manifest.resources import dns_label_problem, is_hidden_tool
from tests.helpers.manifests import STRIPE_GRANT, seed_example, write_programs

NET = {"timeout_ms": 1000, "connect_timeout_ms": 1000}


@pytest.fixture
def here(tmp_path: Path) -> Path:
    write_programs(tmp_path, "refund.py", "orders.py")
    return tmp_path


def collection(**fields) -> dict:
    return {"name": "orders", "description": "Orders.", "program": "orders.py",
            "get": "get_order", "list": "list_orders",
            "grants": {"db": {"cap": "db.sqlite.read", "path": "shop.db"}}, "net": NET, **fields}


def problems_of(data: dict, here: Path) -> list[str]:
    with pytest.raises(ManifestError) as refused:
        check(data, here / "manifest.json")
    return list(refused.value.problems)


def with_resources(*collections: dict, name: str = "shop-actions") -> dict:
    data = seed_example()
    data["server"]["name"] = name
    data["resources"] = list(collections)
    return data


@pytest.mark.parametrize("name", ["a", "shop-actions", "x1", "a" * 63, "9lives", "ab-c--d"])
def test_a_dns_label_is_accepted_as_the_server_name(name):
    assert dns_label_problem(name) is None


@pytest.mark.parametrize(("name", "why"), [
    ("", "1 to 63"), ("a" * 64, "1 to 63"), ("Shop", "lowercase"), ("shop_actions", "lowercase"),
    ("shop.actions", "lowercase"), ("-shop", "start or end"), ("shop-", "start or end"),
    ("xn--shop", "3rd and 4th"), ("127", "letter"), ("12-3", "letter"), ("shöp", "lowercase"),
])
def test_a_server_name_that_is_not_a_dns_label_is_refused_saying_which_rule(here, name, why):
    assert why in dns_label_problem(name)
    (problem,) = problems_of(with_resources(collection(), name=name), here)
    assert problem.startswith("server.name:") and (why if name else "empty") in problem


def test_the_server_name_is_checked_even_without_a_resources_section(here):
    data = seed_example()
    data["server"]["name"] = "Shop Actions"
    (problem,) = problems_of(data, here)
    assert problem.startswith("server.name:") and "DNS label" in problem


def test_a_collection_is_served_by_two_hidden_tools_after_the_manifests_own(here):
    manifest = check(with_resources(collection(max_page_size=100)), here / "manifest.json")
    (decl,) = manifest.resources
    assert (decl.name, decl.max_page_size) == ("orders", 100)
    assert [t.name for t in manifest.tools] == ["refund_order", "@orders.get", "@orders.list"]
    assert (decl.get.entry, decl.list.entry) == ("get_order", "list_orders")
    assert decl.get.grants == decl.list.grants and "db" in decl.get.grants
    assert [is_hidden_tool(t.name) for t in manifest.tools] == [False, True, True]


def test_max_page_size_defaults_to_200_and_may_only_lower_it(here):
    manifest = check(with_resources(collection()), here / "manifest.json")
    assert manifest.resources[0].max_page_size == 200
    (problem,) = problems_of(with_resources(collection(max_page_size=201)), here)
    assert problem.startswith("resources[0].max_page_size:")


@pytest.mark.parametrize(("grant", "what"), [
    ({"cap": "db.sqlite.write", "path": "shop.db"}, "writes"),
    ({"cap": "net.http.post", "only": ["https://example.com/*"]}, "writes"),
    (STRIPE_GRANT, "moves money"),
])
def test_a_collection_holding_a_write_or_money_grant_is_refused_at_its_key_path(here, grant, what):
    problems = problems_of(with_resources(collection(grants={"db": grant})), here)
    assert any(p.startswith("resources[0].grants.db:") and what in p
               and "read capabilities only" in p for p in problems), problems


def test_a_collection_named_runs_or_not_a_label_or_twice_is_refused(here):
    assert "staal's own" in problems_of(with_resources(collection(name="runs")), here)[0]
    assert "DNS label" in problems_of(with_resources(collection(name="Orders")), here)[0]
    (twice,) = problems_of(with_resources(collection(), collection()), here)
    assert twice.startswith("resources[1].name:") and "already" in twice


def test_every_problem_in_a_collection_is_reported_together_with_its_key_path(here):
    broken = {"name": "orders", "description": 5, "program": "missing.py", "get": "not valid",
              "net": {"timeout_ms": 1000}, "colour": "red"}
    text = "\n".join(problems_of(with_resources(broken), here))
    for path in ("resources[0].description", "resources[0].program", "resources[0].get",
                 "resources[0].net", "colour", "list"):
        assert path in text, text


def test_a_collection_may_list_the_ids_completions_offer(here):
    (orders,) = check(with_resources(collection(complete={"values": ["o1", "o2"]})),
                      here / "manifest.json").resources
    assert orders.ids == ("o1", "o2")
    (without,) = check(with_resources(collection()), here / "manifest.json").resources
    assert without.ids == ()


@pytest.mark.parametrize(("complete", "where"), [
    ({"values": []}, "resources[0].complete.values"),
    ({"values": [1]}, "resources[0].complete.values[0]"),
    ({"collection": "orders"}, "resources[0].complete.collection"),
])
def test_a_collections_listed_ids_that_are_not_strings_are_refused_at_their_key_path(
        here, complete, where):
    problems = problems_of(with_resources(collection(complete=complete)), here)
    assert any(p.startswith(f"{where}:") for p in problems), problems
