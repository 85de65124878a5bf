"""The two protocol revisions and how a request picks the one it is served
under (seed 000 section 3; DESIGN.md section 9, "The two versions").

A request whose params carry `_meta["io.modelcontextprotocol/protocolVersion"]`
is a 2026-07-28 request (or -32022 if it names another version); one without
it is a 2025-11-25 request once the connection has seen `initialize`, and is
refused with -32602 before that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from staal.protocol.mcp.jsonrpc import (
    INVALID_PARAMS,
    UNSUPPORTED_PROTOCOL_VERSION,
    RpcError,
    is_request_id,
)
from staal.records.record import Json
from staal.runtime.tracecontext import TraceParent, parse_traceparent, tracestate_of

LEGACY = "2025-11-25"
MODERN = "2026-07-28"
SUPPORTED_VERSIONS = (LEGACY, MODERN)
# The versions `initialize` can agree on: the handshake exists only in LEGACY.
HANDSHAKE_VERSIONS = (LEGACY,)

PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO_KEY = "io.modelcontextprotocol/clientInfo"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
PROGRESS_TOKEN_KEY = "progressToken"
# W3C Trace Context in `_meta` (and, over HTTP, in the headers of the same names).
TRACEPARENT_KEY = "traceparent"
TRACESTATE_KEY = "tracestate"
# What every 2026-07-28 request carries in params._meta (clientInfo: should).
ENVELOPE_KEYS = (PROTOCOL_VERSION_KEY, CLIENT_CAPABILITIES_KEY, CLIENT_INFO_KEY)

NOT_INITIALIZED = (
    "this request has no _meta protocol version and the connection has not been "
    "initialized: send initialize first (2025-11-25), or put "
    f"{PROTOCOL_VERSION_KEY}, {CLIENT_CAPABILITIES_KEY} and {CLIENT_INFO_KEY} in "
    "params._meta (2026-07-28)"
)


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """The server's name and version, as `initialize`, `server/discover` and
    every 2026-07-28 result give them."""

    name: str
    version: str

    def to_wire(self) -> dict[str, str]:
        return {"name": self.name, "version": self.version}


def meta_of(params: dict[str, Json]) -> dict[str, Json] | RpcError:
    """The request's `_meta`, an empty one when there is none."""
    meta = params.get("_meta")
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        return RpcError(INVALID_PARAMS, "params._meta must be an object")
    return meta


def select_revision(params: dict[str, Json], initialized: bool) -> str | RpcError:
    """The revision a request with these params is served under, or why it
    cannot be served at all."""
    meta = meta_of(params)
    if isinstance(meta, RpcError):
        return meta
    if PROTOCOL_VERSION_KEY not in meta:
        return LEGACY if initialized else RpcError(INVALID_PARAMS, NOT_INITIALIZED)
    return _check_envelope(meta)


def _check_envelope(meta: dict[str, Json]) -> str | RpcError:
    requested = meta[PROTOCOL_VERSION_KEY]
    if not isinstance(requested, str):
        return RpcError(INVALID_PARAMS, f"_meta {PROTOCOL_VERSION_KEY} must be a string")
    if requested != MODERN:
        return unsupported_version(requested)
    if not isinstance(meta.get(CLIENT_CAPABILITIES_KEY), dict):
        return RpcError(INVALID_PARAMS, f"_meta needs {CLIENT_CAPABILITIES_KEY} (an object)")
    # clientInfo is a SHOULD (2026-07-28, basic: "Per-request protocol
    # fields"): served without it, refused only when it is not one.
    if CLIENT_INFO_KEY in meta and not _is_implementation(meta[CLIENT_INFO_KEY]):
        return RpcError(
            INVALID_PARAMS, f"_meta {CLIENT_INFO_KEY} is an object with name and version"
        )
    return MODERN


# The versions a `_meta` envelope may name; 2025-11-25 is served after initialize.
ENVELOPE_VERSIONS = (MODERN,)


def unsupported_version(requested: str) -> RpcError:
    """An envelope naming a version this server does not serve in an envelope.
    `supported` lists only what an envelope may name (as the official SDK's
    own server does), never the version just refused."""
    return RpcError(
        UNSUPPORTED_PROTOCOL_VERSION,
        f"Unsupported protocol version in the _meta envelope: {requested!s:.40}; an envelope "
        f"may name {', '.join(ENVELOPE_VERSIONS)} (2025-11-25 is served after initialize)",
        {"supported": list(ENVELOPE_VERSIONS), "requested": requested},
    )


def _is_implementation(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("name"), str)
        and isinstance(value.get("version"), str)
    )


def progress_token_of(params: dict[str, Json]) -> str | int | RpcError | None:
    """The progress token the request asked for progress with, if any."""
    meta = meta_of(params)
    if isinstance(meta, RpcError):
        return meta
    token = meta.get(PROGRESS_TOKEN_KEY)
    if token is None or is_request_id(token):
        return token
    return RpcError(INVALID_PARAMS, "_meta progressToken must be a string or an integer")


def trace_of(params: dict[str, Json]) -> tuple[TraceParent | None, str | None]:
    """The client's trace context in `_meta` (`traceparent`, `tracestate`:
    the MCP convention, either revision). A malformed one is ignored, never
    refused: the call then starts a new trace."""
    meta = meta_of(params)
    if isinstance(meta, RpcError):
        return None, None
    parent = parse_traceparent(meta.get(TRACEPARENT_KEY))
    return parent, tracestate_of(meta.get(TRACESTATE_KEY)) if parent is not None else None


def negotiated_version(requested: Json) -> str:
    """What `initialize` answers: the version asked for if the handshake can
    agree on it, else the newest one it can."""
    return requested if requested in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1]
