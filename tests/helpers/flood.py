"""The flood client and the checks made after it (issue 15, item 5): many
concurrent clients calling one tool over Streamable HTTP (through the
balancer, or at one instance), every answer kept and classified, then the
ledger's invariants and the fake payment service's exactly-once check.

Each client is one keep-alive connection calling in turn, as an agent's
client does; the calls are dealt out round robin over the clients. An
answer is classified by its structure first: the HTTP status, a JSON-RPC
error or result, `isError`, `structuredContent`. The wire carries no
refusal kind (seed 000 section 5: a refusal is a tool result with
`isError: true` and the server's text), so an error result is told apart
by the fixed openings staal's refusals have (`supervisor/calls/pipeline.py`: "the
server is busy: ...", `quota_text`'s "... is over its quota: ..."); anything
else is a failure, kept with its text for the test's message.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import httpx
import orjson
import psycopg

from staal.protocol.mcp.revisions import LEGACY, MODERN
from tests.helpers.haproxy import INSTANCE_HEADER
from tests.helpers.http_servers import ACCEPT, modern_headers
from tests.helpers.payments import Payments
from tests.helpers.servers import WAIT, modern_meta

Kind = Literal["done", "over_quota", "busy", "failed"]
KINDS: tuple[Kind, ...] = ("done", "over_quota", "busy", "failed")
BUSY = "the server is busy: "
OVER_QUOTA = (" is over its quota: ", "this caller is over its rate limit: ")
CALLS = 1000
CLIENTS = 32


@dataclass(frozen=True, slots=True)
class Answer:
    """One call's answer: what it was, the tool's result when done, the text
    otherwise, and which instance served it (the balancer's header)."""

    index: int
    kind: Kind
    status: int
    result: Any = None
    text: str = ""
    instance: str | None = None


def response_message(body: bytes) -> dict[str, Any] | None:
    """The JSON-RPC response in a body: the JSON itself, or an event
    stream's last `data:` event that is a response (not a notification)."""
    text = body.decode("utf-8", "replace").lstrip()
    if not text.startswith(("event:", "data:", ":")):
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            return None
        return value if isinstance(value, dict) else None
    found = None
    for line in text.splitlines():
        if line.startswith("data:"):
            value = orjson.loads(line[5:])
            if isinstance(value, dict) and "id" in value and "method" not in value:
                found = value
    return found


def classify(index: int, status: int, body: bytes, instance: str | None = None) -> Answer:
    """What one call's HTTP answer says happened."""
    def failed(text: str) -> Answer:
        return Answer(index, "failed", status, text=text, instance=instance)

    if status != 200:
        return failed(f"HTTP {status}: {body[:300].decode('utf-8', 'replace')}")
    message = response_message(body)
    if message is None:
        return failed(f"no JSON-RPC response in the body: {body[:300]!r}")
    if "error" in message:
        error = message["error"]
        return failed(f"JSON-RPC error {error.get('code')}: {error.get('message')}")
    result = message.get("result")
    if not isinstance(result, dict) or not isinstance(result.get("isError"), bool):
        return failed(f"not a tool result: {str(result)[:300]}")
    text = " ".join(c.get("text", "") for c in result.get("content", ()) if isinstance(c, dict))
    structured = result.get("structuredContent")
    if not result["isError"]:
        if isinstance(structured, dict) and "result" in structured:
            return Answer(index, "done", status, structured["result"], text, instance)
        return failed(f"a result without structuredContent.result: {text[:300]}")
    if text.startswith(BUSY):
        return Answer(index, "busy", status, text=text, instance=instance)
    if any(form in text for form in OVER_QUOTA) and structured is None:
        return Answer(index, "over_quota", status, text=text, instance=instance)
    return failed(text)


def call_request(index: int, tool: str, arguments: dict[str, Any],
                 revision: str) -> tuple[bytes, dict[str, str]]:
    """A tools/call's body and headers as a conforming client of `revision` sends them."""
    params: dict[str, Any] = {"name": tool, "arguments": arguments}
    if revision == MODERN:
        params["_meta"] = modern_meta()
        headers = modern_headers("tools/call", params)
    else:
        headers = {"content-type": "application/json", "accept": ACCEPT,
                   "mcp-protocol-version": LEGACY}
    message = {"jsonrpc": "2.0", "id": index, "method": "tools/call", "params": params}
    return orjson.dumps(message), headers


@dataclass(frozen=True, slots=True)
class Flood:
    """What to send: `calls` calls of `tool` from `clients` concurrent
    clients, call i with `arguments(i)`, in one protocol revision."""

    url: str
    tool: str
    arguments: Callable[[int], dict[str, Any]]
    calls: int = CALLS
    clients: int = CLIENTS
    revision: str = LEGACY
    timeout: float = 4 * WAIT
    # Sent with every call besides its own (a fleet's bearer token).
    headers: Mapping[str, str] = field(default_factory=dict)

    def run(self) -> list[Answer]:
        """Every call's answer, in call order."""
        answers: list[Answer | None] = [None] * self.calls
        anyio.run(self._all, answers)
        assert all(a is not None for a in answers)
        return [a for a in answers if a is not None]

    async def _all(self, answers: list[Answer | None]) -> None:
        async with anyio.create_task_group() as group:
            for client in range(self.clients):
                group.start_soon(self._client, range(client, self.calls, self.clients), answers)

    async def _client(self, indexes: range, answers: list[Answer | None]) -> None:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        async with httpx.AsyncClient(timeout=self.timeout, limits=limits, trust_env=False) as http:
            for i in indexes:
                body, headers = call_request(i, self.tool, self.arguments(i), self.revision)
                try:
                    answer = await http.post(self.url, content=body,
                                             headers={**headers, **self.headers})
                except httpx.HTTPError as exc:
                    answers[i] = Answer(i, "failed", 0, text=f"{type(exc).__name__}: {exc}")
                    continue
                answers[i] = classify(i, answer.status_code, answer.content,
                                      answer.headers.get(INSTANCE_HEADER))


def tally(answers: Iterable[Answer]) -> Counter[Kind]:
    return Counter(a.kind for a in answers)


def by_instance(answers: Iterable[Answer], kind: Kind | None = None) -> Counter[str | None]:
    return Counter(a.instance for a in answers if kind is None or a.kind == kind)


# -- afterwards -------------------------------------------------------------------------


def ledger_holds(events: Iterable[dict[str, Any]]) -> dict[str, list[str]]:
    """Every run's events in order, after checking the ledger's invariants:
    each run has exactly one reserve, first, and at most one settle or
    release after it (seed 000 section 6)."""
    runs: dict[str, list[str]] = {}
    for event in events:
        if event.get("event") not in ("reserve", "settle", "release"):
            continue
        runs.setdefault(event["run"], []).append(event["event"])
    for run, seen in runs.items():
        assert seen[0] == "reserve" and seen.count("reserve") == 1, f"run {run}: {seen}"
        assert len(seen) <= 2, f"run {run} has more than one settle or release: {seen}"
    return runs


def store_events(dsn: str) -> list[dict[str, Any]]:
    """Every event in a PostgreSQL store, in ledger (seq) order, shaped as
    the file ledger's lines are (for `ledger_holds`)."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        return [row[0] for row in conn.execute(
            "SELECT event FROM (SELECT seq, event FROM staal_runs UNION ALL "
            "SELECT seq, event FROM staal_ends) AS e ORDER BY seq").fetchall()]


def refunded_exactly_once(payments: Payments, intents: Iterable[str]) -> dict[str, dict]:
    """Each of `intents` was refunded exactly once and nothing else was:
    the refunds, by payment intent."""
    wanted = set(intents)
    refunds = payments.refunds()
    per_intent = Counter(r["payment_intent"] for r in refunds)
    twice = {intent: n for intent, n in per_intent.items() if n > 1}
    assert not twice, f"refunded more than once: {twice}"
    assert set(per_intent) == wanted, (f"refunded but not asked: {sorted(set(per_intent) - wanted)}; "
                                       f"asked but not refunded: {sorted(wanted - set(per_intent))}")
    return {r["payment_intent"]: r for r in refunds}
