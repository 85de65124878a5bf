"""What a run's actions are, as the run context (engine.py) handles them:
an action's spec and what performing it gave, a run's outcome, and the pure
steps around an action (timing it, delivering its result, counting its use)
and a run's end (the failure an error makes, where in the program it passed).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import orjson

from staal.content import content_of
from staal.errors import CanonicalError, ContentError
from staal.journal.records import Intent
from staal.money import Money
from staal.program import ActionFailed, RunEnded, RunFailed
from staal.records.canonical import canonical_json, sha256_hex
from staal.records.content import ContentPart
from staal.records.outcomes import Failure, FailureKind, Frame, Usage
from staal.records.record import Json, encode_plain
from staal.runtime.redaction import redact
from staal.runtime.timings import TIMINGS
from staal.worker.runs.broker import GrantState
from staal.worker.runs.resend import RESEND_WINDOW_MS
from staal.worker.runs.tracebacks import program_frames

Resend = Literal["always", "keyed", "never"]


class RunStopped(RunEnded):
    """The run stops here and waits for an operator."""


@dataclass(frozen=True)
class ActionSpec:
    cap: str
    action: str
    # What identifies the action for replay; never holds a secret.
    args: Json
    money: Money | None = None
    # When an op found in doubt may be sent again: always (a read), keyed
    # (with the same idempotency key, inside RESEND_WINDOW_MS; a keyed op is
    # sent again until it is settled, worker/runs/resend.py) or never.
    resend: Resend = "never"
    keyed: bool = False
    # A composite acts through lower grants (its `needs`): each of these
    # states must allow the URL given, and counts the action too.
    through: tuple[tuple[GrantState, str | None], ...] = ()

    def describe(self, param: str) -> str:
        return f"{self.cap} {self.action} through '{param}'"


@dataclass(frozen=True)
class Performed:
    """An action that was performed; `failure` if it failed for certain."""

    result: Json = None
    charged: tuple[Money, ...] = ()
    failure: str | None = None
    # "action", or "provider" for a model provider that failed every attempt.
    failure_kind: FailureKind = "action"


@dataclass(frozen=True)
class RunOutcome:
    outcome: Literal["done", "failed", "stopped", "error"]
    run: str | None = None
    result: Json = None
    failure: Failure | None = None
    op: int | None = None
    message: str | None = None
    usage: dict[str, Usage] = field(default_factory=dict)
    # A done run's result that is not JSON (End.content); `result` is None then.
    content: tuple[ContentPart, ...] | None = None

    def waits_at(self) -> tuple[int, str]:
        """The op a stopped run waits at, and why."""
        if self.outcome != "stopped" or self.op is None or self.message is None:
            raise ValueError(f"a {self.outcome} run waits at no op")
        return self.op, self.message

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"outcome": self.outcome}
        if self.run is not None:
            out["run"] = self.run
        if self.content is not None:
            out["content"] = [encode_plain(part) for part in self.content]
        elif self.outcome == "done":
            out["result"] = self.result
        if self.failure is not None:
            out["failure"] = {"kind": self.failure.kind, "message": self.failure.message}
        if self.outcome == "stopped":
            out["op"] = self.op
            out["message"] = self.message
        if self.outcome != "error":
            out["usage"] = {
                name: {"actions": u.actions, "charged": [m.to_wire() for m in u.charged]}
                for name, u in sorted(self.usage.items())
            }
        return out


def args_hash(args: Any) -> str:
    return sha256_hex(canonical_json(args))


def failure_of(error: BaseException, redact: Callable[[str], str]) -> tuple[FailureKind, str]:
    """The kind and message of the failure `error` ends the run with."""
    if isinstance(error, (RunFailed, ActionFailed)):
        return error.kind, redact(error.message)
    if isinstance(error, SystemExit):
        return "value", f"the program called exit({error.code!r})"
    return "value", redact(f"{type(error).__name__}: {error}")


def frames_of(error: BaseException | None, program_dir: Path | None,
              redact: Callable[[str], str]) -> tuple[Frame, ...]:
    """Where in the program `error` passed, for its failure."""
    if error is None or program_dir is None:
        return ()
    return program_frames(error, program_dir, redact)


def count_use(state: GrantState, spec: ActionSpec, charged: tuple[Money, ...]) -> None:
    """An action's use of its grant, and of each grant it went through."""
    state.count(spec.money, charged)
    for need, _ in spec.through:
        need.count(None, (), usage=False)


def redact_value(secrets: tuple[str, ...], value: Any) -> Any:
    """A JSON value with every secret cut out of its strings, keys included."""
    if not secrets:
        return value
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, list):
        return [redact_value(secrets, v) for v in value]
    if isinstance(value, dict):
        return {redact(k, secrets): redact_value(secrets, v) for k, v in value.items()}
    return value


def answer_of(returned: object, secrets: tuple[str, ...]
              ) -> tuple[Json, tuple[ContentPart, ...] | None] | Failure:
    """What a done run answers for what its program returned: its content
    parts (result None), or its JSON result (content None); a `value`
    failure when it is neither, naming what was wrong."""
    try:
        content = content_of(returned)
    except ContentError as exc:
        return Failure("value", f"the result's {exc.message}")
    if content is not None:
        return None, redact_content(secrets, content)
    try:
        result = orjson.loads(canonical_json(returned))
    except CanonicalError as exc:
        return Failure("value", f"the result has no JSON form: {exc.message}")
    return redact_value(secrets, result), None


def redact_content(secrets: tuple[str, ...],
                   content: tuple[ContentPart, ...]) -> tuple[ContentPart, ...]:
    """Content parts with every secret cut out of their text and URIs (the
    bytes of an image are the program's, and are kept as they are)."""
    if not secrets:
        return content
    return tuple(replace(part,
                         text=None if part.text is None else redact(part.text, secrets),
                         uri=None if part.uri is None else redact(part.uri, secrets))
                 for part in content)


def safe_to_resend(spec: ActionSpec, intent: Intent, now_ms: int) -> bool:
    """Whether an op in doubt may be sent again: a read always; a keyed
    request while the service still remembers its key."""
    if spec.resend == "always":
        return True
    fresh = now_ms - intent.time < RESEND_WINDOW_MS
    return spec.resend == "keyed" and intent.idempotency_key is not None and fresh


def timed(cap: str, perform: Callable[[str | None], Performed], key: str | None) -> Performed:
    """The action performed, its time counted for the metrics (the action
    alone: not its journal records), whether it succeeded or raised."""
    began = time.perf_counter_ns()
    try:
        return perform(key)
    finally:
        TIMINGS.action(cap, time.perf_counter_ns() - began)


def deliver(result: Any, failure: Failure | None) -> Any:
    if failure is not None:
        raise ActionFailed(failure.message, failure.kind)
    return result


def url_of(spec: ActionSpec) -> str | None:
    url = spec.args.get("url") if isinstance(spec.args, dict) else None
    return url if isinstance(url, str) else None


def print_to_stderr(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()
