"""completion/complete, sans I/O (issue 29): the operator's values
prefix-matched, at most 100 with hasMore; a collection's record ids asked
of the application (RecordIds) and shaped from its page; a prompt, argument
or template not served refused as invalid params."""

from __future__ import annotations

import pytest

from staal.manifest.prompt_model import Prompt, PromptArgument, PromptMessage
from staal.protocol.mcp.cursors import CursorSigner
from staal.protocol.mcp.dispatch import Dispatcher
from staal.protocol.mcp.jsonrpc import INVALID_PARAMS, RpcError
from staal.protocol.mcp.resources import Collection, Contents, ReadResource, RecordIds, ResourceCatalogue
from staal.protocol.mcp.revisions import MODERN, ServerInfo
from staal.protocol.prompts.catalogue import PromptCatalogue
from staal.protocol.prompts.completion import (
    MAX_VALUES,
    Completer,
    ids_completion,
    list_after,
    values_completion,
)

SIGNER = CursorSigner(b"k" * 32)
CITIES = (*(f"city{i:03d}" for i in range(150)), "paris", "park")
HELP = Prompt("trip", "Plan a trip.", (
    PromptArgument("city", values=CITIES), PromptArgument("order", collection="orders"),
    PromptArgument("note")), (PromptMessage("user", "text", text="{city}"),))
RESOURCES = ResourceCatalogue("shop", [Collection("orders", "Orders.")], SIGNER)


def completer(prompts: list[Prompt] | None = None) -> Completer:
    return Completer(PromptCatalogue([HELP] if prompts is None else prompts, SIGNER), RESOURCES)


def ask(ref: dict, name: str, value: str) -> object:
    return completer().complete({"ref": ref, "argument": {"name": name, "value": value}})


PROMPT = {"type": "ref/prompt", "name": "trip"}


def test_listed_values_are_prefix_matched_in_order():
    assert ask(PROMPT, "city", "par") == {"completion": {
        "values": ["paris", "park"], "total": 2, "hasMore": False}}


def test_at_most_a_hundred_values_come_back_with_has_more_set():
    completion = ask(PROMPT, "city", "city")["completion"]
    assert completion["values"] == list(CITIES[:MAX_VALUES])
    assert (completion["total"], completion["hasMore"]) == (150, True)


def test_an_argument_without_a_source_completes_to_nothing():
    assert ask(PROMPT, "note", "x")["completion"]["values"] == []


def test_an_argument_naming_a_collection_asks_the_application_for_its_ids():
    assert ask(PROMPT, "order", "o01") == RecordIds("orders", "o01")
    template = {"type": "ref/resource", "uri": "staal://shop/orders/{id}"}
    assert ask(template, "id", "o2") == RecordIds("orders", "o2")


def test_a_runs_template_parameter_completes_to_nothing():
    template = {"type": "ref/resource", "uri": "staal://shop/runs/{run}"}
    assert ask(template, "run", "ab")["completion"]["values"] == []


@pytest.mark.parametrize(("ref", "name", "why"), [
    ({"type": "ref/prompt", "name": "nope"}, "city", "Invalid prompt name"),
    (PROMPT, "colour", "no argument 'colour'"),
    ({"type": "ref/resource", "uri": "staal://shop/customers/{id}"}, "id", "not a resource template"),
    ({"type": "ref/resource", "uri": "staal://shop/orders/{id}"}, "key", "no parameter 'key'"),
    ({"type": "ref/tool", "name": "x"}, "city", "neither ref/prompt nor ref/resource"),
    ("trip", "city", "needs ref"),
])
def test_what_is_not_served_is_invalid_params_saying_why(ref, name, why):
    refused = ask(ref, name, "")
    assert isinstance(refused, RpcError) and refused.code == INVALID_PARAMS and why in refused.message


def test_a_page_of_ids_keeps_those_with_the_prefix():
    ids = ["o00", "o010", "o011", "o02"]
    assert ids_completion(ids, "o01", more_records=True) == {
        "values": ["o010", "o011"], "total": 2, "hasMore": False}
    # The page was cut while still in the matching ids: more may follow.
    assert ids_completion(["o010", "o011"], "o01", more_records=True) == {
        "values": ["o010", "o011"], "hasMore": True}
    many = [f"o{i:04d}" for i in range(150)]
    assert ids_completion(many, "o", more_records=False)["hasMore"] is True


@pytest.mark.parametrize("prefix", ["o01", "o1", "x", "o\x00", "\x00", "é"])
def test_a_list_run_starts_just_before_every_id_at_or_past_the_prefix(prefix):
    after = list_after(prefix)
    assert after is None or after < prefix
    earlier = [prefix[:-1] + chr(max(ord(prefix[-1]) - 1, 0)) + tail
               for tail in ("", "z", "\U0010ffff" * 200)]
    assert all(i <= (after or "") for i in earlier if i < prefix and len(i) <= 256)
    assert all(i > (after or "") for i in [prefix, prefix + "0", prefix + "\U0010ffff" * 10])
    assert list_after("") is None


def test_values_completion_of_an_empty_prefix_is_every_value():
    assert values_completion(("a", "b"), "") == {"values": ["a", "b"], "total": 2, "hasMore": False}


def test_a_completion_from_a_collection_is_read_by_the_application_and_answered_as_a_completion():
    served = Dispatcher(ServerInfo("shop", "1"), [], resources=RESOURCES,
                        prompts=PromptCatalogue([HELP], SIGNER))
    read = served.in_revision(MODERN, 4, "completion/complete",
                              {"ref": PROMPT, "argument": {"name": "order", "value": "o"}})
    assert isinstance(read, ReadResource) and read.ref == RecordIds("orders", "o")
    answered = served.read_result(read, Contents({"values": ["o1"], "total": 1, "hasMore": False}))
    assert answered.result["completion"] == {"values": ["o1"], "total": 1, "hasMore": False}
    assert answered.result["resultType"] == "complete"


def test_a_collections_listed_ids_are_offered_without_a_read():
    listed = ResourceCatalogue("shop", [Collection("orders", "Orders.", ids=("o1", "o2", "x9"))],
                               SIGNER)
    served = Completer(PromptCatalogue([HELP], SIGNER), listed)
    template = {"type": "ref/resource", "uri": "staal://shop/orders/{id}"}
    for ref, name in ((template, "id"), (PROMPT, "order")):
        answered = served.complete({"ref": ref, "argument": {"name": name, "value": "o"}})
        assert answered == {"completion": {"values": ["o1", "o2"], "total": 2, "hasMore": False}}
