"""The manifest's `prompts` section (issue 29), checked at load as tools
are: unknown keys refused, every placeholder an argument, embedded
resources only the server's own, images only images, completions from
values or a declared collection, and a caller profile's `prompts` naming
prompts that exist; every problem named by its key path."""

from __future__ import annotations

from pathlib import Path

import pytest

from staal.errors import ManifestError
from staal.manifest.check import check
from staal.manifest.prompts import image_mime, placeholders
from tests.helpers.manifests import seed_example, write_programs

NET = {"timeout_ms": 1000, "connect_timeout_ms": 1000}
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 16


@pytest.fixture
def here(tmp_path: Path) -> Path:
    write_programs(tmp_path, "refund.py", "orders.py")
    (tmp_path / "chart.png").write_bytes(PNG)
    (tmp_path / "notes.txt").write_text("not an image")
    return tmp_path


def prompt(**fields) -> dict:
    return {"name": "refund_help", "description": "How to refund.",
            "arguments": [{"name": "order", "required": True}],
            "messages": [{"role": "user", "text": "Refund {order}."}], **fields}


def with_prompts(*prompts: dict, collections: bool = True) -> dict:
    data = seed_example()
    data["server"]["name"] = "shop"
    if collections:
        data["resources"] = [{"name": "orders", "description": "Orders.", "program": "orders.py",
                              "get": "get_order", "list": "list_orders",
                              "grants": {"db": {"cap": "db.sqlite.read", "path": "shop.db"}},
                              "net": NET}]
    data["prompts"] = list(prompts)
    return data


def problems_of(data: dict, here: Path) -> list[str]:
    with pytest.raises(ManifestError) as refused:
        check(data, here / "manifest.json")
    return list(refused.value.problems)


def test_a_prompt_with_text_a_resource_of_its_own_and_an_image_is_read_as_declared(here):
    declared = prompt(title="Refund", arguments=[
        {"name": "order", "description": "Its id.", "required": True,
         "complete": {"collection": "orders"}},
        {"name": "reason", "complete": {"values": ["late", "lost"]}}], messages=[
        {"role": "user", "text": "Refund {order}: {reason}. {{literal}}"},
        {"role": "user", "resource": {"uri": "staal://shop/orders/{order}", "text": "Order {order}"}},
        {"role": "assistant", "image": "chart.png"}])
    (read,) = check(with_prompts(declared), here / "manifest.json").prompts
    assert (read.name, read.title, read.description) == ("refund_help", "Refund", "How to refund.")
    order, reason = read.arguments
    assert (order.required, order.collection, order.values) == (True, "orders", ())
    assert (reason.required, reason.collection, reason.values) == (False, None, ("late", "lost"))
    text, resource, image = read.messages
    assert (text.kind, text.text) == ("text", "Refund {order}: {reason}. {{literal}}")
    assert (resource.kind, resource.uri, resource.mime_type) == (
        "resource", "staal://shop/orders/{order}", "text/plain")
    assert (image.role, image.kind, image.mime_type, image.data) == (
        "assistant", "image", "image/png", PNG)


@pytest.mark.parametrize(("changed", "where", "why"), [
    ({"colour": "red"}, "prompts[0].colour", "unknown key"),
    ({"name": "refund help"}, "prompts[0].name", "not a prompt name"),
    ({"messages": []}, "prompts[0].messages", "at least one message"),
    ({"messages": [{"role": "user", "text": "Refund {ordr}."}]},
     "prompts[0].messages[0].text", "{ordr} is not an argument of this prompt"),
    ({"messages": [{"role": "user", "text": "Refund {order!r}."}]},
     "prompts[0].messages[0].text", "is not a placeholder"),
    ({"messages": [{"role": "user", "text": "Refund {order."}]},
     "prompts[0].messages[0].text", "is not a template"),
    ({"messages": [{"role": "system", "text": "x"}]}, "prompts[0].messages[0].role", "not a role"),
    ({"messages": [{"role": "user", "text": "x", "image": "chart.png"}]},
     "prompts[0].messages[0]", "one of text, resource or image"),
    ({"messages": [{"role": "user", "resource": {"uri": "file:///etc/passwd", "text": "x"}}]},
     "prompts[0].messages[0].resource.uri", "not one of this server's resources"),
    ({"messages": [{"role": "user", "resource": {"uri": "staal://shop/customers/1", "text": "x"}}]},
     "prompts[0].messages[0].resource.uri", "not one of this server's resources"),
    ({"messages": [{"role": "user", "resource": {"uri": "staal://shop/runs", "text": "x",
                                                 "mime_type": "image/png"}}]},
     "prompts[0].messages[0].resource.mime_type", "not a text MIME type"),
    ({"messages": [{"role": "user", "image": "notes.txt"}]},
     "prompts[0].messages[0].image", "not a PNG, JPEG, GIF or WebP"),
    ({"messages": [{"role": "user", "image": "missing.png"}]},
     "prompts[0].messages[0].image", "cannot be read"),
    ({"arguments": [{"name": "order", "complete": {"collection": "customers"}}]},
     "prompts[0].arguments[0].complete.collection", "not a collection"),
    ({"arguments": [{"name": "order", "complete": {"values": ["a"], "collection": "orders"}}]},
     "prompts[0].arguments[0].complete", "one of values"),
    ({"arguments": [{"name": "order", "required": "yes"}]},
     "prompts[0].arguments[0].required", "true or false"),
    ({"arguments": [{"name": "order"}, {"name": "order"}]},
     "prompts[0].arguments[1].name", "already an argument"),
])
def test_a_bad_prompt_is_refused_naming_its_key_path(here, changed, where, why):
    problems = problems_of(with_prompts(prompt(**changed)), here)
    assert any(p.startswith(f"{where}:") and why in p for p in problems), problems


def test_two_prompts_of_one_name_are_refused_naming_the_second(here):
    (problem,) = problems_of(with_prompts(prompt(), prompt()), here)
    assert problem == "prompts[1].name: 'refund_help' is already the name of prompts[0]"


def test_every_problem_of_every_prompt_is_reported_at_once(here):
    problems = problems_of(with_prompts(prompt(extra=1), prompt(name="b", description="")), here)
    assert [p.split(":")[0] for p in problems] == ["prompts[0].extra", "prompts[1].description"]


def auth_sections(data: dict, seen: object) -> dict:
    data["server"]["http"] = {"public_url": "https://shop.example/mcp"}
    data["auth"] = {"issuer": "https://issuer.example", "audience": "https://shop.example/mcp"}
    data["callers"] = [{"name": "desk", "when": {"scope": "support"}, "tools": {"refund_order": {}},
                        "prompts": seen}]
    return data


def test_a_caller_profile_names_the_prompts_it_sees(here):
    manifest = check(auth_sections(with_prompts(prompt()), {"refund_help": {}}),
                     here / "manifest.json")
    assert manifest.callers is not None and manifest.callers[0].prompts == {"refund_help"}


@pytest.mark.parametrize(("seen", "where", "why"), [
    ({"lookup_help": {}}, "callers[0].prompts.lookup_help", "not a prompt of this manifest"),
    (["refund_help"], "callers[0].prompts", "expected an object"),
    ({"refund_help": {"grants": "x"}}, "callers[0].prompts.refund_help.grants", "unknown key"),
])
def test_a_caller_profile_naming_a_prompt_wrongly_is_refused(here, seen, where, why):
    problems = problems_of(auth_sections(with_prompts(prompt()), seen), here)
    assert any(p.startswith(f"{where}:") and why in p for p in problems), problems


def test_placeholders_are_the_argument_names_a_template_fills():
    assert placeholders("a {x} b {y_2} {{not}} {x}") == ["x", "y_2", "x"]
    assert "not a placeholder" in placeholders("{x:>4}")
    assert "not a template" in placeholders("}")


def test_an_image_is_known_by_its_first_bytes():
    assert image_mime(PNG) == "image/png"
    assert image_mime(b"\xff\xd8\xff\xe0....") == "image/jpeg"
    assert image_mime(b"GIF89a....") == "image/gif"
    assert image_mime(b"RIFF\0\0\0\0WEBPVP8 ") == "image/webp"
    assert image_mime(b"<svg/>") is None
