"""The capability classes a program annotates its parameters with.

`def main(order: str, pay: StripeRefund)` asks for a `payments.stripe.refund`
grant named `pay`. These classes say what each capability can do; the worker
passes an implementation (a subclass) that goes through the broker, so every
action is checked against the grant and journaled. A program never builds
one itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from staal.money import Money
from staal.program import Json


class Capability:
    """Base of every capability; `CAP` is its catalogue name."""

    CAP: ClassVar[str] = ""

    def narrow(self, **limits: Any) -> Capability:
        """A copy with tighter limits (`uses`, `each`, `max`, `only`); never wider.
        Its actions count toward this capability's limits and usage too."""
        raise NotImplementedError


class Response:
    """An HTTP response as a program sees it, live or replayed from the journal."""

    __slots__ = ("headers", "status_code", "text")

    def __init__(self, status_code: int, headers: Mapping[str, str], text: str) -> None:
        self.status_code = status_code
        self.headers = dict(headers)
        self.text = text

    def json(self) -> Any:
        import json

        return json.loads(self.text)

    @property
    def ok(self) -> bool:
        return 200 <= self.status_code < 300

    def __repr__(self) -> str:
        return f"<Response {self.status_code}>"


class HttpGet(Capability):
    CAP = "net.http.get"

    def get(self, url: str, headers: Mapping[str, str] | None = None) -> Response:
        raise NotImplementedError


class HttpPost(Capability):
    CAP = "net.http.post"

    def post(self, url: str, json: Any = None, data: Mapping[str, str] | None = None,
             headers: Mapping[str, str] | None = None) -> Response:
        raise NotImplementedError


class StripeRefund(Capability):
    CAP = "payments.stripe.refund"

    def payment_intent(self, id: str) -> dict[str, Json]:
        raise NotImplementedError

    def refund(self, payment_intent: str, amount: Money, reason: str) -> dict[str, Json]:
        raise NotImplementedError


class Model(Capability):
    CAP = "model.complete"

    def complete(self, prompt: str, max_tokens: int = 1024) -> str:
        raise NotImplementedError


class SqliteRead(Capability):
    CAP = "db.sqlite.read"

    def query(self, sql: str, params: Any = ()) -> list[dict[str, Json]]:
        raise NotImplementedError


class SqliteWrite(SqliteRead):
    CAP = "db.sqlite.write"

    def execute(self, sql: str, params: Any = ()) -> int:
        raise NotImplementedError


class PostgresRead(Capability):
    CAP = "db.postgres.read"

    def query(self, sql: str, params: Any = ()) -> list[dict[str, Json]]:
        raise NotImplementedError


class PostgresWrite(PostgresRead):
    CAP = "db.postgres.write"

    def execute(self, sql: str, params: Any = ()) -> int:
        raise NotImplementedError


class Clock(Capability):
    CAP = "clock.now"

    def now(self) -> int:
        """Wall-clock time in UTC milliseconds since 1970, journaled."""
        raise NotImplementedError


class Random(Capability):
    CAP = "random.bytes"

    def bytes(self, count: int) -> bytes:
        raise NotImplementedError


class Ffi(Capability):
    """The granted C library; attribute access reaches its functions."""

    CAP = "ffi.c"


CAPABILITY_CLASSES: dict[str, type[Capability]] = {
    cls.CAP: cls
    for cls in (HttpGet, HttpPost, StripeRefund, Model, SqliteRead, SqliteWrite, PostgresRead,
                PostgresWrite, Clock, Random, Ffi)
}
