"""From a call's outcome to its tool result (seed 000 section 5, the outcome
table), shared by both revisions.

The application hands over plain data: one of the `CallOutcome` variants for
a tool call, or a `RunStatus` for staal_run_status. Every problem with running
a tool is a result with isError true, never a protocol error, so the model
sees it. Nothing here ever asks the client for input (no `input_required`):
an action in doubt waits for the operator, not for the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import orjson

from staal.manifest.model import RUN_STATUS_TOOL
from staal.protocol.errors import BadValue, NotAnOutcome
from staal.records.content import ContentPart
from staal.records.outcomes import ERROR_KINDS, FAILURE_KINDS
from staal.records.record import Json

MAX_RESULT = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Done:
    """The run ended done: a JSON `result`, or, when the program returned
    images, audio or embedded resources, its `content` parts (result None)."""

    run: str
    result: Json
    content: tuple[ContentPart, ...] | None = None


@dataclass(frozen=True, slots=True)
class Failed:
    """The run ended failed; `kind` is one of staal.records.outcomes.FAILURE_KINDS.
    `run` is None only for an internal error before the call started a run."""

    run: str | None
    kind: str
    message: str

    def __post_init__(self) -> None:
        if self.kind not in FAILURE_KINDS:
            raise BadValue(f"a failed run's kind is one of {', '.join(FAILURE_KINDS)}")
        if self.run is None and self.kind != "internal":
            raise BadValue("only an internal error can come before a run")


@dataclass(frozen=True, slots=True)
class Errored:
    """The run's config or inputs were refused when it was built (the
    outcome "error"; `kind` is "config" or "input")."""

    run: str | None
    kind: str
    message: str

    def __post_init__(self) -> None:
        if self.kind not in ERROR_KINDS:
            raise BadValue(f"an error's kind is one of {', '.join(ERROR_KINDS)}")


@dataclass(frozen=True, slots=True)
class Stopped:
    """The run stopped in doubt at operation `op` and waits for an operator."""

    run: str
    op: int
    message: str


RefusalKind = Literal["arguments", "busy", "quota", "once_conflict", "in_progress"]
REFUSAL_KINDS: tuple[str, ...] = get_args(RefusalKind)


@dataclass(frozen=True, slots=True)
class Refused:
    """A call answered without a run of its own: arguments refused, the server
    or tool busy, a quota used up, different arguments under a once key, or
    the key's run still in progress. The application writes the text."""

    kind: RefusalKind
    message: str

    def __post_init__(self) -> None:
        if self.kind not in REFUSAL_KINDS:
            raise BadValue(f"a refusal's kind is one of {', '.join(REFUSAL_KINDS)}")


RunStatusName = Literal["running", "done", "failed", "waiting_for_operator", "expired", "unknown"]
RUN_STATUSES: tuple[str, ...] = get_args(RunStatusName)


@dataclass(frozen=True, slots=True)
class RunStatus:
    """What staal_run_status answers for one run id: `result` for done,
    `kind` and `message` for failed, `op` (and what is in doubt, as
    `message`, if known) for waiting_for_operator."""

    run: str
    status: RunStatusName
    result: Json = None
    kind: str | None = None
    message: str | None = None
    op: int | None = None
    content: tuple[ContentPart, ...] | None = None

    def __post_init__(self) -> None:
        if self.status not in RUN_STATUSES:
            raise BadValue(f"a run status is one of {', '.join(RUN_STATUSES)}")
        if self.status == "failed" and (self.kind is None or self.message is None):
            raise BadValue("a failed run's status gives its kind and message")
        if self.status == "waiting_for_operator" and self.op is None:
            raise BadValue("a waiting run's status gives the operation in doubt")


CallOutcome = Done | Failed | Errored | Stopped | Refused | RunStatus


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A CallToolResult before a revision adds its own fields."""

    text: str
    is_error: bool
    structured: dict[str, Json] | None = None
    # The content items after `text` (a run status's result), or in place
    # of it when `text` is "" (a result of content parts, which has no text
    # of its own beyond its parts).
    items: tuple[dict[str, Json], ...] = ()

    def to_wire(self) -> dict[str, Json]:
        only_items = self.items and not self.text
        text: list[Json] = [] if only_items else [{"type": "text", "text": self.text}]
        wire: dict[str, Json] = {"content": [*text, *self.items]}
        if self.structured is not None:
            wire["structuredContent"] = self.structured
        wire["isError"] = self.is_error
        return wire


def shape_outcome(outcome: CallOutcome) -> ToolResult:
    """The tool result for `outcome`, row by row of seed 000 section 5."""
    if isinstance(outcome, Done):
        return _done(outcome)
    if isinstance(outcome, Failed):
        return ToolResult(_failure_text(outcome.run, outcome.kind, outcome.message), True)
    if isinstance(outcome, Errored):
        return ToolResult(f"{outcome.kind}: {outcome.message}", True)
    if isinstance(outcome, Stopped):
        return _stopped(outcome)
    if isinstance(outcome, Refused):
        return ToolResult(outcome.message, True)
    if isinstance(outcome, RunStatus):
        return shape_run_status(outcome)
    raise NotAnOutcome(f"not a call outcome: {type(outcome).__name__}")


def _done(outcome: Done) -> ToolResult:
    if outcome.content is not None:
        items = content_items(outcome.content)
        size = len(orjson.dumps(items))
        if size > MAX_RESULT:
            return ToolResult(too_large_text(outcome.run, size), True)
        return ToolResult("", False, items=items)
    encoded = orjson.dumps(outcome.result)
    if len(encoded) > MAX_RESULT:
        return ToolResult(too_large_text(outcome.run, len(encoded)), True)
    return ToolResult(encoded.decode(), False, {"result": outcome.result})


def content_items(content: tuple[ContentPart, ...]) -> tuple[dict[str, Json], ...]:
    """A result's parts as MCP content items (TextContent, ImageContent,
    AudioContent, EmbeddedResource), in order; both revisions write them alike."""
    return tuple(content_item(part) for part in content)


def content_item(part: ContentPart) -> dict[str, Json]:
    if part.type == "text":
        return {"type": "text", "text": part.text}
    if part.type in ("image", "audio"):
        return {"type": part.type, "data": part.data, "mimeType": part.mime_type}
    resource: dict[str, Json] = {"uri": part.uri}
    if part.mime_type is not None:
        resource["mimeType"] = part.mime_type
    if part.text is not None:
        resource["text"] = part.text
    else:
        resource["blob"] = part.data
    return {"type": "resource", "resource": resource}


def too_large_text(run: str, size: int) -> str:
    return (
        f"The result of run {run} is too large to send: its JSON is {size} bytes, over the "
        f"limit of {MAX_RESULT}. The run is done and its result is kept in its journal; "
        f"{RUN_STATUS_TOOL} and the operator can reach it under run id {run}."
    )


def _failure_text(run: str | None, kind: str, message: str) -> str:
    if kind == "capability":
        return message
    if kind == "internal":
        return internal_error_text(run)
    return f"{kind}: {message}"


def internal_error_text(run: str | None) -> str:
    if run is None:
        return ("An internal error happened in the server before this call started a run, "
                "so nothing ran. The details are in the server's log, for the operator.")
    return (
        f"An internal error happened in run {run}. The details are in the server's log, "
        "for the operator."
    )


def _stopped(outcome: Stopped) -> ToolResult:
    # The engine's message already names the op ("op 2 (...) may or may not
    # have happened: ..."), so it is quoted whole rather than wrapped in it.
    text = (
        f"Run {outcome.run} stopped and is waiting for an operator to settle it: "
        f"{outcome.message.rstrip('.')}. The action may already have happened: do not call "
        f"the tool again for it; follow run {outcome.run} with {RUN_STATUS_TOOL}."
    )
    return ToolResult(text, True, {"status": "waiting_for_operator", "run": outcome.run})


def shape_run_status(status: RunStatus) -> ToolResult:
    """staal_run_status's answer: structuredContent {"run", "status", ...}
    and the same as JSON text. An internal failure's details stay out."""
    structured: dict[str, Json] = {"run": status.run, "status": status.status}
    if status.status == "done" and status.content is not None:
        return _done_status(status.run, status.content, structured)
    if status.status == "done":
        structured["result"] = status.result
    elif status.status == "failed":
        assert status.kind is not None and status.message is not None
        message = internal_error_text(status.run) if status.kind == "internal" else status.message
        structured["failure"] = {"kind": status.kind, "message": message}
    elif status.status == "waiting_for_operator":
        structured["op"] = status.op
        if status.message is not None:
            structured["message"] = status.message
    return ToolResult(orjson.dumps(structured).decode(), False, structured)


def _done_status(run: str, content: tuple[ContentPart, ...],
                 structured: dict[str, Json]) -> ToolResult:
    """A done run whose result is content parts: its status, then the parts
    as they were answered (or, over the cap, why they are not)."""
    items = content_items(content)
    size = len(orjson.dumps(items))
    if size > MAX_RESULT:
        return ToolResult(orjson.dumps(structured).decode(), False, structured,
                          ({"type": "text", "text": too_large_text(run, size)},))
    return ToolResult(orjson.dumps(structured).decode(), False, structured, items)
