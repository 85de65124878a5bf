"""prompts/list and prompts/get, sans I/O (issue 29): paged with signed
cursors, templates filled (a URI's values escaped), a missing required
argument and an unknown prompt refused as invalid params naming them, and
the capability and caching hints each revision gives."""

from __future__ import annotations

import base64

import pytest

from staal.manifest.prompt_model import Prompt, PromptArgument, PromptMessage
from staal.protocol.mcp.cursors import CursorSigner
from staal.protocol.mcp.dispatch import Dispatcher, Result
from staal.protocol.mcp.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, RpcError
from staal.protocol.mcp.resources import ResourceCatalogue
from staal.protocol.mcp.revisions import LEGACY, MODERN, ServerInfo
from staal.protocol.prompts.catalogue import PromptCatalogue, fill, uri_escape

SIGNER = CursorSigner(b"k" * 32)
HELP = Prompt(
    name="refund_help", description="How to refund.", title="Refund",
    arguments=(PromptArgument("order", "Its id.", required=True), PromptArgument("reason")),
    messages=(
        PromptMessage("user", "text", text="Refund {order}: {reason}. {{braces}}"),
        PromptMessage("user", "resource", text="Order {order}", uri="staal://shop/orders/{order}"),
        PromptMessage("assistant", "image", mime_type="image/png", data=b"\x89PNG...")))


def many(count: int) -> list[Prompt]:
    return [Prompt(f"p{i:03d}", f"Prompt {i}.", (), (PromptMessage("user", "text", text="x"),))
            for i in range(count)]


def test_a_prompt_is_listed_with_its_title_and_arguments():
    listed = PromptCatalogue([HELP], SIGNER).listing({})
    assert listed == {"prompts": [{
        "name": "refund_help", "title": "Refund", "description": "How to refund.",
        "arguments": [{"name": "order", "description": "Its id.", "required": True},
                      {"name": "reason", "required": False}]}]}


def test_a_long_list_is_paged_through_cursors_each_prompt_once_in_order():
    catalogue = PromptCatalogue(many(120), SIGNER, page_size=50)
    names, params = [], {}
    while True:
        page = catalogue.listing(params)
        assert not isinstance(page, RpcError)
        names += [p["name"] for p in page["prompts"]]
        if "nextCursor" not in page:
            break
        params = {"cursor": page["nextCursor"]}
    assert names == [f"p{i:03d}" for i in range(120)]


@pytest.mark.parametrize("cursor", ["cDA0OQ", "", 7, SIGNER.make("orders", "p049")])
def test_a_cursor_this_server_did_not_give_for_prompts_is_refused(cursor):
    refused = PromptCatalogue(many(120), SIGNER).listing({"cursor": cursor})
    assert isinstance(refused, RpcError) and refused.code == INVALID_PARAMS
    assert "cursor" in refused.message


def test_getting_a_prompt_fills_its_templates_and_escapes_values_in_a_uri():
    got = PromptCatalogue([HELP], SIGNER).get(
        {"name": "refund_help", "arguments": {"order": "o1/../x y"}})
    assert got == {"description": "How to refund.", "messages": [
        {"role": "user", "content": {"type": "text", "text": "Refund o1/../x y: . {braces}"}},
        {"role": "user", "content": {"type": "resource", "resource": {
            "uri": "staal://shop/orders/o1%2F..%2Fx%20y", "mimeType": "text/plain",
            "text": "Order o1/../x y"}}},
        {"role": "assistant", "content": {"type": "image", "mimeType": "image/png",
                                          "data": base64.b64encode(b"\x89PNG...").decode()}}]}


@pytest.mark.parametrize(("params", "named"), [
    ({"name": "refund_help"}, "order"),
    ({"name": "refund_help", "arguments": {"reason": "late"}}, "order"),
    ({"name": "refund_help", "arguments": {"order": "o1", "colour": "red"}}, "colour"),
    ({"name": "refund_help", "arguments": {"order": 7}}, "order"),
])
def test_arguments_a_prompt_cannot_take_are_invalid_params_naming_the_argument(params, named):
    refused = PromptCatalogue([HELP], SIGNER).get(params)
    assert isinstance(refused, RpcError) and refused.code == INVALID_PARAMS
    assert refused.data == {"argument": named} and repr(named) in refused.message


@pytest.mark.parametrize("name", ["no_such", None, 3])
def test_an_unknown_prompt_is_invalid_params_as_the_spec_says(name):
    refused = PromptCatalogue([HELP], SIGNER).get({"name": name})
    assert isinstance(refused, RpcError) and refused.code == INVALID_PARAMS


def test_fill_and_escape():
    assert fill("{a}-{b}", {"a": "1"}) == "1-"
    assert uri_escape("é ~a") == "%C3%A9%20~a"


def dispatcher(prompts: list[Prompt]) -> Dispatcher:
    resources = ResourceCatalogue("shop", [], SIGNER)
    return Dispatcher(ServerInfo("shop", "1"), [], resources=resources,
                      prompts=PromptCatalogue(prompts, SIGNER))


def test_the_prompts_and_completions_capabilities_are_advertised_only_with_prompts():
    with_prompts = dispatcher([HELP]).legacy.capabilities
    assert with_prompts["prompts"] == {"listChanged": False} and with_prompts["completions"] == {}
    without = dispatcher([])
    assert "prompts" not in without.legacy.capabilities
    assert "completions" not in without.legacy.capabilities
    refused = without.in_revision(LEGACY, 1, "prompts/list", {})
    assert isinstance(refused, RpcError) and refused.code == METHOD_NOT_FOUND


def test_a_2026_07_28_prompts_list_carries_caching_hints_and_a_2025_11_25_one_none():
    served = dispatcher([HELP])
    modern = served.in_revision(MODERN, 1, "prompts/list", {})
    legacy = served.in_revision(LEGACY, 1, "prompts/list", {})
    assert isinstance(modern, Result) and isinstance(legacy, Result)
    assert (modern.result["ttlMs"], modern.result["cacheScope"]) == (0, "private")
    assert modern.result["resultType"] == "complete"
    assert "ttlMs" not in legacy.result and legacy.result["prompts"] == modern.result["prompts"]
