"""What goes in and out of the Streamable HTTP endpoint, sans I/O: a
request's head, an answer, an answer written below the HTTP server, and
the events of an event stream."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

JSON = "application/json"
EVENT_STREAM = "text/event-stream"


# -- what goes in and out ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Head:
    """A request's head: its method, path (without the query) and headers,
    names in lower case, each with every value it was given."""

    method: str
    path: str
    headers: Mapping[str, tuple[str, ...]]

    @classmethod
    def of(cls, method: str, path: str, pairs: Iterable[tuple[str, str]]) -> Head:
        headers: dict[str, tuple[str, ...]] = {}
        for name, value in pairs:
            headers[name.lower()] = (*headers.get(name.lower(), ()), value)
        return cls(method.upper(), path.split("?", 1)[0], headers)

    def one(self, name: str) -> str | None:
        """The header's value; None when absent. Several values of one
        header are joined as HTTP folds them (RFC 9110 section 5.3)."""
        values = self.headers.get(name)
        return None if values is None else ", ".join(values)


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""


_REASONS = {405: "Method Not Allowed", 408: "Request Timeout",
            431: "Request Header Fields Too Large", 503: "Service Unavailable"}


def closing_response(response: HttpResponse, with_body: bool = True) -> bytes:
    """`response` as bytes for the wire, saying the connection closes after
    it: for answers written below the HTTP server (a connection refused by
    its head or its wait, the socket answered while nothing serves)."""
    lines = [f"HTTP/1.1 {response.status} {_REASONS.get(response.status, '')}",
             *(f"{name}: {value}" for name, value in response.headers), "connection: close", "", ""]
    return "\r\n".join(lines).encode("ascii") + (response.body if with_body else b"")


def json_response(status: int, message: dict[str, Any] | None,
                   headers: tuple[tuple[str, str], ...] = ()) -> HttpResponse:
    body = b"" if message is None else orjson.dumps(message)
    kind = (("content-type", JSON),) if message is not None else ()
    return HttpResponse(status, (*kind, ("content-length", str(len(body))), *headers), body)


STREAM_HEADERS = (("content-type", EVENT_STREAM), ("cache-control", "no-cache"),
                  ("x-accel-buffering", "no"))
KEEPALIVE = b": keep-alive\n\n"


def event(message: dict[str, Any]) -> bytes:
    """One JSON-RPC message as a server-sent event."""
    return b"event: message\ndata: " + orjson.dumps(message) + b"\n\n"
