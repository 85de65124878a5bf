"""`net.http.get` and `net.http.post` over httpx.

Every request is bounded by the tool's `net.connect_timeout_ms` (to
connect) and `net.timeout_ms` (for the whole exchange). Redirects are not
followed (a redirect could lead outside `only`); the program sees the 3xx.
A request that never left (no connection) fails for certain. A POST whose
answer was lost may have happened: it is in doubt. With `idempotency_key`
it is sent again under its key until an answer settles it (the engine,
worker/runs/resend.py); a keyed attempt that never left after one that may have
happened says nothing of that one, so it is not a failure there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypedDict

import httpx
import orjson

from staal.caps import HttpGet, HttpPost, Response
from staal.manifest.model import NetConfig
from staal.records.record import Json
from staal.worker.capabilities import Bound, transport
from staal.worker.capabilities.transport import reason
from staal.worker.runs.actions import ActionSpec, Performed
from staal.worker.runs.resend import Attempted, InDoubt, NotSent

if TYPE_CHECKING:
    from staal.worker.runs.engine import RunContext

MAX_RESPONSE_BYTES = 8 * 1024 * 1024
IDEMPOTENCY_HEADER = "Idempotency-Key"


class HttpAnswer(TypedDict):
    """What a request an action sent was answered: its result, journaled."""

    status: int
    headers: dict[str, str]
    text: str


class HttpClient:
    """One run's requests, under its tool's `net`, through the process's
    shared client (transport.py: made in the zygote, so a run builds none)."""

    def __init__(self, net: NetConfig) -> None:
        self.net = net
        self.limits = transport.Limits(net.timeout_ms, net.connect_timeout_ms, MAX_RESPONSE_BYTES)

    def send(self, method: str, url: str, headers: Mapping[str, str], **body: Any) -> Performed:
        """One request; a request that never left fails for certain."""
        try:
            return self.attempt(method, url, headers, **body)
        except NotSent as exc:
            return Performed(failure=str(exc))

    def attempt(self, method: str, url: str, headers: Mapping[str, str], **body: Any) -> Performed:
        """One request; NotSent if it never left (a keyed request's attempt,
        which the engine may send again)."""
        try:
            return self._exchange(method, url, headers, body)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            # Raised before a byte of the request left; the service may be back later.
            raise NotSent(f"{method} {url} could not be sent: {reason(exc)}") from exc
        except (httpx.UnsupportedProtocol, httpx.InvalidURL, httpx.LocalProtocolError,
                UnicodeEncodeError) as exc:
            # The request itself cannot be sent, now or later.
            raise NotSent(f"{method} {url} could not be sent: {reason(exc)}",
                          Attempted.REFUSED) from exc
        except (httpx.TransportError, transport.TooSlow) as exc:
            if method == "GET":
                return Performed(failure=f"GET {url} got no complete answer: {reason(exc)}")
            raise InDoubt(f"{method} {url} was sent and its answer was lost: {reason(exc)}") from exc

    def _exchange(self, method: str, url: str, headers: Mapping[str, str],
                  body: dict[str, Any]) -> Performed:
        answer = transport.exchange(method, url, self.limits, headers, **body)
        if answer.data is None:
            return Performed(failure=f"{method} {url} answered {answer.status} with "
                             f"more than {MAX_RESPONSE_BYTES} bytes")
        result: HttpAnswer = {"status": answer.status, "headers": dict(answer.headers),
                              "text": answer.data.decode(answer.encoding, errors="replace")}
        return Performed(result=result)

    def close(self) -> None:
        """Nothing of the run's to close: its connections are the shared
        pool's, and a worker's die with it."""


def response_of(result: Json) -> Response:
    return Response(result["status"], result["headers"], result["text"])


def check_http_result(result: Json) -> None:
    """The shape an operator's --result must have for an HTTP action."""
    if not (isinstance(result, dict) and isinstance(result.get("status"), int)
            and isinstance(result.get("text", ""), str)
            and isinstance(result.get("headers", {}), dict)):
        raise ValueError('an HTTP result is {"status": 200, "headers": {...}, "text": "..."}')
    result.setdefault("headers", {})
    result.setdefault("text", "")


def _json_value(value: Any) -> Any:
    """A body that can be sent as JSON; TypeError to the program before
    anything is journaled or sent, so a mistake in it is never in doubt."""
    try:
        orjson.dumps(value)
    except TypeError as exc:
        raise TypeError(f"post(json=...) takes a JSON value (dict, list, str, int, bool or "
                        f"None; Money as money.to_wire()): {exc}") from None
    return value


def _form(data: Any) -> dict[str, str]:
    if not isinstance(data, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise TypeError("post(data=...) takes a mapping of strings to strings")
    return dict(data)


def _headers(ctx: RunContext, headers: Any, keyed: bool) -> dict[str, str]:
    if headers is None:
        return {}
    if not isinstance(headers, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        ctx.refuse("headers are a mapping of strings to strings")
    if keyed and any(k.lower() == IDEMPOTENCY_HEADER.lower() for k in headers):
        ctx.refuse("this grant sets the Idempotency-Key header itself; a program may not")
    return dict(headers)


class HttpGetCapability(Bound, HttpGet):
    prepare = staticmethod(transport.prepare)

    @staticmethod
    def check_result(action: str, result: Json) -> None:
        check_http_result(result)

    def get(self, url: str, headers: Mapping[str, str] | None = None) -> Response:
        sent = _headers(self._ctx, headers, keyed=False)
        spec = ActionSpec("net.http.get", "get", {"url": url, "headers": sent}, resend="always")
        result = self._ctx.act(
            self._state, spec, lambda key: self._services.http.send("GET", url, sent))
        return response_of(result)


class HttpPostCapability(Bound, HttpPost):
    prepare = staticmethod(transport.prepare)

    @staticmethod
    def check_result(action: str, result: Json) -> None:
        check_http_result(result)

    def post(self, url: str, json: Any = None, data: Mapping[str, str] | None = None,
             headers: Mapping[str, str] | None = None) -> Response:
        keyed = self._state.grant.idempotency_key
        sent = _headers(self._ctx, headers, keyed)
        if json is not None and data is not None:
            self._ctx.refuse("post() takes json= or data=, not both")
        args: dict[str, Any] = {"url": url, "headers": sent}
        body: dict[str, Any] = {}
        if data is not None:
            args["data"] = body["data"] = _form(data)
        else:
            args["json"] = body["json"] = _json_value(json)
        spec = ActionSpec("net.http.post", "post", args, resend="keyed" if keyed else "never",
                          keyed=keyed)

        def perform(key: str | None) -> Performed:
            if not key:
                return self._services.http.send("POST", url, sent, **body)
            return self._services.http.attempt("POST", url, {**sent, IDEMPOTENCY_HEADER: key}, **body)

        return response_of(self._ctx.act(self._state, spec, perform))
