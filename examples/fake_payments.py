"""A local fake of the part of Stripe's API that `payments.stripe.refund` uses.

    python examples/fake_payments.py --port 0 --key sk_test_example

prints the port it listens on as its first line, then serves until killed.
Point a grant's `base_url` (and its needs' `only`) at http://127.0.0.1:PORT.
Standard library only; everything is kept in memory.

The API, in Stripe's own shapes (https://docs.stripe.com/api):

- Authentication: `Authorization: Bearer <secret key>` (or HTTP Basic with
  the key as user name); anything else is 401.
- `GET /v1/payment_intents/{id}`: a payment_intent object (amounts in minor
  units, currency lower case).
- `POST /v1/refunds`, form-encoded `payment_intent` (or `charge`), `amount`
  (minor units; the whole remaining amount when left out), `reason`
  (duplicate, fraudulent or requested_by_customer): a refund object. The sum
  of an intent's refunds may not exceed its amount_received (400
  `amount_too_large`, or `charge_already_refunded` once nothing is left).
- Errors are `{"error": {"type", "code", "message", "param"}}` (code and param
  only where Stripe gives them).
- Idempotency (https://docs.stripe.com/api/idempotent_requests): a POST with
  an `Idempotency-Key` whose endpoint ran is answered again, same status and
  body, to the same key with the same parameters (with `Idempotent-Replayed:
  true`); the same key with other parameters or another endpoint is 400
  `idempotency_error`; the same key while its first request is still being
  processed is 409 `idempotency_key_in_use`. A request refused before the
  endpoint ran (bad parameters) saves nothing.

Test controls, under `/_control/`, no key needed, loopback clients only:

- `POST /_control/intents` `{"amount": 5000, "currency": "usd"}` (optional
  `id`, `amount_received`, `status`): creates a payment intent.
- `GET /_control/requests`: every API request received, in order: method,
  path, headers (names lower case), body, `finished` (its handling ended:
  answered, failed or dropped) and `hung_up` (the client had closed its
  connection before the answer went out, as a client that died while the
  request was held has: the service did the work and nobody heard).
- `GET /_control/refunds`: every refund made.
- `POST /_control/faults` `{"path": "/v1/refunds", "kind": KIND, "times": 1}`:
  the next `times` requests to that path (past the idempotency check) get
  the fault. KIND is `hang` (hold the request until released, or `hold_ms`,
  60 s by default; then go on as usual), `fail` (answer 500 api_error
  without doing anything, as a failure in front of the API does: nothing is
  saved under the key), `fail_saved` (the endpoint starts and fails without
  doing anything, and its 500 is saved under the key, as Stripe saves every
  answer once its endpoint ran: a retry with the key gets the same 500),
  `fail_after` (do it, then answer 500), `close`
  (close the connection without an answer, without doing anything),
  `hang_close` (hold it as `hang` does, then close without an answer and
  without doing anything: a gateway that held the request and never passed
  it on) or `close_after` (do it, then close without an answer). The `_after` kinds
  are how a real answer gets lost: the refund exists, the client never
  hears of it, and the saved answer is what a retry with the key gets.
- `POST /_control/release`: lets every held request go on; once it answers,
  none is counted as held.
- `GET /_control/wait?path=P&requests=N&held=N&finished=N&refunds=N&timeout_ms=T`:
  waits until at least N requests to P arrived / are held / were handled to
  their end / N refunds exist, then answers 200; 408 if that did not happen
  within T ms (default 10000).
- `POST /_control/reset`: forgets every intent, refund, request, key and
  fault, as a fresh service would (a power-loss test puts the service back
  to how it was at each crash point, on the same port).

With `--record FILE`, each refund POST under a new key appends a line
`{"op": "mark", "what": "post", "key": KEY, "body": BODY}` to FILE as it
arrives, and each refund made `{"op": "mark", "what": "refund", ...}` before
it is answered, each in one O_APPEND write: the power-loss test records the
server's file operations in the same file, and so knows which refunds the
service had received and made by each one.
"""

from __future__ import annotations

import argparse
import base64
import hmac
import ipaddress
import json
import os
import re
import secrets
import socket
import string
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlsplit

REASONS = ("duplicate", "fraudulent", "requested_by_customer")
FAULTS = ("hang", "hang_close", "fail", "fail_saved", "fail_after", "close", "close_after")
DEFAULT_HOLD_MS = 60_000
ZERO_DECIMAL = {"bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga", "pyg", "rwf", "ugx", "vnd",
                "vuv", "xaf", "xof", "xpf"}
SYMBOLS = {"usd": "$", "eur": "€", "gbp": "£"}
REFUND_PARAMS = {"payment_intent", "charge", "amount", "reason"}


@dataclass
class Answer:
    status: int
    body: dict
    # Whether the endpoint ran: only then is the answer saved under its key.
    saved: bool = True


def error(status: int, type_: str, message: str, code: str | None = None,
          param: str | None = None, saved: bool = True) -> Answer:
    err: dict[str, Any] = {"type": type_, "message": message}
    if code:
        err["code"] = code
    if param:
        err["param"] = param
    return Answer(status, {"error": err}, saved)


def invalid(message: str, code: str | None = None, param: str | None = None) -> Answer:
    """A request refused before the endpoint ran: nothing is saved."""
    return error(400, "invalid_request_error", message, code, param, saved=False)


def new_id(prefix: str) -> str:
    alphabet = string.ascii_letters + string.digits
    return prefix + "".join(secrets.choice(alphabet) for _ in range(24))


def shown(minor: int, currency: str) -> str:
    """An amount as Stripe's messages write it: $12.50, 500 JPY."""
    text = str(minor) if currency in ZERO_DECIMAL else f"{minor / 100:.2f}"
    symbol = SYMBOLS.get(currency)
    return f"{symbol}{text}" if symbol else f"{text} {currency.upper()}"


@dataclass
class KeyEntry:
    method: str
    path: str
    params: dict
    answer: Answer | None = None  # None while the first request is being processed


@dataclass
class Service:
    """Everything the fake knows, guarded by one condition variable."""

    key: str
    cond: threading.Condition = field(default_factory=threading.Condition)
    intents: dict[str, dict] = field(default_factory=dict)
    charges: dict[str, str] = field(default_factory=dict)  # charge id -> intent id
    refunds: list[dict] = field(default_factory=list)
    requests: list[dict] = field(default_factory=list)
    keys: dict[str, KeyEntry] = field(default_factory=dict)
    faults: dict[str, list] = field(default_factory=dict)  # path -> [kind, times, hold_ms]
    held: dict[str, int] = field(default_factory=dict)
    releases: int = 0
    recording: int | None = None  # --record's descriptor

    # -- the API ---------------------------------------------------------

    def payment_intent(self, intent_id: str) -> Answer:
        with self.cond:
            intent = self.intents.get(intent_id)
            if intent is None:
                return error(404, "invalid_request_error", f"No such payment_intent: '{intent_id}'",
                             "resource_missing", "intent")
            return Answer(200, dict(intent))

    def check_refund(self, params: dict) -> Answer | None:
        """Parameter checks, made before the endpoint runs (nothing saved)."""
        for name in params:
            if name not in REFUND_PARAMS and not name.startswith("metadata["):
                return invalid(f"Received unknown parameter: {name}", "parameter_unknown", name)
        if not params.get("payment_intent") and not params.get("charge"):
            return invalid("One of the following params should be provided for this request: "
                           "payment_intent or charge.", "parameter_missing")
        amount = params.get("amount")
        if amount is not None and not (re.fullmatch(r"[0-9]{1,12}", amount) and int(amount) > 0):
            return invalid("Invalid positive integer", "parameter_invalid_integer", "amount")
        reason = params.get("reason")
        if reason is not None and reason not in REASONS:
            return invalid("Invalid reason: must be one of duplicate, fraudulent, or "
                           "requested_by_customer", param="reason")
        return None

    def create_refund(self, params: dict) -> Answer:
        with self.cond:
            intent_id = params.get("payment_intent") or self.charges.get(params.get("charge", ""))
            intent = self.intents.get(intent_id or "")
            if intent is None:
                what, name = (("payment_intent", params["payment_intent"])
                              if params.get("payment_intent") else ("charge", params["charge"]))
                return error(404, "invalid_request_error", f"No such {what}: '{name}'",
                             "resource_missing", what)
            if intent["status"] != "succeeded":
                return error(400, "invalid_request_error", f"This PaymentIntent ({intent['id']}) "
                             "does not have a successful charge to refund.",
                             "payment_intent_unexpected_state")
            currency = intent["currency"]
            refunded = sum(r["amount"] for r in self.refunds if r["payment_intent"] == intent["id"])
            remaining = intent["amount_received"] - refunded
            amount = int(params["amount"]) if "amount" in params else remaining
            if remaining <= 0:
                return error(400, "invalid_request_error",
                             f"Charge {intent['latest_charge']} has already been refunded.",
                             "charge_already_refunded")
            if amount > remaining:
                return error(400, "invalid_request_error",
                             f"Refund amount ({shown(amount, currency)}) is greater than unrefunded "
                             f"amount on charge ({shown(remaining, currency)})",
                             "amount_too_large", "amount")
            refund = {
                "id": new_id("re_"), "object": "refund", "amount": amount,
                "balance_transaction": new_id("txn_"), "charge": intent["latest_charge"],
                "created": int(time.time()), "currency": currency,
                "metadata": {k[9:-1]: v for k, v in params.items() if k.startswith("metadata[")},
                "payment_intent": intent["id"], "reason": params.get("reason"),
                "receipt_number": None, "status": "succeeded",
            }
            self.refunds.append(refund)
            self.cond.notify_all()
            return Answer(200, refund)

    # -- idempotency -----------------------------------------------------

    def begin(self, key: str, method: str, path: str, params: dict) -> tuple[Answer | None, Answer | None]:
        """(a saved answer to replay, a refusal); both None: a new key, now in progress."""
        with self.cond:
            entry = self.keys.get(key)
            if entry is None:
                self.keys[key] = KeyEntry(method, path, params)
                return None, None
            if entry.answer is None:
                return None, error(
                    409, "idempotency_error", "There is currently another in-progress request "
                    "using this Idempotent Key (that probably means you submitted twice, and the "
                    f"other request is still going through): {key}. Please try again later.",
                    "idempotency_key_in_use")
            if (entry.method, entry.path) != (method, path):
                return None, error(
                    400, "idempotency_error", "Keys for idempotent requests can only be used for "
                    f"the same endpoint they were first used for ('{path}' vs '{entry.path}'). Try "
                    f"using a key other than '{key}' if you meant to execute a different request.")
            if entry.params != params:
                return None, error(
                    400, "idempotency_error", "Keys for idempotent requests can only be used with "
                    "the same parameters they were first used with. Try using a key other than "
                    f"'{key}' if you meant to execute a different request.")
            return entry.answer, None

    def finish(self, key: str, answer: Answer | None) -> None:
        """Save the answer under its key, or forget the key if the endpoint never ran."""
        with self.cond:
            if answer is not None and answer.saved:
                self.keys[key].answer = answer
            else:
                del self.keys[key]

    # -- faults and waiting ------------------------------------------------

    def take_fault(self, path: str) -> tuple[str | None, float]:
        with self.cond:
            fault = self.faults.get(path)
            if fault is None:
                return None, 0.0
            fault[1] -= 1
            if fault[1] <= 0:
                del self.faults[path]
            return fault[0], fault[2] / 1000

    def hold(self, path: str, seconds: float) -> None:
        with self.cond:
            releases = self.releases
            self.held[path] = self.held.get(path, 0) + 1
            self.cond.notify_all()
            released = False
            try:
                released = self.cond.wait_for(lambda: self.releases != releases, timeout=seconds)
            finally:
                if not released:  # a release stops counting it itself
                    self.held[path] -= 1

    def wait(self, query: dict) -> Answer:
        path = query.get("path")
        want = {name: int(query.get(name, 0))
                for name in ("requests", "held", "finished", "refunds")}

        def reached() -> bool:
            seen = [r for r in self.requests if path is None or urlsplit(r["path"]).path == path]
            held = self.held.get(path, 0) if path else sum(self.held.values())
            finished = sum(1 for r in seen if r["finished"])
            return (len(seen) >= want["requests"] and held >= want["held"]
                    and finished >= want["finished"] and len(self.refunds) >= want["refunds"])

        with self.cond:
            ok = self.cond.wait_for(reached, timeout=int(query.get("timeout_ms", 10_000)) / 1000)
        return Answer(200 if ok else 408, {"ok": ok})

    # -- the controls ------------------------------------------------------

    def control(self, method: str, path: str, query: dict, body: bytes) -> Answer:
        try:
            data = json.loads(body) if body else {}
        except json.JSONDecodeError:
            return invalid("the body is not JSON")
        with self.cond:
            if (method, path) == ("POST", "/_control/intents"):
                return self.add_intent(data)
            if (method, path) == ("GET", "/_control/requests"):
                return Answer(200, {"object": "list", "data": [dict(r) for r in self.requests]})
            if (method, path) == ("GET", "/_control/refunds"):
                return Answer(200, {"object": "list", "data": list(self.refunds)})
            if (method, path) == ("POST", "/_control/faults"):
                kind, times = data.get("kind"), data.get("times", 1)
                if (kind not in FAULTS or not isinstance(times, int) or times < 1
                        or not isinstance(data.get("path"), str)):
                    return invalid(f"a fault has a path, a kind ({', '.join(FAULTS)}) and times")
                self.faults[data["path"]] = [kind, times, data.get("hold_ms", DEFAULT_HOLD_MS)]
                return Answer(200, {"ok": True})
            if (method, path) == ("POST", "/_control/reset"):
                for table in (self.intents, self.charges, self.keys, self.faults, self.held):
                    table.clear()
                self.refunds.clear()
                self.requests.clear()
                return Answer(200, {"ok": True})
            if (method, path) == ("POST", "/_control/release"):
                self.releases += 1
                self.held.clear()
                self.cond.notify_all()
                return Answer(200, {"ok": True})
        if (method, path) == ("GET", "/_control/wait"):
            return self.wait(query)
        return error(404, "invalid_request_error", f"no control {method} {path}")

    def record(self, what: str, key: str | None, body: bytes) -> None:
        if self.recording is not None:
            line = json.dumps({"pid": os.getpid(), "op": "mark", "what": what, "key": key,
                               "body": body.decode("utf-8", "replace")})
            os.write(self.recording, (line + "\n").encode())

    def add_intent(self, data: dict) -> Answer:
        amount, currency = data.get("amount"), data.get("currency", "usd")
        status = data.get("status", "succeeded")
        if not isinstance(amount, int) or amount <= 0 or not re.fullmatch(r"[a-z]{3}", currency):
            return invalid("an intent needs amount (minor units above zero) and a lower case currency")
        charge = new_id("ch_")
        intent = {
            "id": data.get("id") or new_id("pi_"), "object": "payment_intent", "amount": amount,
            "amount_received": data.get("amount_received",
                                        amount if status == "succeeded" else 0),
            "currency": currency, "status": status, "latest_charge": charge,
            "created": int(time.time()), "livemode": False, "metadata": {},
        }
        self.intents[intent["id"]] = intent
        self.charges[charge] = intent["id"]
        return Answer(200, intent)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-payments/1"
    service: Service  # set on the subclass made in serve()
    # The API request being handled (its entry in `service.requests`).
    record: dict | None = None

    def setup(self) -> None:
        super().setup()
        # Headers and body go out as two writes; without this a delayed ACK
        # adds 40 ms to every answer on a kept-alive connection.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.dispatch()

    def do_POST(self) -> None:
        self.dispatch()

    # -- plumbing ----------------------------------------------------------

    def dispatch(self) -> None:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if parts.path.startswith("/_control/"):
            if not ipaddress.ip_address(self.client_address[0]).is_loopback:
                self.answer(error(403, "invalid_request_error", "controls are for loopback clients"))
            else:
                query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
                self.answer(self.service.control(self.command, parts.path, query, body))
            return
        self.record = {
            "method": self.command, "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body.decode("utf-8", "replace"), "finished": False, "hung_up": False,
        }
        with self.service.cond:
            self.service.requests.append(self.record)
            self.service.cond.notify_all()
        try:
            self.api(parts.path, body)
        finally:
            with self.service.cond:
                self.record["finished"] = True
                self.service.cond.notify_all()
            self.record = None

    def answer(self, answer: Answer, replayed: bool = False) -> None:
        data = json.dumps(answer.body, indent=2).encode()
        if self.record is not None and self.hung_up():
            with self.service.cond:
                self.record["hung_up"] = True
        try:
            self.send_response(answer.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Request-Id", new_id("req_"))
            if replayed:
                self.send_header("Idempotent-Replayed", "true")
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away while we worked

    def hung_up(self) -> bool:
        """Whether the client closed its side of the connection (end of file,
        or a reset) while its request was being handled."""
        try:
            return self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False  # still there, saying nothing
        except OSError:
            return True

    def drop(self) -> None:
        """Close the connection without a word, as a dying proxy would."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def authorized(self) -> Answer | None:
        given = self.headers.get("Authorization", "")
        scheme, _, credential = given.partition(" ")
        if scheme.lower() == "basic":
            try:
                credential = base64.b64decode(credential).decode().partition(":")[0]
            except ValueError:
                credential = ""
        elif scheme.lower() != "bearer":
            credential = ""
        if not credential:
            return error(401, "invalid_request_error", "You did not provide an API key. You need "
                         "to provide your API key in the Authorization header, using Bearer auth "
                         "(e.g. 'Authorization: Bearer YOUR_SECRET_KEY').")
        if not hmac.compare_digest(credential.encode(), self.service.key.encode()):
            masked = credential[:8] + "*" * max(len(credential) - 12, 0) + credential[-4:]
            return error(401, "invalid_request_error", f"Invalid API Key provided: {masked}")
        return None

    # -- the API, with its faults -------------------------------------------

    def api(self, path: str, body: bytes) -> None:
        refused = self.authorized()
        if refused is not None:
            return self.answer(refused)
        service, key, params = self.service, None, {}
        match = re.fullmatch(r"/v1/payment_intents/([A-Za-z0-9_]+)", path)
        if self.command == "GET" and match:
            def endpoint():
                return service.payment_intent(match.group(1))
        elif self.command == "POST" and path == "/v1/refunds":
            params = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
            def endpoint():
                return service.check_refund(params) or service.create_refund(params)
            key = self.headers.get("Idempotency-Key")
        else:
            return self.answer(error(404, "invalid_request_error", f"Unrecognized request URL "
                                     f"({self.command}: {path})."))
        replay = None
        if key:
            replay, refused = service.begin(key, self.command, path, params)
            if refused is not None:
                return self.answer(refused)
        if replay is None and self.command == "POST":
            service.record("post", key, body)
        kind, hold_s = service.take_fault(path)
        if kind in ("hang", "hang_close"):
            service.hold(path, hold_s)
        if kind in ("fail", "close", "hang_close"):
            if key and replay is None:
                service.finish(key, None)  # the endpoint never ran: nothing saved
            return self.fail() if kind == "fail" else self.drop()
        if kind == "fail_saved" and replay is None:
            failed = error(500, "api_error", "An unknown error occurred")
            if key:
                service.finish(key, failed)
            return self.answer(failed)
        answer = replay or endpoint()
        if key and replay is None:
            service.finish(key, answer)
        if replay is None and self.command == "POST" and answer.status == 200:
            service.record("refund", key, body)
        if kind == "fail_after":
            return self.fail()
        if kind == "close_after":
            return self.drop()
        self.answer(answer, replayed=replay is not None)

    def fail(self) -> None:
        self.answer(error(500, "api_error", "An unknown error occurred", saved=False))


def serve(port: int, key: str, host: str = "127.0.0.1",
          record: str | None = None) -> ThreadingHTTPServer:
    recording = None if record is None else os.open(
        record, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    service = Service(key=key, recording=recording)
    handler = type("BoundHandler", (Handler,), {"service": service})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A local fake of Stripe's refund API.")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--key", required=True, help="the secret key clients must send")
    parser.add_argument("--record", help="append a line to this file for each refund received and made")
    args = parser.parse_args(argv)
    server = serve(args.port, args.key, args.host, args.record)
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        sys.stdout.flush()


if __name__ == "__main__":
    main()
