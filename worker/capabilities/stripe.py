"""`payments.stripe.refund`: refunds over Stripe's REST API, acting through
the grant's needs (DESIGN.md section 4).

The wire (https://docs.stripe.com/api): every request carries the secret
key as `Authorization: Bearer <key>`; amounts are integers in the
currency's minor units and currencies are lower case.

- `payment_intent(id)` is `GET {base_url}/v1/payment_intents/{id}` through
  the `get` need: that need's `only` and `uses` apply, the composite's
  `uses` and money limits do not (reading is not refunding). A read found in
  doubt is simply read again.
- `refund(payment_intent, amount, reason)` is `POST {base_url}/v1/refunds`,
  form-encoded `payment_intent`, `amount`, `reason`, with `Idempotency-Key:
  <run id>-<op>`. The broker checks the composite's `uses`, `each` and `max`
  on the money asked for, and the `post` need's `only` and `uses`, before
  anything is sent. The money charged is what the service's refund object
  says.

Stripe keeps an idempotency key's answer for at least 24 hours and answers a
repeated key with it, so a refund whose answer says nothing of whether it
was made (the connection dropped or timed out, a 5xx, or 409
`idempotency_key_in_use` while the first request is still being processed)
is sent again with the same key, with backoff, until an answer settles it,
while the run's deadline (or max_wait) and the key's window allow: the
engine does that (worker/runs/resend.py), in the run and on resume. Stripe saves
a 500 its endpoint gave under the key and replays it to every retry
(`Idempotent-Replayed: true`), so such a refund is in doubt at once, until
an operator answers; so is a 2xx whose refund object cannot be read. A 401,
403 or 429 is given before Stripe looks at the key: it says nothing of an
earlier attempt (a 429 is sent again with the backoff; a 401 or 403 is not,
since the secret does not change during a run). Any other 4xx is a refusal from Stripe: the action failed,
with Stripe's message.

The secret key is read from the server's environment before anything is
journaled or sent, and never appears in an argument, a result or a message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

from staal.caps import StripeRefund
from staal.errors import MoneyError
from staal.money import Money
from staal.records.record import Json
from staal.worker.capabilities import Bound, transport
from staal.worker.capabilities.http import IDEMPOTENCY_HEADER, HttpAnswer
from staal.worker.runs.actions import ActionSpec, Performed
from staal.worker.runs.resend import Attempted, InDoubt, NotSent

if TYPE_CHECKING:
    from staal.worker.capabilities.services import Services
    from staal.worker.runs.broker import GrantState
    from staal.worker.runs.engine import RunContext

CAP = "payments.stripe.refund"
STRIPE_BASE_URL = "https://api.stripe.com"
REASONS = ("duplicate", "fraudulent", "requested_by_customer")
# Stripe's object ids: a prefix and letters, digits and underscores. Anything
# else would change the URL's path, so it is refused before it is built.
_ID = re.compile(r"[A-Za-z0-9_]{1,255}")

# Answers that may mean the refund is (being) made: the key's first request
# is still being processed (409), or the service failed somewhere (5xx).
IN_DOUBT_STATUS = 409
# Answers given before Stripe's idempotency layer looked at the key: they
# refuse this attempt and say nothing about an earlier one. A 429 may pass
# later; a 401 or 403 will not while the run's secret stays the same.
NOT_LOOKED = frozenset({401, 403, 429})
LATER = 429
# Refund statuses under which no money went back.
NOT_CHARGED = frozenset({"failed", "canceled"})


def _refunded(refund: dict[str, Any]) -> tuple[Money, ...]:
    if refund.get("status") in NOT_CHARGED:
        return ()
    return (Money.from_minor(refund["amount"], refund["currency"]),)


def _check_money_fields(result: Json, what: str) -> None:
    if not isinstance(result, dict):
        raise ValueError(f"a {what} is a JSON object")
    if not isinstance(result.get("id"), str) or not result["id"]:
        raise ValueError(f'a {what} has an "id" string')
    amount, currency = result.get("amount"), result.get("currency")
    if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
        raise ValueError(f'a {what} has an "amount": a whole number of minor units, such as 2000')
    try:
        Money.from_minor(amount, currency)
    except MoneyError as exc:
        raise ValueError(f'a {what} has a "currency" such as "usd": {exc.message}') from None


def check_refund(result: Json) -> None:
    """The shape of a refund object, as an operator's --result gives it."""
    _check_money_fields(result, "refund object")
    if result.get("object", "refund") != "refund":
        raise ValueError('a refund object has "object": "refund"')
    if not isinstance(result.get("status", ""), str):
        raise ValueError('a refund object\'s "status" is a string')


def check_payment_intent(result: Json) -> None:
    _check_money_fields(result, "payment_intent object")
    if result.get("object", "payment_intent") != "payment_intent":
        raise ValueError('a payment_intent object has "object": "payment_intent"')
    received = result.get("amount_received", 0)
    if isinstance(received, bool) or not isinstance(received, int) or received < 0:
        raise ValueError('a payment_intent object\'s "amount_received" is a whole number')


def _stripe_error(method: str, url: str, answer: HttpAnswer) -> str:
    """Stripe's own words for a refusal; the status if it gave none."""
    status = answer["status"]
    try:
        error = json.loads(answer["text"])["error"]
        message, code = str(error["message"]), error.get("code")
    except (ValueError, KeyError, TypeError):
        message, code = answer["text"][:300] or "no message", None
    return f"{method} {url} answered {status}" + (f" ({code})" if code else "") + f": {message}"


def _in_use(answer: HttpAnswer) -> bool:
    return answer["status"] == IN_DOUBT_STATUS or answer["status"] >= 500


class StripeRefundCapability(Bound, StripeRefund):
    prepare = staticmethod(transport.prepare)

    def __init__(self, ctx: RunContext, state: GrantState, services: Services) -> None:
        super().__init__(ctx, state, services)
        # The currency of each payment intent this run has read: a refund of
        # it is asked in that currency, or the broker would check its amount
        # against limits in one currency while Stripe refunds in another.
        self._currencies: dict[str, str] = {}

    def narrow(self, **limits: Any) -> Self:
        narrowed = super().narrow(**limits)
        narrowed._currencies = self._currencies
        return narrowed

    @staticmethod
    def check_result(action: str, result: Json) -> None:
        if action == "refund":
            check_refund(result)
        elif action == "payment_intent":
            check_payment_intent(result)
        else:
            raise ValueError(f"'{CAP}' has no action {action!r}")

    @staticmethod
    def charged_of(action: str, result: Json) -> tuple[Money, ...]:
        """What a refund an operator says happened charged: its amount,
        unless Stripe's status says nothing was refunded."""
        return _refunded(result) if action == "refund" else ()

    # -- what a program calls ----------------------------------------------

    def payment_intent(self, id: str) -> dict[str, Any]:
        if not isinstance(id, str) or not _ID.fullmatch(id):
            self._ctx.refuse(f"'{CAP}' takes a payment intent id of letters, digits and "
                             f"underscores (such as \"pi_3MtwBw\"), not {_shown(id)}")
        headers = self._auth()
        url = f"{self._base()}/v1/payment_intents/{id}"
        spec = ActionSpec(cap=CAP, action="payment_intent", args={"url": url, "id": id},
                          resend="always")

        def perform(key: str | None) -> Performed:
            done = self._services.http.send("GET", url, headers)
            if done.failure is not None:
                return done
            return self._object(done.result, "GET", url, check_payment_intent)

        # A payment_intent object: check_payment_intent read it, or --result's check.
        intent: dict[str, Any] = self._ctx.act(self._state.needs["get"], spec, perform)
        self._currencies[id] = str(intent["currency"]).upper()
        return intent

    def refund(self, payment_intent: str, amount: Money, reason: str) -> dict[str, Any]:
        if not isinstance(payment_intent, str) or not _ID.fullmatch(payment_intent):
            self._ctx.refuse(f"'{CAP}' refunds a payment intent id of letters, digits and "
                             f"underscores (such as \"pi_3MtwBw\"), not {_shown(payment_intent)}")
        if not isinstance(amount, Money):
            self._ctx.refuse(f"'{CAP}' refunds an amount of Money, not {_shown(amount)}")
        if amount.minor <= 0:
            self._ctx.refuse(f"'{CAP}' refunds only amounts above zero; this refund is {amount}")
        if reason not in REASONS:
            self._ctx.refuse(f"'{CAP}' takes a reason of {', '.join(REASONS)}, not {_shown(reason)}")
        paid_in = self._currencies.get(payment_intent)
        if paid_in is not None and paid_in != amount.currency:
            self._ctx.refuse(f"'{CAP}' cannot refund {amount} of {payment_intent}, which was paid "
                             f"in {paid_in}")
        headers = self._auth()
        url = f"{self._base()}/v1/refunds"
        form = {"payment_intent": payment_intent, "amount": str(amount.minor), "reason": reason}
        spec = ActionSpec(
            cap=CAP, action="refund",
            args={"url": url, "payment_intent": payment_intent, "amount": amount.to_wire(),
                  "reason": reason},
            money=amount, resend="keyed", keyed=True,
            through=((self._state.needs["post"], url),))

        def perform(key: str | None) -> Performed:
            # keyed=True: the engine always hands a key, `<run id>-<op>` (and
            # `-<attempt>` after an operator's "did not happen").
            return self._post_refund(url, {**headers, IDEMPOTENCY_HEADER: str(key)}, form)

        refund: dict[str, Any] = self._ctx.act(self._state, spec, perform)  # checked: check_refund
        return refund

    # -- on the wire -----------------------------------------------------------

    def _base(self) -> str:
        return (self._state.grant.base_url or STRIPE_BASE_URL).rstrip("/")

    def _auth(self) -> dict[str, str]:
        """The bearer header: read before anything is journaled, so a
        missing secret is refused with nothing sent."""
        env = self._secret_env(self._state.grant.needs.get("key"), "key")
        return {"Authorization": f"Bearer {self._secret(env)}"}

    def _object(self, answer: HttpAnswer, method: str, url: str,
                check: Callable[[Any], None]) -> Performed:
        if not 200 <= answer["status"] < 300:
            return Performed(failure=_stripe_error(method, url, answer))
        try:
            body = json.loads(answer["text"])
            check(body)
        except ValueError as exc:
            return Performed(failure=f"{method} {url} answered {answer['status']} with no "
                                     f"object Stripe would send: {exc}")
        return Performed(result=body)

    def _post_refund(self, url: str, headers: dict[str, str], form: dict[str, str]) -> Performed:
        """One attempt; the engine sends it again while it is unsettled."""
        done = self._services.http.attempt("POST", url, headers, data=form)
        if done.failure is not None:
            # An answer too large to read: what it says is unknown.
            raise InDoubt(done.failure, resendable=False)
        answer: HttpAnswer = done.result
        if _in_use(answer):
            # A 5xx Stripe saved under the key is replayed to every retry.
            replayed = str(answer["headers"].get("idempotent-replayed", "")).lower() == "true"
            raise InDoubt(_stripe_error("POST", url, answer), resendable=not replayed)
        if answer["status"] in NOT_LOOKED:
            said = Attempted.THROTTLED if answer["status"] == LATER else Attempted.REFUSED
            raise NotSent(_stripe_error("POST", url, answer), said)
        outcome = self._object(answer, "POST", url, check_refund)
        if outcome.failure is None:
            return Performed(result=outcome.result, charged=_refunded(outcome.result))
        if 200 <= answer["status"] < 300:
            # It says yes in a shape we cannot read: what was refunded is unknown.
            raise InDoubt(outcome.failure, resendable=False)
        return outcome  # Stripe's answer for this key: it refused the refund


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
