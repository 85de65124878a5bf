"""`model.complete`: the run config's `model` section over the Anthropic
Messages API, with httpx.

One `complete(prompt, max_tokens)` is one journaled action. A model call has
no side effect, so one found in doubt after a crash is asked again; one that
was answered is replayed on resume and never asked again (DESIGN.md
section 5).

The wire (Anthropic Messages API, version `2023-06-01`): `POST
{base_url}/v1/messages` with headers `x-api-key`, `anthropic-version` and
`content-type: application/json`, body `{"model", "max_tokens", "messages":
[{"role": "user", "content": prompt}]}`. The answer is a message object whose
`content` is a list of blocks; the completion is the concatenation of its
`text` blocks. An error is `{"type": "error", "error": {"type", "message"}}`.

Bounds (seed 000 section 3, "How long a call can take"): each attempt,
connecting included, is bounded by the model's `timeout_ms`; after a
retryable failure (HTTP 429, 500, 502, 503, 504, 529, a timeout or a lost
connection) up to `retries` more attempts are made, waiting between them
with exponential backoff, or as long as a `retry-after` header says, and
never more than 60 s per wait. Any other answer fails at once. A call that
fails for good fails the action as kind `provider`.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from staal.caps import Model
from staal.manifest.model import ModelConfig
from staal.records.record import Json
from staal.runtime.backoff import Backoff
from staal.runtime.clock import SYSTEM_CLOCK, Clock
from staal.worker.capabilities import Bound, transport
from staal.worker.capabilities.transport import reason
from staal.worker.runs.actions import ActionSpec, Performed

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
MESSAGES_PATH = "/v1/messages"

# A script's defaults (a tool must give its own, seed 000 section 3): those
# of Anthropic's own SDK, ten minutes per attempt and two retries.
DEFAULT_TIMEOUT_MS = 600_000
DEFAULT_RETRIES = 2

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504, 529})
MAX_WAIT_S = 60.0
FIRST_BACKOFF_S = 0.5
# Each backoff wait is drawn from [JITTER * step, step], so runs that failed
# together do not all come back at the same moment.
JITTER = 0.75
# The step before the second attempt is FIRST_BACKOFF_S, doubling after.
_BACKOFF = Backoff(first=FIRST_BACKOFF_S, cap=MAX_WAIT_S, at_once=0)

MAX_TOKENS = 128_000
# The Messages API refuses requests over 32 MB; refusing a prompt near that
# before sending keeps the refusal the broker's, with nothing sent.
MAX_PROMPT_BYTES = 30 * 1024 * 1024
MAX_ANSWER_BYTES = 8 * 1024 * 1024
MAX_REASON_CHARS = 500

Sleep = Callable[[float], None]


def _real_sleep(seconds: float) -> None:
    time.sleep(seconds)


# What waits between attempts. Tests replace it (or put a `sleep` on the
# run's services) to observe the waits without waiting.
SLEEP: Sleep = _real_sleep


@dataclass(frozen=True)
class _Failed:
    """One attempt that failed: why, whether another may follow, and how
    long the provider asked us to wait first (seconds, if it said)."""

    reason: str
    retryable: bool
    retry_after: float | None = None


class AnthropicProvider:
    """The Messages API client behind one model call: every attempt, the
    waits between them, and the final Performed."""

    def __init__(self, config: ModelConfig, api_key: str, sleep: Sleep | None = None,
                 clock: Clock = SYSTEM_CLOCK, jitter: Callable[[float, float], float] | None = None,
                 ) -> None:
        self.config = config
        self.api_key = api_key
        self.sleep = sleep or SLEEP
        self.clock = clock
        self.jitter = jitter or random.uniform
        self.timeout_ms = config.timeout_ms if config.timeout_ms is not None else DEFAULT_TIMEOUT_MS
        self.retries = config.retries if config.retries is not None else DEFAULT_RETRIES
        self.url = (config.base_url or ANTHROPIC_BASE_URL).rstrip("/") + MESSAGES_PATH
        # Each attempt, connecting included, within timeout_ms all told.
        self.limits = transport.Limits(self.timeout_ms, self.timeout_ms, MAX_ANSWER_BYTES,
                                       whole=True)

    def complete(self, prompt: str, max_tokens: int) -> Performed:
        body = json.dumps({
            "model": self.config.model,
            "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": prompt}],
        }).encode()
        headers = {
            "x-api-key": self.api_key,
            "anthropic-version": ANTHROPIC_VERSION,
            "content-type": "application/json",
            "accept": "application/json",
        }
        attempts = self.retries + 1
        for attempt in range(1, attempts + 1):
            outcome = self._attempt(body, headers)
            if isinstance(outcome, str):
                return Performed(result=outcome)
            if not outcome.retryable:
                return Performed(failure=f"the model provider failed: {outcome.reason} "
                                 "(not retried)", failure_kind="provider")
            if attempt == attempts:
                said = "the only attempt" if attempts == 1 else f"all {attempts} attempts"
                return Performed(failure=f"the model provider failed {said}; the last: "
                                 f"{outcome.reason}", failure_kind="provider")
            self.sleep(self.wait_before(attempt + 1, outcome.retry_after))
        raise AssertionError("unreachable")  # pragma: no cover

    def wait_before(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before attempt `attempt` (2 for the first retry):
        what the provider asked for, else exponential backoff; at most 60."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), MAX_WAIT_S)
        step = _BACKOFF.after(attempt - 1)
        return min(self.jitter(JITTER * step, step), MAX_WAIT_S)

    # -- one attempt ---------------------------------------------------------

    def _attempt(self, body: bytes, headers: Mapping[str, str]) -> str | _Failed:
        try:
            answer = transport.exchange("POST", self.url, self.limits, headers, content=body)
        except (httpx.TimeoutException, transport.TooSlow):
            return _Failed(f"no complete answer within {self.timeout_ms} ms", True)
        except (httpx.UnsupportedProtocol, httpx.InvalidURL, httpx.LocalProtocolError) as exc:
            return _Failed(f"the request could not be sent: {reason(exc)}", False)
        except httpx.ConnectError as exc:
            return _Failed(f"could not connect: {reason(exc)}", True)
        except httpx.TransportError as exc:
            return _Failed(f"the connection was lost: {reason(exc)}", True)
        status = answer.status
        if answer.data is None:
            return _Failed(f"HTTP {status}: the answer is larger than {MAX_ANSWER_BYTES} bytes",
                           False)
        if status == 200:
            return _text_of(answer.data, status)
        return _Failed(_error_of(status, answer.headers, answer.data), status in RETRYABLE_STATUS,
                       self._retry_after(answer.headers))

    def _retry_after(self, headers: httpx.Headers) -> float | None:
        value = headers.get("retry-after")
        if value is None:
            return None
        value = value.strip()
        try:
            seconds = float(value)
        except ValueError:
            try:
                when = parsedate_to_datetime(value)
            except (TypeError, ValueError, IndexError):
                return None
            if when is None or when.tzinfo is None:
                return None
            seconds = when.timestamp() - self.clock.now_ms() / 1000
        if not math.isfinite(seconds):
            return None
        return max(seconds, 0.0)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 3] + "..."


def _error_of(status: int, headers: httpx.Headers, data: bytes) -> str:
    """`HTTP 529 overloaded_error: Overloaded (request req_...)`, from an
    Anthropic error body, or the start of whatever else came back."""
    detail = ""
    try:
        error = json.loads(data)["error"]
        detail = f" {error['type']}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        text = data.decode("utf-8", errors="replace").strip()
        if text:
            detail = f": {text}"
    request = headers.get("request-id")
    tail = f" (request {request})" if request else ""
    return _short(f"HTTP {status}{detail}") + tail


def _text_of(data: bytes, status: int) -> str | _Failed:
    """The concatenated `text` blocks of a message object."""
    try:
        message = json.loads(data)
    except ValueError:
        return _Failed(f"HTTP {status}: the answer is not JSON", False)
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        return _Failed(f"HTTP {status}: the answer is not a message with content blocks", False)
    parts = [b.get("text") for b in content if b.get("type") == "text"]
    if not all(isinstance(p, str) for p in parts):
        return _Failed(f"HTTP {status}: a text block of the answer has no text", False)
    return "".join(parts)


class ModelCapability(Bound, Model):
    prepare = staticmethod(transport.prepare)

    @staticmethod
    def check_result(action: str, result: Json) -> None:
        if not isinstance(result, str):
            # ValueError: what `staal resolve` reports as a bad --result.
            raise ValueError('a model completion is a string: --result \'"the answer"\'')

    def complete(self, prompt: str, max_tokens: int = 1024) -> str:
        ctx = self._ctx
        if not isinstance(prompt, str) or not prompt:
            ctx.refuse(f"'{self._state.cap}' needs a prompt that is a non-empty string, "
                       f"not {_shown(prompt)}")
        try:
            size = len(prompt.encode("utf-8"))
        except UnicodeEncodeError:
            ctx.refuse(f"'{self._state.cap}' needs a prompt of valid Unicode text "
                       "(it holds a lone surrogate)")
        if size > MAX_PROMPT_BYTES:
            ctx.refuse(f"'{self._state.cap}' takes a prompt of at most {MAX_PROMPT_BYTES} bytes")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) \
                or not 1 <= max_tokens <= MAX_TOKENS:
            ctx.refuse(f"'{self._state.cap}' takes max_tokens from 1 to {MAX_TOKENS}, "
                       f"not {_shown(max_tokens)}")
        run_config = self._services.config
        config = run_config.model if run_config is not None else None
        if config is None:
            ctx.refuse(f"'{self._state.cap}' needs the config's model section, and it has none")
        # Before the action: a missing secret is refused with nothing
        # journaled and nothing sent.
        api_key = self._secret(config.api_key.env)
        provider = AnthropicProvider(config, api_key, sleep=getattr(self._services, "sleep", None),
                                     clock=self._services.clock)
        spec = ActionSpec(
            cap=self._state.cap, action="complete",
            args={"model": config.model, "prompt": prompt, "max_tokens": max_tokens},
            resend="always",
        )
        # A string: what the provider answered, or an operator's checked --result.
        completion: str = ctx.act(self._state, spec, lambda key: provider.complete(prompt, max_tokens))
        return completion


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
