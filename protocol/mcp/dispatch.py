"""What a request is answered with, whatever carried it: the revision it is
served under, the handler of that revision, and the answer (a result, an
error, or a tool call for the application to run). Shared by the stdio
connection (connection.py) and the Streamable HTTP endpoint (http.py), which
differ only in what they know of the client: a stdio stream remembers
whether it saw `initialize`; an HTTP request says its revision in a header.
Stateless and immutable: one serves every stream and request."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from staal.protocol.mcp.jsonrpc import INVALID_PARAMS, RequestId, RpcError
from staal.protocol.mcp.legacy import LegacyHandler
from staal.protocol.mcp.modern import DEFAULT_CACHE_SCOPE, DEFAULT_TTL_MS, CacheScope, ModernHandler
from staal.protocol.mcp.resources import (
    ReadAnswer,
    ReadResource,
    RecordIds,
    ResourceCatalogue,
    contents_result,
)
from staal.protocol.mcp.results import CallOutcome, shape_outcome
from staal.protocol.mcp.revisions import LEGACY, MODERN, ServerInfo, select_revision
from staal.protocol.mcp.tasks import (
    LEGACY_TASK_METHODS,
    MODERN_TASK_METHODS,
    TaskAnswer,
    TaskAsk,
    TaskRequest,
    TaskView,
    has_tasks_extension,
    legacy_answer,
    legacy_created,
    missing_extension,
    modern_answer,
    modern_task,
    read_task_request,
)
from staal.protocol.mcp.tools import CallRequest, ToolCatalogue, ToolDescriptor
from staal.protocol.prompts.catalogue import PromptCatalogue
from staal.protocol.prompts.completion import Completer
from staal.protocol.subscriptions.listen import LISTEN, Listen, read_listen
from staal.records.record import Json
from staal.runtime.tracecontext import TraceParent


@dataclass(frozen=True, slots=True)
class CallTool:
    """A tool call for the application to run; answer it with answer_call."""

    request_id: RequestId
    name: str
    arguments: dict[str, Json]
    revision: str
    progress_token: str | int | None = None
    # The client's trace context: `_meta.traceparent` (and `tracestate`),
    # or over HTTP the request's headers of those names.
    trace: TraceParent | None = None
    tracestate: str | None = None
    # The client asked for a task (protocol/mcp/tasks.py): answer with
    # created_result once the run is reserved, then answer nothing more.
    task: TaskAsk | None = None


@dataclass(frozen=True, slots=True)
class Result:
    """A request answered at once with this result."""

    result: dict[str, Json]


Answer = Result | RpcError | CallTool | ReadResource | TaskRequest | Listen
RESOURCE_METHODS = frozenset({"resources/list", "resources/templates/list", "resources/read"})
# What resources/list and resources/templates/list may be kept for: the runs
# among them are the caller's own, and a restarted server may list others.
LISTING_CACHE = (0, "private")
# protocol/prompts/: the operator's prompts and completions.
PROMPT_METHODS = frozenset({"prompts/list", "prompts/get"})
COMPLETE = "completion/complete"


class Dispatcher:
    def __init__(
        self,
        server_info: ServerInfo,
        tools: Iterable[ToolDescriptor],
        *,
        instructions: str | None = None,
        ttl_ms: int = DEFAULT_TTL_MS,
        cache_scope: CacheScope = DEFAULT_CACHE_SCOPE,
        resources: ResourceCatalogue | None = None,
        prompts: PromptCatalogue | None = None,
    ) -> None:
        catalogue = ToolCatalogue(tools)
        self.legacy = LegacyHandler(catalogue, server_info, instructions)
        self.modern = ModernHandler(catalogue, server_info, instructions, ttl_ms, cache_scope)
        self._handlers: dict[str, LegacyHandler | ModernHandler] = {
            LEGACY: self.legacy, MODERN: self.modern,
        }
        self.resources = resources
        self.prompts = prompts
        # Completions where there is something to complete: a prompt, or a
        # collection's record ids (a run's id is never suggested).
        completes = prompts is not None and (bool(prompts) or bool(resources and resources.collections))
        self.completer = Completer(prompts, resources) if prompts is not None and completes else None
        offered: dict[str, Json] = {}
        if resources is not None:
            offered["resources"] = {"subscribe": False, "listChanged": False}
        if prompts:
            offered["prompts"] = {"listChanged": False}
        if self.completer is not None:
            offered["completions"] = {}
        for handler in self._handlers.values():
            handler.capabilities = {**handler.capabilities, **offered}

    def initialize(self, params: dict[str, Json]) -> Result | RpcError:
        """initialize is answered at any time, with or without a `_meta`
        envelope, always as the 2025-11-25 handshake it belongs to."""
        result = self.legacy.initialize(params)
        return result if isinstance(result, RpcError) else Result(result)

    def request(self, request_id: RequestId, method: str, params: dict[str, Json],
                initialized: bool) -> Answer:
        """A request other than initialize: `initialized` is whether the
        client has spoken the 2025-11-25 handshake (a request without a
        `_meta` envelope is then served under that revision)."""
        revision = select_revision(params, initialized)
        if isinstance(revision, RpcError):
            return revision
        return self.in_revision(revision, request_id, method, params)

    def in_revision(self, revision: str, request_id: RequestId, method: str,
                    params: dict[str, Json]) -> Answer:
        if method in RESOURCE_METHODS and self.resources is not None:
            return self._resource(revision, request_id, method, params)
        if (method in PROMPT_METHODS and self.prompts) or (method == COMPLETE and self.completer):
            return self._offered(revision, request_id, method, params)
        if method in (LEGACY_TASK_METHODS if revision == LEGACY else MODERN_TASK_METHODS):
            if revision == MODERN and not has_tasks_extension(params):
                return missing_extension(method)
            return read_task_request(request_id, method, params, revision)
        if method == LISTEN and revision == MODERN:
            return read_listen(request_id, params)  # served by the application (a Listen)
        reply = self._handlers[revision].handle(method, params)
        if isinstance(reply, RpcError):
            return reply
        if isinstance(reply, CallRequest):
            return CallTool(request_id, reply.name, reply.arguments, revision, reply.progress_token,
                            reply.trace, reply.tracestate, reply.task)
        return Result(reply)

    def _resource(self, revision: str, request_id: RequestId, method: str,
                  params: dict[str, Json]) -> Result | RpcError | ReadResource:
        """resources/read is the application's to answer (read_result); the
        listings are fixed, and on one page."""
        assert self.resources is not None
        if method == "resources/read":
            ref = self.resources.reference(params.get("uri"))
            if isinstance(ref, RpcError):
                return ref
            return ReadResource(request_id, params["uri"], ref, revision)
        if params.get("cursor") is not None:
            return RpcError(INVALID_PARAMS, f"{method} lists everything on one page: there is "
                            "no cursor")
        if method == "resources/list":
            body = {"resources": self.resources.resources()}
        else:
            body = {"resourceTemplates": self.resources.templates()}
        return Result(self._handlers[revision].cached(body, *LISTING_CACHE))

    def _offered(self, revision: str, request_id: RequestId, method: str,
                 params: dict[str, Json]) -> Result | RpcError | ReadResource:
        """prompts/list, prompts/get and completion/complete; a completion
        from a collection is the application's to read (read_result)."""
        assert self.prompts is not None and self.completer is not None
        if method == "prompts/list":
            reply: dict[str, Json] | RpcError | RecordIds = self.prompts.listing(params)
        elif method == "prompts/get":
            reply = self.prompts.get(params)
        else:
            reply = self.completer.complete(params)
        if isinstance(reply, RecordIds):
            return ReadResource(request_id, f"the ids of {reply.segment}", reply, revision)
        if isinstance(reply, RpcError):
            return reply
        return Result(self._handlers[revision].cached(reply, *LISTING_CACHE))

    def read_result(self, read: ReadResource, answer: ReadAnswer) -> Result | RpcError:
        """The answer to a resources/read (or a completion from a
        collection), as its revision writes it."""
        if isinstance(answer, RpcError):
            return answer
        if isinstance(read.ref, RecordIds):
            return Result(self._handlers[read.revision].cached({"completion": answer.data},
                                                               *LISTING_CACHE))
        body = contents_result(read.uri, answer)
        return Result(self._handlers[read.revision].cached(body, answer.ttl_ms, answer.cache_scope))

    def call_result(self, call: CallTool, outcome: CallOutcome) -> dict[str, Json]:
        """The result a call is answered with, as its revision writes it."""
        return self._handlers[call.revision].call_result(shape_outcome(outcome))

    def created_result(self, call: CallTool, view: TaskView) -> dict[str, Json]:
        """The CreateTaskResult of a call answered as a task."""
        if call.revision == MODERN:
            return self.modern.created(modern_task(view))
        return legacy_created(view)

    def task_result(self, request: TaskRequest, answer: TaskAnswer) -> Result | RpcError:
        """A tasks/* request's answer, as its revision writes it."""
        if request.revision == MODERN:
            body = modern_answer(request, answer)
            return body if isinstance(body, RpcError) else Result(self.modern.task_answer(body))
        result = legacy_answer(request, answer)
        return result if isinstance(result, RpcError) else Result(result)

    def task_status(self, view: TaskView) -> dict[str, Json]:
        """The params of notifications/tasks/status."""
        return view.to_legacy()

    def progress(self, call: CallTool, message: str, value: int = 0) -> dict[str, Json] | None:
        """The params of a notifications/progress for a call: when its run
        starts (value 0), then as each of its actions begins (its op number,
        so the values only grow); None if it asked for no progress."""
        if call.progress_token is None:
            return None
        return self._handlers[call.revision].progress(call.progress_token, message, value)
