"""What of a run's journal each audience may see: one table over every
journal record kind and every field, written once as data.

The audiences:
- `OPERATOR`: the operator's console (supervisor/views/timeline.py), a web
  page anyone who reaches its port reads;
- `CALLER`: the caller's runs resources (supervisor/views/journal_view.py),
  answered to the MCP client that made the call;
- `JOURNAL_SHOW`: `staal journal show` (worker/commands/journal_show.py),
  run on the server's machine by someone who can read the journal file
  itself, so it withholds nothing the file holds.

Withheld from the operator's console and the caller (seed 000 section 8:
messages never hold a secret, and a client is never shown argument
values): argument values (the journal holds only their SHA-256), action
results and journaled clock or random values (the caller sees their
SHA-256), an action's failure message (it may quote its URL or a service's
answer, which may hold an argument: its kind alone is shown), and the
server's own file paths. A program's prints go to the operator (the
server's stderr carries them too), never to the caller; an internal
failure reads to the caller as the text its call was answered with; a
done run's result (its JSON, or its content parts) is the caller's own, and
left off the console's page.

Each view picks from what its row allows what it displays, and asks the
row first: a record kind or field with no row is an error, never a record
silently left out (tests/shared/journal/test_disclosure.py holds every
kind and field of `JOURNAL` to a row).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal

from staal.errors import StaalError
from staal.journal.records import (
    End,
    Header,
    Intent,
    OutcomeRecord,
    Print,
    Resolved,
    Stopped,
    Value,
)
from staal.records.record import Record

Audience = Literal["operator", "caller", "journal_show"]
OPERATOR: Audience = "operator"
CALLER: Audience = "caller"
JOURNAL_SHOW: Audience = "journal_show"
AUDIENCES: tuple[Audience, ...] = (OPERATOR, CALLER, JOURNAL_SHOW)

# How an audience sees a field:
# - "shown": as it is;
# - "sha256": its SHA-256 alone (of its canonical JSON);
# - "kind": a failure's kind alone, never its message;
# - "answer": a failure's kind and message, an internal failure's message
#   being the text the call was answered with; never the program's frames;
# - "withheld": nothing of it.
Shown = Literal["shown", "sha256", "kind", "answer", "withheld"]

_ALL: tuple[Shown, Shown, Shown] = ("shown", "shown", "shown")
_W: Shown = "withheld"

# kind -> field -> (operator's console, caller's resources, staal journal show)
_TABLE: dict[type[Record], dict[str, tuple[Shown, Shown, Shown]]] = {
    Header: {"run": _ALL, "tool": _ALL, "program": (_W, _W, "shown"), "program_sha256": _ALL,
             "config_sha256": _ALL, "inputs_sha256": _ALL, "runtime": _ALL, "time": _ALL,
             "config": (_W, _W, "shown")},
    Intent: {"op": _ALL, "param": _ALL, "cap": _ALL, "action": _ALL, "args_sha256": _ALL,
             "time": _ALL, "idempotency_key": _ALL, "read": _ALL},
    OutcomeRecord: {"op": _ALL, "ok": _ALL, "time": _ALL, "result": (_W, "sha256", "shown"),
                    "failure": ("kind", "kind", "shown"), "charged": _ALL},
    Print: {"seq": _ALL, "text": ("shown", _W, "shown"), "time": _ALL},
    Value: {"op": _ALL, "cap": _ALL, "value": (_W, "sha256", "shown"), "time": _ALL,
            "param": _ALL},
    Stopped: {"op": _ALL, "message": _ALL, "time": _ALL},
    Resolved: {"op": _ALL, "happened": _ALL, "time": _ALL, "result": (_W, "sha256", "shown"),
               "charged": _ALL},
    End: {"outcome": _ALL, "time": _ALL, "result": (_W, "shown", "shown"),
          "failure": ("shown", "answer", "shown"), "usage": _ALL,
          "content": (_W, "shown", "shown")},
}

DISCLOSURE: Mapping[type[Record], Mapping[Audience, Mapping[str, Shown]]] = MappingProxyType({
    kind: MappingProxyType({
        audience: MappingProxyType({name: seen[i] for name, seen in fields.items()})
        for i, audience in enumerate(AUDIENCES)})
    for kind, fields in _TABLE.items()})


class NoDisclosureRule(StaalError):
    """A journal record kind, or a field of one, that the table has no row
    for: a view stops here rather than show it, or leave it out, unruled."""

    kind = "no_disclosure_rule"


def row(record: Record, audience: Audience) -> Mapping[str, Shown]:
    """How `audience` sees each field of `record`."""
    rows = DISCLOSURE.get(type(record))
    if rows is None:
        raise NoDisclosureRule(f"no disclosure rule for journal records of kind "
                               f"{type(record).__name__}")
    return rows[audience]


def shown_as(record: Record, name: str, audience: Audience) -> Shown:
    found = row(record, audience).get(name)
    if found is None:
        raise NoDisclosureRule(f"no disclosure rule for the field {name} of "
                               f"{type(record).__name__} records")
    return found


def may_see(record: Record, name: str, audience: Audience) -> bool:
    """Whether `audience` sees anything of the field."""
    return shown_as(record, name, audience) != "withheld"


def shown(record: Record, name: str, audience: Audience) -> Any:
    """The field's value, for an audience that sees it as it is."""
    if shown_as(record, name, audience) != "shown":
        raise NoDisclosureRule(f"{audience} is not shown the {name} of "
                               f"{type(record).__name__} records as it is")
    return getattr(record, name)
