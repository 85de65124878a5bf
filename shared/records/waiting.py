"""A run's waiting record (seed 000 section 7, DESIGN.md 9), and the resolve
command an operator answers an op in doubt with: the one writer and the one
reader, for both stores and both processes.

A run that stopped at an op in doubt waits for an operator. Its record says
which run, tool and op, the stop's message, when, and the exact command
that answers it. On the file store it is `<journals>/waiting/<run>.json`
and names the run's journal, since `staal resolve --journal` answers it on
that machine; on the shared store it is a row (and a copy for the notify
command) naming the instance that wrote it, since `staal-supervisor
resolve` answers it from any machine with the DSN. The JSON is the same
in both: a file, and a row's `record` column.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from staal.errors import RecordError
from staal.records.record import OpNumber, RunId, TimeMs, decode_plain, encode_plain

_ANSWER = "--happened yes --result JSON   (or: --happened no)"


def resolve_on_this_machine(journal: str | Path, op: int | None) -> str:
    """The answer on the file store: on the machine that holds the journal
    (None: the op is not known, and the operator reads it in the journal)."""
    return f"staal resolve --journal {journal} --op {_op(op)} {_ANSWER}"


def resolve_in_the_store(run: str, op: int | None) -> str:
    """The answer on a shared store, from any machine with the DSN."""
    return f"staal-supervisor resolve MANIFEST --run {run} --op {_op(op)} {_ANSWER}"


def _op(op: int | None) -> str:
    return "N" if op is None else str(op)


@dataclass(frozen=True, slots=True)
class WaitingRecord:
    # The fields in the order the JSON has always had them.
    run: RunId
    tool: str
    op: OpNumber
    # The stop's message, as the run's journal holds it.
    message: str
    # The file store's: the run's journal, on this machine.
    journal: str | None = field(default=None, kw_only=True)
    # The shared store's: the instance that wrote the record.
    instance: str | None = field(default=None, kw_only=True)
    time: TimeMs
    # The command that answers the op (`resolve_on_this_machine` or
    # `resolve_in_the_store`), exactly as an operator runs it.
    resolve: str

    @classmethod
    def in_files(cls, run: str, tool: str, op: int, message: str, time: int,
                 journal: Path) -> WaitingRecord:
        return cls(run, tool, op, message, time, resolve_on_this_machine(journal, op),
                   journal=str(journal))

    @classmethod
    def in_store(cls, run: str, tool: str, op: int, message: str, time: int,
                 instance: str) -> WaitingRecord:
        # No path of this host: the record is read, and answered, from any machine.
        return cls(run, tool, op, message, time, resolve_in_the_store(run, op),
                   instance=instance)

    def moved_to_store(self, instance: str) -> WaitingRecord:
        """A record an earlier version kept only as a file, as the shared
        store keeps it: as first written, naming its instance and the
        store's resolve command instead of its journal."""
        return dataclasses.replace(self, journal=None, instance=instance,
                                   resolve=resolve_in_the_store(self.run, self.op))

    def to_json(self) -> dict[str, Any]:
        """The record as the store's row holds it."""
        return encode_plain(self)

    @classmethod
    def from_json(cls, data: Any) -> WaitingRecord:
        """`RecordError` names the field of a record that is not one."""
        return decode_plain(cls, data)

    def to_file(self) -> bytes:
        """The record as its file holds it, for people and the notify command."""
        return orjson.dumps(self.to_json(), option=orjson.OPT_INDENT_2)

    @classmethod
    def from_file(cls, data: bytes) -> WaitingRecord:
        """`RecordError` for a file that holds no waiting record (damaged)."""
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise RecordError(f"a waiting record is JSON: {exc}") from None
        return cls.from_json(parsed)
