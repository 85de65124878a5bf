"""A load balancer's readiness check, sans I/O (issue 24 item 5): `GET
/ready` (or HEAD) answers 200 `ready` while the instance should be sent
calls, 503 `not ready` otherwise, and nothing more: no credential is
asked for (a balancer's check carries none), so the answer reveals no
reason, no version and no state beyond that one bit; why an instance is
not ready is in its own log. `Cache-Control: no-store`, so no cache
between the balancer and the instance answers for it.

The path is fixed at the root of the listening address, whatever
`server.http.path` and `server.http.public_url` say: the balancer checks
each instance directly, not through the public URL. Neither Host nor
Origin is checked here (the MCP endpoint checks both against DNS
rebinding): a page that reaches this path learns only what the balancer
does."""

from __future__ import annotations

from staal.manifest import READY_PATH
from staal.protocol.http import Head, HttpResponse

READY = b"ready\n"
NOT_READY = b"not ready\n"
_HEADERS = (("content-type", "text/plain; charset=utf-8"), ("cache-control", "no-store"))


def is_readiness_check(head: Head) -> bool:
    return head.path == READY_PATH


def readiness_answer(head: Head, ready: bool) -> HttpResponse:
    """The answer to a request for the readiness path (`is_readiness_check`)."""
    if head.method not in ("GET", "HEAD"):
        return HttpResponse(405, (("allow", "GET, HEAD"), ("content-length", "0"),
                                  ("cache-control", "no-store")))
    body = READY if ready else NOT_READY
    return HttpResponse(200 if ready else 503,
                        (*_HEADERS, ("content-length", str(len(body)))), body)
