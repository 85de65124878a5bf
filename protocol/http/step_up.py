"""Which scopes a refused request is told to get, sans I/O (issue 24 item 1;
RFC 6750 section 3, MCP 2025-11-25 "Scope challenge handling" and
2026-07-28 "Runtime insufficient scope errors").

A request is admitted when its principal holds every required scope
(`auth.required_scopes`) and some caller profile matches it (`callers`: by a
scope it holds, its client id or its subject). A 403 `insufficient_scope`
names in `scope` one set of scopes which, held, admits the request: the
scopes the credential already holds that this resource knows (so a client
that replaces its scopes with the challenge's keeps them) plus the fewest
more a matching profile needs. A client re-authorizes once for that set and
is admitted; it is never sent back for a scope it already holds.

A principal no scope could ever admit (it matches no profile by client id
or subject, and no profile is chosen by a scope) has no such set: None, and
the server refuses it without a challenge (supervisor/auth/guard.py says why).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from staal.manifest.model import WhenKey

__all__ = ["Asker", "When", "least_scopes", "step_up_scopes"]

# A caller profile's `when`: ("scope", S), ("client_id", C) or ("sub", S).
When = tuple[WhenKey, str]


@dataclass(frozen=True, slots=True)
class Asker:
    """What the rule reads of a principal: who it is and the scopes it holds."""

    subject: str
    client_id: str | None
    scopes: frozenset[str]


def _ordered(scopes: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(scopes))


def _needs(required: Sequence[str], when: When) -> tuple[str, ...]:
    """The scopes a token must hold for profile `when` to admit it, besides
    matching its client id or subject."""
    return _ordered([*required, when[1]]) if when[0] == "scope" else tuple(required)


def _could_match(when: When, asker: Asker | None) -> bool:
    """Whether the profile can admit this principal with some scopes: a
    profile chosen by scope can admit anyone; one chosen by client id or
    subject only that client or subject (None: any principal, unseen)."""
    key, wanted = when
    if key == "scope" or asker is None:
        return True
    return (asker.client_id if key == "client_id" else asker.subject) == wanted


def least_scopes(required: Sequence[str], whens: Sequence[When] | None) -> tuple[str, ...]:
    """What a 401 names (no credential, or one not valid here; and the
    verifier's own 403 `insufficient_scope`): the least any profile needs
    (the first such profile in `callers` order; the required scopes alone
    with no `callers`, or when some profile is chosen by client id or
    subject, which needs no scope to match). Never every scope the resource
    knows: a client asks for what it is told, and would be given the
    scopes of every profile at once."""
    options = [_needs(required, when) for when in whens or ()]
    return min(options, key=len, default=tuple(required))


def step_up_scopes(required: Sequence[str], whens: Sequence[When] | None,
                   known: Sequence[str], asker: Asker) -> tuple[str, ...] | None:
    """The scopes a 403 `insufficient_scope` names for `asker`: held, they
    admit it. The scopes it holds that this resource knows (`known`, its
    `scopes_supported`) stay; of the profiles that could admit it, the one
    needing the fewest scopes it does not hold yet (the first in `callers`
    order among equals) adds what it lacks. None when no scope could admit
    it: no profile could ever match it, or (a defect of the caller's rule,
    not of the token) it already holds all a matching profile needs."""
    options = [tuple(required)] if whens is None else \
        [_needs(required, when) for when in whens if _could_match(when, asker)]
    if not options:
        return None
    needed = min(options, key=lambda option: len(set(option) - asker.scopes))
    if set(needed) <= asker.scopes:
        return None
    # Every scope named is one the resource knows: named in its order.
    named = asker.scopes.intersection(known) | set(needed)
    return tuple(scope for scope in _ordered([*known, *needed]) if scope in named)
