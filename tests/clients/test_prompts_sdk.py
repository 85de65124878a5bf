"""Prompts and completions (issue 29) through the official Python SDK (`mcp`
2.x) against the real server process, over stdio and over Streamable HTTP,
in each of its modes: the operator's prompts listed and filled in (text, an
embedded resource of the server's own, an image), a missing argument and an
unknown prompt refused as invalid params, completions from listed values
and from a collection's record ids (each a journaled run of its `list`
entry), and a caller profile that hides a prompt."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import PromptReference, ResourceTemplateReference

from staal.supervisor.store.ledger import read_ledger
from tests.helpers.http_servers import HttpServer, explored_over_http
from tests.helpers.resource_sites import BASE, order_id, orders_collection, resource_site
from tests.helpers.servers import Site, sdk_session
from tests.processes.test_callers_http import callers_site

MODES = ["auto", "legacy", "2026-07-28"]
INVALID_PARAMS = -32602
PAGE_CAP = 100
# A 1x1 PNG: its signature, then the chunks (the image message's file).
PIXEL = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ"
                         "/pLvAAAAAElFTkSuQmCC")

REFUND_HELP = {
    "name": "refund_help", "title": "Refund an order",
    "description": "How to refund one order, and why.",
    "arguments": [
        {"name": "order", "description": "The order's id.", "required": True,
         "complete": {"collection": "orders"}},
        {"name": "reason", "description": "Why.", "complete": {"values": ["damaged", "late", "lost"]}},
    ],
    "messages": [
        {"role": "user", "text": "Refund order {order} because it was {reason}."},
        {"role": "user", "resource": {"uri": f"{BASE}/orders/{{order}}",
                                      "text": "The order {order}, as the shop keeps it."}},
        {"role": "assistant", "image": "pixel.png"},
    ],
}


def prompts_site(tmp_path) -> Site:
    site = resource_site(Site(tmp_path), [orders_collection(max_page_size=PAGE_CAP)])
    (site.root / "pixel.png").write_bytes(PIXEL)
    data = json.loads(site.manifest.read_text())
    data["prompts"] = [REFUND_HELP]
    site.manifest.write_text(json.dumps(data, indent=2))
    return site


async def refusal(call) -> tuple[int, str, Any]:
    with pytest.raises(MCPError) as refused:
        await call
    return refused.value.error.code, refused.value.error.message, refused.value.error.data


async def explore(client: Any) -> dict[str, Any]:
    """Everything one client does with prompts and completions."""
    seen: dict[str, Any] = {"listed": (await client.list_prompts()).prompts}
    seen["got"] = await client.get_prompt("refund_help", {"order": "o 7/x", "reason": "late"})
    seen["missing"] = await refusal(client.get_prompt("refund_help", {"reason": "late"}))
    seen["unknown"] = await refusal(client.get_prompt("no_such_prompt", {}))
    prompt = PromptReference(type="ref/prompt", name="refund_help")
    seen["reasons"] = (await client.complete(prompt, {"name": "reason", "value": "l"})).completion
    seen["orders"] = (await client.complete(prompt, {"name": "order", "value": "o001"})).completion
    template = ResourceTemplateReference(type="ref/resource", uri=f"{BASE}/orders/{{id}}")
    seen["ids"] = (await client.complete(template, {"name": "id", "value": "o011"})).completion
    seen["no argument"] = await refusal(client.complete(prompt, {"name": "colour", "value": ""}))
    return seen


def check_seen(seen: dict[str, Any], site: Site) -> None:
    (listed,) = seen["listed"]
    assert (listed.name, listed.title, listed.description) == (
        "refund_help", "Refund an order", "How to refund one order, and why.")
    assert [(a.name, a.required) for a in listed.arguments] == [("order", True), ("reason", False)]
    text, resource, image = seen["got"].messages
    assert text.role == "user" and text.content.text == "Refund order o 7/x because it was late."
    # An argument in a URI is escaped: it stays one path segment of the server's own.
    assert str(resource.content.resource.uri) == f"{BASE}/orders/o%207%2Fx"
    assert resource.content.resource.text == "The order o 7/x, as the shop keeps it."
    assert image.role == "assistant" and image.content.mime_type == "image/png"
    assert base64.b64decode(image.content.data) == PIXEL
    code, message, data = seen["missing"]
    assert code == INVALID_PARAMS and "order" in message and data == {"argument": "order"}
    code, message, _ = seen["unknown"]
    assert code == INVALID_PARAMS and "no_such_prompt" in message
    assert seen["no argument"][0] == INVALID_PARAMS and "colour" in seen["no argument"][1]
    assert seen["reasons"].values == ["late", "lost"] and seen["reasons"].has_more is False
    assert seen["orders"].values == [order_id(i) for i in range(10, 20)]
    assert seen["orders"].has_more is False and seen["orders"].total == 10
    assert seen["ids"].values == [order_id(i) for i in range(110, 120)]
    # Getting a prompt ran nothing; each completion from the collection was
    # one run of its list entry, journaled as a record read is.
    runs = read_ledger(site.ledger_path).runs()
    assert [entry.tool for entry in runs] == ["@orders.list", "@orders.list"]
    for entry in runs:
        records = site.journal_records(entry.tool, entry.run)
        assert (records[-1]["type"], records[-1]["outcome"]) == ("end", "done")
        assert [(r["type"], r["cap"]) for r in records if r["type"] == "intent"] == [
            ("intent", "db.sqlite.read")]


@pytest.mark.parametrize("mode", MODES)
def test_over_stdio_the_sdk_lists_gets_and_completes_the_operators_prompts(tmp_path, mode):
    site = prompts_site(tmp_path)

    async def session():
        async with sdk_session(site, mode) as served:
            return await explore(served.client)

    check_seen(anyio.run(session), site)


@pytest.mark.parametrize("mode", MODES)
def test_over_http_the_sdk_lists_gets_and_completes_the_operators_prompts(tmp_path, mode):
    site = prompts_site(tmp_path)
    seen = explored_over_http(site, mode, explore)
    check_seen(seen, site)


# -- a caller profile hides a prompt ---------------------------------------------------


def profiled_site(tmp_path, service, issuer: str) -> Site:
    site = callers_site(tmp_path, service, issuer)
    data = json.loads(site.manifest.read_text())
    data["prompts"] = [
        {"name": "lookup_help", "description": "How to look an order up.",
         "messages": [{"role": "user", "text": "Look the order up."}]},
        {"name": "refund_help", "description": "How to refund.",
         "arguments": [{"name": "order", "complete": {"values": ["o1", "o2"]}}],
         "messages": [{"role": "user", "text": "Refund {order}."}]},
    ]
    data["callers"][0]["prompts"] = {"lookup_help": {}}  # support: not refund_help
    site.manifest.write_text(json.dumps(data, indent=2))
    return site


@pytest.fixture
def profiled(tmp_path, service, authorization) -> Iterator[HttpServer]:
    with HttpServer(profiled_site(tmp_path, service, authorization.issuer)) as server:
        yield server


def client_as(url: str, mode: str, token: str) -> Client:
    transport = streamable_http_client(
        url, http_client=create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}))
    return Client(transport, mode=mode)


async def as_support(url: str, mode: str, token: str) -> dict[str, Any]:
    async with client_as(url, mode, token) as client:
        reference = PromptReference(type="ref/prompt", name="refund_help")
        return {
            "listed": [p.name for p in (await client.list_prompts()).prompts],
            "hidden": await refusal(client.get_prompt("refund_help", {})),
            "unknown": await refusal(client.get_prompt("never_declared", {})),
            "complete": await refusal(client.complete(reference, {"name": "order", "value": ""})),
        }


async def as_ops(url: str, mode: str, token: str) -> dict[str, Any]:
    async with client_as(url, mode, token) as client:
        reference = PromptReference(type="ref/prompt", name="refund_help")
        return {
            "listed": [p.name for p in (await client.list_prompts()).prompts],
            "got": (await client.get_prompt("refund_help", {"order": "o2"})).messages[0].content.text,
            "complete": (await client.complete(reference, {"name": "order", "value": ""})).completion,
        }


@pytest.mark.parametrize("mode", MODES)
def test_a_caller_profile_hides_a_prompt_as_if_it_did_not_exist(profiled, authorization, mode):
    support = authorization.token("desk-1", "support", profiled.url)
    seen = anyio.run(as_support, profiled.url, mode, support)
    assert seen["listed"] == ["lookup_help"]
    code, message, data = seen["hidden"]
    assert (code, data) == (INVALID_PARAMS, {"name": "refund_help"})
    unknown = seen["unknown"]
    assert unknown[0] == code and unknown[1] == message.replace("refund_help", "never_declared")
    assert seen["complete"][:2] == seen["hidden"][:2]
    # ops has no `prompts` in its profile: it sees every prompt.
    ops = authorization.token("ops-bot", audience=profiled.url)
    everything = anyio.run(as_ops, profiled.url, mode, ops)
    assert everything["listed"] == ["lookup_help", "refund_help"]
    assert everything["got"] == "Refund o2." and everything["complete"].values == ["o1", "o2"]
    assert read_ledger(profiled.site.ledger_path).runs() == ()  # a prompt runs nothing
