"""The official Python SDK over Streamable HTTP (`Client("http://.../mcp",
mode=...)`) against `serve --http`, in auto, legacy and 2026-07-28 modes:
list, call, a refusal, a `once` repeat, progress."""

from __future__ import annotations

import anyio
import pytest
from mcp import Client

from staal.supervisor.store.ledger import read_ledger
from tests.helpers.http_servers import HttpServer
from tests.helpers.servers import Site

NOTE = """
def main(order: str, text: str) -> dict:
    return {"noted": order, "text": text}
"""
REFUSE = """
from staal import fail
def main(order: str) -> dict:
    fail("validation", "refund exceeds what was paid")
"""
MODES = ["auto", "legacy", "2026-07-28"]


@pytest.fixture
def http(tmp_path):
    site = Site(tmp_path)
    site.program("note.py", NOTE)
    site.program("refuse.py", REFUSE)
    site.write([{"name": "note", "program": "note.py", "once": {"by": ["order"]}},
                {"name": "refuse", "program": "refuse.py"}])
    with HttpServer(site) as server:
        yield server


@pytest.mark.parametrize("mode", MODES)
def test_the_python_sdk_lists_calls_repeats_once_reads_refusals_and_progress(http, mode):
    progress: list = []

    async def session():
        async with Client(http.url, mode=mode) as client:
            listed = await client.list_tools()

            async def on_progress(value, total, message):
                progress.append(message)

            first = await client.call_tool("note", {"order": "o1", "text": "a"},
                                           progress_callback=on_progress)
            again = await client.call_tool("note", {"order": "o1", "text": "a"})
            other = await client.call_tool("note", {"order": "o1", "text": "b"})
            refused = await client.call_tool("refuse", {"order": "o2"})
            bad = await client.call_tool("note", {"order": 5, "text": "a"})
            return listed, first, again, other, refused, bad

    listed, first, again, other, refused, bad = anyio.run(session)
    assert [t.name for t in listed.tools] == ["note", "refuse", "staal_run_status"]
    assert first.structured_content == {"result": {"noted": "o1", "text": "a"}}
    assert again.structured_content == first.structured_content  # once: the same run's answer
    assert other.is_error is True and "different arguments" in other.content[0].text
    assert refused.is_error is True
    assert refused.content[0].text == "validation: refund exceeds what was paid"
    assert bad.is_error is True and "order" in bad.content[0].text
    runs = read_ledger(http.site.ledger_path).runs()
    assert sorted(r.tool for r in runs) == ["note", "refuse"]  # the repeat started no run
    (note_run,) = [r.run for r in runs if r.tool == "note"]
    assert progress == [f"run {note_run} started"]
