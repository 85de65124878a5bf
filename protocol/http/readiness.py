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

from staal.manifest.model import READY_PATH
from staal.protocol.http.messages import Head, HttpResponse, closing_response

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


# -- while nothing else answers: before serving, and while draining ----------------

MAX_STARTING_HEAD = 8 * 1024
_BUSY = b"not serving yet or any more: try again\n"


def not_serving_answer(received: bytes) -> bytes | None:
    """The whole answer (bytes for the wire) to a request received while
    the instance is starting or draining, from what the connection sent so
    far; None while its head is incomplete. The readiness path is answered
    as `readiness_answer` does when not ready; anything else is 503 with
    Retry-After (RFC 9110 section 15.6.4), the connection then closed. A head
    that cannot be read (or grows past MAX_STARTING_HEAD) is answered 503
    all the same: there is nothing else to say."""
    end = received.find(b"\r\n\r\n")
    if end < 0 and len(received) <= MAX_STARTING_HEAD:
        return None
    method, path = _request_line(received[:end if end >= 0 else MAX_STARTING_HEAD])
    head = Head.of(method, path, ())
    if is_readiness_check(head):
        answer = readiness_answer(head, ready=False)
        # Not ready for a while yet (starting, draining): a balancer may wait.
        retry = (("retry-after", "1"),) if answer.status == 503 else ()
        response = HttpResponse(answer.status, (*answer.headers, *retry), answer.body)
    else:
        response = HttpResponse(503, (("content-type", "text/plain; charset=utf-8"),
                                      ("retry-after", "1"), ("cache-control", "no-store"),
                                      ("content-length", str(len(_BUSY)))), _BUSY)
    return closing_response(response, with_body=method != "HEAD")


def _request_line(head: bytes) -> tuple[str, str]:
    parts = head.split(b"\r\n", 1)[0].split(b" ")
    if len(parts) != 3:
        return "", ""
    return parts[0].decode("ascii", "replace"), parts[1].decode("ascii", "replace")
