"""One content part of each kind (staal.records.content), as the journal
keeps them, for the tests of the records and of the answers made of them."""

from __future__ import annotations

from staal.records.content import ContentPart

PARTS = (
    ContentPart("text", text="the chart:"),
    ContentPart("image", data="iVBORw0KGgo=", mime_type="image/png"),
    ContentPart("audio", data="UklGRg==", mime_type="audio/wav"),
    ContentPart("resource", text='{"a":1}', mime_type="application/json", uri="test://r"),
    ContentPart("resource", data="JVBERg==", uri="file:///a.pdf"),
)
