"""Results of content parts through the official Python SDK (`mcp` 2.3)
against the real server process, over stdio and over Streamable HTTP, in
each of its modes: an image and a text arrive as ImageContent then
TextContent, an embedded resource and audio as theirs; a repeated `once`
call and staal_run_status give the same items again, read from the
journal; and an image of a MIME type that is not an image fails its run,
answered as an error with no image."""

from __future__ import annotations

import base64
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import AudioContent, EmbeddedResource, ImageContent, TextContent

from staal.journal.reader import read_journal
from staal.supervisor.store.ledger import read_ledger
from tests.helpers.http_servers import HttpServer
from tests.helpers.servers import NET, SERVER_NAME, Site, sdk_session

MODES = ["auto", "legacy", "2026-07-28"]
PNG = bytes([137, 80, 78, 71, 13, 10, 26, 10, 0, 0, 0, 13, 73, 72, 68, 82])

CHART = f"""
from staal import Image

def main(month: str) -> list:
    return [Image({PNG!r}, "image/png"), "sales for " + month]
"""
BAD_CHART = f"""
from staal import Image

def main() -> list:
    return ["a chart", Image({PNG!r}, "text/html")]
"""
REPORT = """
from staal import Audio, EmbeddedResource

def main() -> list:
    return [EmbeddedResource("file:///reports/may.csv", text="month,sales\\nmay,3", mime_type="text/csv"),
            Audio(b"RIFF....WAVE", "audio/wav")]
"""


def rich_site(tmp_path) -> Site:
    site = Site(tmp_path)
    site.program("chart.py", CHART)
    site.program("bad_chart.py", BAD_CHART)
    site.program("report.py", REPORT)
    site.write([{"name": "chart", "program": "chart.py", "once": {"by": ["month"]}},
                {"name": "bad_chart", "program": "bad_chart.py"},
                {"name": "report", "program": "report.py"}])
    return site


async def explore(client: Any, site: Site) -> dict[str, Any]:
    """Everything one client does with content results, for the assertions."""
    seen: dict[str, Any] = {"chart": await client.call_tool("chart", {"month": "may"})}
    seen["repeat"] = await client.call_tool("chart", {"month": "may"})
    (run,) = [e.run for e in read_ledger(site.ledger_path).runs() if e.tool == "chart"]
    seen["status"] = await client.call_tool("staal_run_status", {"run": run})
    seen["report"] = await client.call_tool("report", {})
    seen["bad"] = await client.call_tool("bad_chart", {})
    return seen


def check_seen(seen: dict[str, Any], site: Site) -> None:
    chart = seen["chart"]
    assert chart.is_error is False and chart.structured_content is None
    image, text = chart.content
    assert isinstance(image, ImageContent) and isinstance(text, TextContent)
    assert base64.b64decode(image.data) == PNG and image.mime_type == "image/png"
    assert text.text == "sales for may"
    assert seen["repeat"].model_dump() == chart.model_dump()
    status = seen["status"]
    assert status.structured_content["status"] == "done"
    assert [c.model_dump() for c in status.content[1:]] == [c.model_dump() for c in chart.content]

    resource, audio = seen["report"].content
    assert isinstance(resource, EmbeddedResource) and isinstance(audio, AudioContent)
    assert resource.resource.uri == "file:///reports/may.csv"
    assert resource.resource.text == "month,sales\nmay,3"
    assert base64.b64decode(audio.data) == b"RIFF....WAVE" and audio.mime_type == "audio/wav"

    bad = seen["bad"]
    assert bad.is_error is True
    (only,) = bad.content
    assert isinstance(only, TextContent)
    assert only.text == ("value: the result's part 1 (Image): mime_type 'text/html' is not an "
                         "image type (image/...)")
    (entry,) = [e for e in read_ledger(site.ledger_path).runs() if e.tool == "bad_chart"]
    end = read_journal(site.journal("bad_chart", entry.run)).end
    assert end is not None and end.outcome == "failed" and end.content is None


@pytest.mark.parametrize("mode", MODES)
def test_over_stdio_the_sdk_gets_images_text_audio_and_resources_in_order(tmp_path, mode):
    site = rich_site(tmp_path)

    async def session():
        async with sdk_session(site, mode) as served:
            return await explore(served.client, site)

    check_seen(anyio.run(session), site)


@pytest.mark.parametrize("mode", MODES)
def test_over_http_the_sdk_gets_images_text_audio_and_resources_in_order(tmp_path, mode):
    site = rich_site(tmp_path)
    with HttpServer(site) as http:

        async def session():
            async with Client(http.url, mode=mode) as client:
                return await explore(client, site)

        seen = anyio.run(session)
    check_seen(seen, site)


CHARTS = f"""
from staal import Image

def get_chart(id: str):
    return Image({PNG!r}, "image/png")

def list_charts(after: str | None, limit: int) -> list[dict]:
    return []
"""


def test_a_collection_whose_entry_returns_content_parts_is_answered_an_internal_error(tmp_path):
    site = Site(tmp_path)
    site.program("charts.py", CHARTS)
    site.program("chart.py", CHART)
    site.write([{"name": "chart", "program": "chart.py"}],
               {"resources": [{"name": "charts", "description": "Charts.", "program": "charts.py",
                               "get": "get_chart", "list": "list_charts", "net": NET}]})

    async def session():
        async with sdk_session(site, "legacy") as served:
            with pytest.raises(MCPError) as refused:
                await served.client.read_resource(f"staal://{SERVER_NAME}/charts/c1")
            return refused.value.error

    error = anyio.run(session)
    assert error.code == -32603
    assert "returned content parts (images, audio, resources), not JSON" in error.message
