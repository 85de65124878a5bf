"""Resources through the official Python SDK (`mcp` 2.3) against the real
server process, over stdio and over Streamable HTTP, in each of its modes:
the templates listed, a run read as a resource (its status and journal),
120 operator records paged 50 at a time through signed cursors, a limit of
1,000 clamped, forged and altered cursors, unknown runs and records refused
as invalid params, and each read of a record a journaled run in a worker."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from staal.protocol.mcp.resources import ENDED_TTL_MS
from staal.supervisor.store.ledger import read_ledger
from tests.helpers.http_servers import explored_over_http
from tests.helpers.resource_sites import (
    BASE,
    ORDERS,
    RECORDS,
    order_id,
    orders_collection,
    resource_site,
)
from tests.helpers.servers import START_WAIT, Site, sdk_session, server_env, supervisor_command

MODES = ["auto", "legacy", "2026-07-28"]
INVALID_PARAMS = -32602
PAGE_CAP = 100  # the collection's max_page_size: a limit of 1,000 is clamped to it
UNKNOWN_RUN = "0" * 32


def data_of(result: Any) -> Any:
    (item,) = result.contents
    assert item.mime_type == "application/json"
    return json.loads(item.text)


async def refusal(read, uri: str) -> tuple[int, str, Any]:
    with pytest.raises(MCPError) as refused:
        await read(uri)
    return refused.value.error.code, refused.value.error.message, refused.value.error.data


async def explore(client: Any) -> dict[str, Any]:
    """Everything one client does with the resources, for the assertions."""
    seen: dict[str, Any] = {}
    seen["templates"] = [t.uri_template for t in (await client.list_resource_templates())
                         .resource_templates]
    seen["listed"] = [r.uri for r in (await client.list_resources()).resources]
    seen["tools"] = [t.name for t in (await client.list_tools()).tools]
    await client.call_tool("note", {"order": "o1", "text": "a"})
    runs = data_of(await client.read_resource(f"{BASE}/runs"))
    seen["runs"] = runs
    note = runs["items"][0]["run"]
    seen["run"] = await client.read_resource(f"{BASE}/runs/{note}")
    seen["journal"] = data_of(await client.read_resource(f"{BASE}/runs/{note}/journal"))
    pages, uri = [], f"{BASE}/orders?limit=50"
    while True:
        page = data_of(await client.read_resource(uri))
        pages.append(page)
        if "nextCursor" not in page:
            break
        uri = f"{BASE}/orders?limit=50&cursor={page['nextCursor']}"
    seen["pages"] = pages
    seen["clamped"] = data_of(await client.read_resource(f"{BASE}/orders?limit=1000"))
    seen["one"] = data_of(await client.read_resource(f"{BASE}/orders/{order_id(7)}"))
    cursor = pages[0]["nextCursor"]
    altered = cursor[:-1] + ("A" if cursor[-1] != "A" else "B")
    read = client.read_resource
    seen["refusals"] = {
        "forged": await refusal(read, f"{BASE}/orders?cursor=bzAwNTA"),
        "altered": await refusal(read, f"{BASE}/orders?cursor={altered}"),
        "unknown run": await refusal(read, f"{BASE}/runs/{UNKNOWN_RUN}"),
        "unknown record": await refusal(read, f"{BASE}/orders/no-such-order"),
        "unknown collection": await refusal(read, f"{BASE}/customers"),
        "other server": await refusal(read, "staal://another/runs"),
    }
    listed = data_of(await client.read_resource(f"{BASE}/runs?limit=200"))["items"]
    # The oldest get: the read of order 7 (newest first).
    got = [item["run"] for item in listed if item["tool"] == "@orders.get"][-1]
    (journal,) = (await client.read_resource(f"{BASE}/runs/{got}/journal")).contents
    seen["get journal"] = journal.text
    with pytest.raises(MCPError) as hidden:
        await client.call_tool("@orders.get", {"id": order_id(1)})
    seen["hidden call"] = hidden.value.error.code
    return seen


def check_seen(seen: dict[str, Any], mode: str, site: Site) -> None:
    assert seen["templates"] == [
        f"{BASE}/runs{{?limit,cursor}}", f"{BASE}/runs/{{run}}",
        f"{BASE}/runs/{{run}}/journal{{?cursor}}", f"{BASE}/orders{{?limit,cursor}}",
        f"{BASE}/orders/{{id}}"]
    assert seen["listed"] == [f"{BASE}/runs", f"{BASE}/orders"]
    assert seen["tools"] == ["note", "staal_run_status"]  # the collection's tools stay hidden
    assert seen["hidden call"] == INVALID_PARAMS
    newest = seen["runs"]["items"][0]
    assert newest["tool"] == "note" and newest["state"] == "done" and newest["ended"]
    run = seen["run"]
    assert data_of(run) == {"run": newest["run"], "status": "done",
                            "result": {"noted": "o1", "text": "a"}}
    if mode != "legacy":  # an ended run never changes, and it is the caller's own
        assert run.ttl_ms == ENDED_TTL_MS and run.cache_scope == "private"
    journal = seen["journal"]
    assert journal["run"]["run"] == newest["run"] and journal["run"]["tool"] == "note"
    assert journal["items"][-1]["type"] == "end" and journal["items"][-1]["outcome"] == "done"
    assert "program" not in journal["run"] and "config" not in journal["run"]  # no server paths
    pages = seen["pages"]
    assert [len(p["items"]) for p in pages] == [50, 50, 20]
    ids = [item["id"] for page in pages for item in page["items"]]
    assert ids == [order_id(i) for i in range(RECORDS)]  # each record once, in id order
    assert len(seen["clamped"]["items"]) == PAGE_CAP and "nextCursor" in seen["clamped"]
    assert seen["one"] == {"id": order_id(7), "total": 107}
    for what, (code, _message, data) in seen["refusals"].items():
        assert code == INVALID_PARAMS, what
        assert data["uri"].startswith("staal://"), what
    assert "cursor" in seen["refusals"]["forged"][1]
    assert "no-such-order" in seen["refusals"]["unknown record"][1]
    # A record read's journal shows what it did, and never the values.
    got = json.loads(seen["get journal"])
    intent, outcome = got["items"][0], got["items"][1]
    assert (intent["type"], intent["cap"], intent["action"]) == ("intent", "db.sqlite.read", "query")
    assert len(intent["args_sha256"]) == 64 and len(outcome["result_sha256"]) == 64
    # Its ops show neither the id asked for nor the row found; only its end
    # holds the run's own result, the record the read was answered with.
    ops = json.dumps(got["items"][:-1])
    assert "o0007" not in ops and "total" not in ops
    assert got["items"][-1]["result"] == {"id": order_id(7), "total": 107}
    # Every record read was a run of the collection's hidden tools, journaled.
    tools = [entry.tool for entry in read_ledger(site.ledger_path).runs()]
    assert tools.count("@orders.list") == len(pages) + 1  # and the clamped page
    assert tools.count("@orders.get") == 2  # the record, and the id that is not one
    for entry in read_ledger(site.ledger_path).runs():
        assert site.journal(entry.tool, entry.run).exists()


def orders_site(tmp_path) -> Site:
    return resource_site(Site(tmp_path), [orders_collection(max_page_size=PAGE_CAP)])


@pytest.mark.parametrize("mode", MODES)
def test_over_stdio_the_sdk_lists_reads_runs_and_pages_records_through_signed_cursors(
        tmp_path, mode):
    site = orders_site(tmp_path)

    async def session():
        async with sdk_session(site, mode) as served:
            return await explore(served.client)

    check_seen(anyio.run(session), mode, site)


@pytest.mark.parametrize("mode", MODES)
def test_over_http_the_sdk_lists_reads_runs_and_pages_records_through_signed_cursors(
        tmp_path, mode):
    site = orders_site(tmp_path)
    seen = explored_over_http(site, mode, explore)
    check_seen(seen, mode, site)


def run_supervisor(site: Site, command: str = "serve") -> subprocess.CompletedProcess:
    """`staal-supervisor COMMAND MANIFEST` to its end (one that refuses to start)."""
    serve = supervisor_command(site.manifest)
    args = [*serve[:-2], command, serve[-1]]
    return subprocess.run(args, cwd=site.root, env=server_env(), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=START_WAIT, check=False)


def logged(done: subprocess.CompletedProcess, event: str) -> dict[str, Any]:
    (line,) = [json.loads(line) for line in done.stderr.splitlines() if f'"{event}"' in line]
    return line


def test_serve_refuses_to_start_when_a_collections_program_holds_a_write_grant(tmp_path):
    site = resource_site(Site(tmp_path), [orders_collection(
        grants={"db": {"cap": "db.sqlite.write", "path": "shop.db"}})])
    done = run_supervisor(site)
    assert done.returncode == 2 and done.stdout == ""
    (problem,) = logged(done, "manifest_refused")["problems"]
    assert problem.startswith("resources[0].grants.db:") and "read capabilities only" in problem


def test_serve_and_check_refuse_a_collection_whose_entry_takes_other_inputs(tmp_path):
    site = resource_site(Site(tmp_path))
    site.program("orders.py", ORDERS.replace("def get_order(id: str", "def get_order(key: str"))
    why = "resources 'orders': its get entry 'get_order' takes key; it must take id"
    served = run_supervisor(site)
    assert served.returncode == 2 and why in logged(served, "startup_failed")["message"]
    checked = run_supervisor(site, "check")
    assert checked.returncode == 2 and why in checked.stderr
