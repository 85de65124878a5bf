"""A page's elements, as html.parser reads them: each with its attributes and
all the text inside it, in document order (enough to check a DOM that
Chromium dumped without a third-party parser)."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    parts: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.parts)


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self.open: list[Element] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.elements.append(element)
        if tag not in VOID:
            self.open.append(element)

    def handle_endtag(self, tag: str) -> None:
        for index in range(len(self.open) - 1, -1, -1):
            if self.open[index].tag == tag:
                del self.open[index:]
                return

    def handle_data(self, data: str) -> None:
        for element in self.open:
            element.parts.append(data)


def elements(page: str) -> list[Element]:
    parser = _Parser()
    parser.feed(page)
    parser.close()
    return parser.elements


def having(page: str | list[Element], attr: str, tag: str | None = None) -> list[Element]:
    """The elements with attribute `attr` (and tag `tag`), in document order."""
    found = elements(page) if isinstance(page, str) else page
    return [e for e in found if attr in e.attrs and (tag is None or e.tag == tag)]
