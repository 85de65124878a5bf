"""The Streamable HTTP transport's rules, sans I/O (like h11): a request's
head, then its body, in; a status, headers and body out (issue 13;
2026-07-28 basic/transports/streamable-http, and 2025-11-25's transport).

Every request is one POST to the MCP endpoint holding one JSON-RPC message.
`Endpoint.head` judges the head before the body is read (path, method, Host
and Origin against DNS rebinding, content type, Accept, declared length);
`Endpoint.message` the body: the limits of the stdio stream, then the
revision (the `_meta` envelope for 2026-07-28, whose mirrored headers must
agree with the body: `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`;
`MCP-Protocol-Version: 2025-11-25` for the handshake era), then the answer.
Nothing is remembered between requests: no session is ever minted, so any
instance can answer any request. A tool call comes back as a `Call` for the
application to run; `HttpCall` then writes its answer as JSON, or as an
event stream when the request asked for progress.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, replace

from staal.protocol.http.call import HttpCall
from staal.protocol.http.messages import (
    EVENT_STREAM,
    JSON,
    Head,
    HttpResponse,
    json_response,
)
from staal.protocol.mcp.dispatch import Answer, CallTool, Dispatcher, Result
from staal.protocol.mcp.framing import MAX_LINE, Line
from staal.protocol.mcp.jsonrpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    ClientAnswer,
    Notification,
    Refusal,
    RequestId,
    RpcError,
    is_request_id,
    read_message,
    result_message,
)
from staal.protocol.mcp.resources import ReadAnswer, ReadResource
from staal.protocol.mcp.revisions import (
    LEGACY,
    MODERN,
    PROTOCOL_VERSION_KEY,
    TRACEPARENT_KEY,
    TRACESTATE_KEY,
    meta_of,
    select_revision,
    unsupported_version,
)
from staal.protocol.mcp.tasks import TaskAnswer, TaskRequest
from staal.protocol.subscriptions.listen import Listen
from staal.records.record import Json
from staal.runtime.tracecontext import parse_traceparent, tracestate_of

HEADER_MISMATCH = -32020
MAX_BODY = MAX_LINE
# The names of tools/call, resources/read and prompts/get are mirrored in Mcp-Name.
# The body field `Mcp-Name` mirrors, by method (a task's methods: its id).
NAMED = {"tools/call": "name", "resources/read": "uri", "prompts/get": "name",
         "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId"}
_B64_START, _B64_END = "=?base64?", "?="


__all__ = ["HEADER_MISMATCH", "MAX_BODY", "Call", "Cancel", "Endpoint", "HttpSettings", "Read",
           "Reply"]


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """What the endpoint accepts. `origins` and `hosts` hold lower-case
    values (`http://127.0.0.1:8080`, `127.0.0.1:8080`); a request without an
    Origin is not a browser's and passes that check."""

    path: str = "/mcp"
    origins: frozenset[str] = frozenset()
    hosts: frozenset[str] = frozenset()
    max_body: int = MAX_BODY


@dataclass(frozen=True, slots=True)
class Call:
    """A tool call to run; `http` writes its answer."""

    http: HttpCall


def _traced(reply: Reply, head: Head) -> Reply:
    """A call whose body carries no trace context continues the one in the
    request's `traceparent` header, if valid (the body's `_meta` wins: it
    is the call's own; the header may be a proxy's)."""
    if not isinstance(reply, Call) or reply.http.call.trace is not None:
        return reply
    parent = parse_traceparent(head.one(TRACEPARENT_KEY))
    if parent is None:
        return reply
    call = replace(reply.http.call, trace=parent, tracestate=tracestate_of(head.one(TRACESTATE_KEY)))
    return Call(replace(reply.http, call=call))


@dataclass(frozen=True, slots=True)
class Cancel:
    """A 2025-11-25 client cancelled its call `request_id` (answered 202)."""

    request_id: RequestId
    response: HttpResponse


@dataclass(frozen=True, slots=True)
class Read:
    """A resources/read to answer; `Endpoint.read_response` writes its answer."""

    read: ReadResource


@dataclass(frozen=True, slots=True)
class AskTask:
    """A tasks/* request to answer; `Endpoint.task_response` writes its answer."""

    request: TaskRequest


# A Listen: a subscriptions/listen stream to serve (answered as an event stream).
Reply = HttpResponse | Call | Cancel | Read | AskTask | Listen


def _refused(status: int, code: int, text: str, request_id: RequestId | None = None,
             headers: tuple[tuple[str, str], ...] = (), data: Json = None) -> HttpResponse:
    return json_response(status, RpcError(code, text, data).to_message(request_id), headers)


ACCEPTED = HttpResponse(202, (("content-length", "0"),))


# -- the endpoint --------------------------------------------------------------------


class Endpoint:
    def __init__(self, dispatcher: Dispatcher, settings: HttpSettings) -> None:
        self.dispatcher = dispatcher
        self.settings = settings

    def head(self, head: Head) -> HttpResponse | None:
        """A refusal decided by the head alone, or None: read the body."""
        if head.path != self.settings.path:
            return _refused(404, INVALID_REQUEST, f"no MCP endpoint at {head.path[:200]}; "
                            f"it is {self.settings.path}")
        if head.method != "POST":
            return _refused(405, INVALID_REQUEST, f"{head.method[:20]} is not served here: every "
                            "message is a POST (no stream is opened by GET, no session ended by "
                            "DELETE)", headers=(("allow", "POST"),))
        host = (head.one("host") or "").strip().lower()
        if self.settings.hosts and host not in self.settings.hosts:
            return _refused(421, INVALID_REQUEST, "this server does not answer for that Host")
        origin = head.one("origin")
        if origin is not None and origin.strip().lower() not in self.settings.origins:
            return _refused(403, INVALID_REQUEST, "the request's Origin is not allowed")
        kind = (head.one("content-type") or "").split(";", 1)[0].strip().lower()
        if kind != JSON:
            return _refused(415, INVALID_REQUEST, f"a message is sent as {JSON}")
        if not _accepts_both(head.one("accept") or ""):
            return _refused(406, INVALID_REQUEST,
                            f"Accept must list {JSON} and {EVENT_STREAM}")
        length = (head.one("content-length") or "").strip()
        # isdigit alone admits '²' and other Unicode digits int() refuses.
        if length.isascii() and length.isdigit() and int(length) > self.settings.max_body:
            return self.too_large()
        return None

    def too_large(self) -> HttpResponse:
        return _refused(413, INVALID_REQUEST,
                        f"the message is larger than {self.settings.max_body} bytes; it was not read")

    def message(self, head: Head, body: bytes) -> Reply:
        """The answer to the message in `body`, its head having passed."""
        if len(body) > self.settings.max_body:
            return self.too_large()
        message = read_message(Line(body))
        if isinstance(message, Refusal):
            return json_response(400, message.to_message())
        if isinstance(message, ClientAnswer):
            return ACCEPTED  # this server sends no requests: nothing to match it to
        if isinstance(message, Notification):
            return self._notification(message)
        return _traced(self._request(head, message.id, message.method, message.params), head)

    def _notification(self, notification: Notification) -> Reply:
        if notification.method == "notifications/cancelled":
            request_id = notification.params.get("requestId")
            if is_request_id(request_id):
                return Cancel(request_id, ACCEPTED)
        return ACCEPTED

    def _request(self, head: Head, request_id: RequestId, method: str,
                 params: dict[str, Json]) -> Reply:
        meta = meta_of(params)
        if isinstance(meta, RpcError):
            return _refused(400, meta.code, meta.message, request_id)
        header = (head.one("mcp-protocol-version") or "").strip()
        if PROTOCOL_VERSION_KEY in meta or header == MODERN:
            return self._modern(head, request_id, method, params, meta, header)
        return self._legacy(request_id, method, params, header)

    # -- 2025-11-25: the handshake era -------------------------------------------

    def _legacy(self, request_id: RequestId, method: str, params: dict[str, Json],
                header: str) -> Reply:
        if method == "initialize":
            return self._answer(LEGACY, request_id, self.dispatcher.initialize(params))
        if not header:
            return _refused(400, INVALID_REQUEST, "a request after initialize carries the "
                            "MCP-Protocol-Version header (2025-11-25)", request_id)
        if header != LEGACY:
            error = unsupported_version(header)
            return _refused(400, error.code, error.message, request_id, data=error.data)
        answer = self.dispatcher.request(request_id, method, params, initialized=True)
        return self._answer(LEGACY, request_id, answer)

    # -- 2026-07-28: stateless, headers mirrored -----------------------------------

    def _modern(self, head: Head, request_id: RequestId, method: str, params: dict[str, Json],
                meta: dict[str, Json], header: str) -> Reply:
        """In order: the envelope the body must carry (-32602, or -32022 for
        a version not served), the headers that mirror it (-32020), then the
        answer; nothing runs before every check has passed."""
        if PROTOCOL_VERSION_KEY not in meta:
            return _refused(400, INVALID_PARAMS, "a 2026-07-28 request carries "
                            f"_meta {PROTOCOL_VERSION_KEY}", request_id)
        requested = meta[PROTOCOL_VERSION_KEY]
        if header and header != requested:
            return self._mismatched(request_id, f"MCP-Protocol-Version header value "
                                    f"{header[:40]!r} does not match the body's _meta "
                                    f"{PROTOCOL_VERSION_KEY} {str(requested)[:40]!r}")
        revision = select_revision(params, initialized=False)
        if isinstance(revision, RpcError):
            return _refused(400, revision.code, revision.message, request_id, data=revision.data)
        mismatch = _mismatch(head, method, params, header)
        if mismatch is not None:
            return self._mismatched(request_id, mismatch)
        return self._answer(MODERN, request_id,
                            self.dispatcher.in_revision(MODERN, request_id, method, params))

    @staticmethod
    def _mismatched(request_id: RequestId, why: str) -> HttpResponse:
        return _refused(400, HEADER_MISMATCH, f"Header mismatch: {why}", request_id)

    def read_response(self, read: ReadResource, answer: ReadAnswer) -> HttpResponse:
        """The answer to a resources/read, as JSON (a read reports no progress)."""
        return self._answer(read.revision, read.request_id,
                            self.dispatcher.read_result(read, answer))  # type: ignore[return-value]

    def task_response(self, request: TaskRequest, answer: TaskAnswer) -> HttpResponse:
        """The answer to a tasks/* request, as JSON."""
        return self._answer(request.revision, request.request_id,  # type: ignore[return-value]
                            self.dispatcher.task_result(request, answer))

    def listen_refused(self, listen: Listen, error: RpcError) -> HttpResponse:
        """A listen request refused by the application (too many open)."""
        return self._answer(MODERN, listen.request_id, error)  # type: ignore[return-value]

    def _answer(self, revision: str, request_id: RequestId, answer: Answer) -> Reply:
        if isinstance(answer, CallTool):
            return Call(HttpCall(self.dispatcher, answer))
        if isinstance(answer, ReadResource):
            return Read(answer)
        if isinstance(answer, TaskRequest):
            return AskTask(answer)
        if isinstance(answer, Listen):
            return answer
        if isinstance(answer, Result):
            return json_response(200, result_message(request_id, answer.result))
        return json_response(_status_of(revision, answer), answer.to_message(request_id))


def _status_of(revision: str, error: RpcError) -> int:
    """2026-07-28: an unknown method is 404, any other error of a request
    400. 2025-11-25 sends a JSON-RPC error as the answer it is (200)."""
    if revision == LEGACY:
        return 200
    return 404 if error.code == METHOD_NOT_FOUND else 400


def _accepts_both(accept: str) -> bool:
    kinds = {part.split(";", 1)[0].strip().lower() for part in accept.split(",")}
    if "*/*" in kinds:
        return True
    return ((JSON in kinds or "application/*" in kinds)
            and (EVENT_STREAM in kinds or "text/*" in kinds))


def _mismatch(head: Head, method: str, params: dict[str, Json], header: str) -> str | None:
    """Why the mirrored headers do not agree with the body, if they do not."""
    if not header:
        return "the MCP-Protocol-Version header is required"
    said = head.one("mcp-method")
    if said is None:
        return "the Mcp-Method header is required"
    if said.strip() != method:
        return f"Mcp-Method header value {said.strip()[:80]!r} does not match body value {method[:80]!r}"
    if method in NAMED:
        key = NAMED[method]
        name = head.one("mcp-name")
        if name is None:
            return f"the Mcp-Name header is required on {method}"
        decoded = decode_header_value(name.strip())
        if decoded is None or decoded != params.get(key):
            shown = name.strip()[:80]
            return f"Mcp-Name header value {shown!r} does not match body value {str(params.get(key))[:80]!r}"
    return None


def decode_header_value(value: str) -> str | None:
    """A mirrored header's value: as is, or decoded from `=?base64?...?=`
    (UTF-8); None when an encoded value does not decode."""
    if not (value.startswith(_B64_START) and value.endswith(_B64_END)):
        return value
    try:
        return base64.b64decode(value[len(_B64_START):-len(_B64_END)], validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
