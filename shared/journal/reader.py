"""A run's journal: the one reader, used by both processes (DESIGN.md
section 5); journal_writer.py is the one writer.

The worker replays a journal; the supervisor recovers from it, gives up on
it after its workers died, answers a repeated call from it and reports its
status; `staal journal show` prints it. They all read it here, because two
readers that disagreed once turned an op in doubt into a failed run.

Reading checks more than each record's shape: the journal must tell one
coherent story (a header first, ops numbered in order, an outcome only for
an intent, nothing after the end). A journal that does not is damaged, and
the error names its line, because replaying a wrong story could repeat an
action.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from staal.errors import LogDamaged
from staal.journal.records import (
    JOURNAL,
    End,
    Header,
    Intent,
    OutcomeRecord,
    Print,
    Resolved,
    Stopped,
    Value,
)
from staal.money import Money
from staal.records.appendlog import read_log
from staal.records.fsio import FS
from staal.records.outcomes import Usage
from staal.records.record import Record


@dataclass(frozen=True)
class Attempt:
    """An earlier attempt at an op: its intent, and the operator's answer
    that it did not happen (after which the op was attempted again)."""

    intent: Intent
    resolved: Resolved


@dataclass
class OpEntry:
    """Everything the journal holds about one op: its current attempt, and
    the earlier ones an operator answered as not having happened."""

    op: int
    intent: Intent | None = None
    value: Value | None = None
    outcome: OutcomeRecord | None = None
    resolved: Resolved | None = None
    earlier: list[Attempt] = field(default_factory=list)

    @property
    def attempts(self) -> int:
        """Intents written for it: one more after each "did not happen"."""
        return len(self.earlier) + 1

    @property
    def settled(self) -> bool:
        """Whether what happened is known: recorded, or answered by an operator."""
        if self.value is not None or self.outcome is not None:
            return True
        return self.resolved is not None and self.resolved.happened

    @property
    def is_unanswered_read(self) -> bool:
        return (self.intent is not None and self.intent.read and self.outcome is None
                and self.resolved is None)

    @property
    def in_doubt(self) -> bool:
        """Attempted, with no outcome and no operator's answer, and not safe
        to send again (a read is sent again instead)."""
        return (self.intent is not None and self.outcome is None and self.resolved is None
                and not self.intent.read)

    @property
    def param(self) -> str | None:
        """The capability parameter it went through (None for a value
        journaled before values named theirs)."""
        if self.intent is not None:
            return self.intent.param
        return self.value.param if self.value is not None else None

    @property
    def charged(self) -> tuple[Money, ...]:
        """The money it charged: its outcome's, or what the operator's "it
        happened" answer implies."""
        if self.outcome is not None:
            return self.outcome.charged
        if self.resolved is not None and self.resolved.happened:
            return self.resolved.charged
        return ()


@dataclass
class JournalState:
    path: Path
    header: Header
    ops: dict[int, OpEntry] = field(default_factory=dict)
    prints: int = 0
    # The last stop, unless the run went on past it (an op was attempted
    # again) or an operator answered the op it stopped at.
    stopped: Stopped | None = None
    end: End | None = None
    # Every record after the header, in order: the whole history, for an audit.
    history: list[Record] = field(default_factory=list)

    @property
    def records(self) -> int:
        return len(self.history) + 1

    @property
    def last_op(self) -> int:
        return max(self.ops, default=0)

    def in_doubt(self) -> list[int]:
        return [op for op, entry in sorted(self.ops.items()) if entry.in_doubt]

    def usage(self, params: Iterable[str] = ()) -> dict[str, Usage]:
        """Per capability parameter (each of `params`, and any the journal
        names): the actions attempted and the money charged, as a run that
        ended now would report them (seed 000 section 6). Each op counts
        once, however many attempts it took."""
        actions: dict[str, int] = {name: 0 for name in params}
        charged: dict[str, dict[str, Money]] = {}
        for entry in self.ops.values():
            if entry.param is None:
                continue
            root = entry.param.split(".")[0]  # a composite's lower grants count as it
            actions[root] = actions.get(root, 0) + 1
            totals = charged.setdefault(root, {})
            for money in entry.charged:
                totals[money.currency] = totals.get(money.currency, Money.zero(money.currency)) + money
        return {
            name: Usage(actions=count, charged=tuple(
                charged.get(name, {})[c] for c in sorted(charged.get(name, {}))))
            for name, count in actions.items()
        }


def journal_started(path: str | Path) -> bool:
    """Whether the run of the journal at `path` ever started: its first line,
    the header, is complete (seed 000 section 7, step 3). A file with no
    complete line is a journal cut during its creation: there is no journal
    and the run never started. A first line that is not a header is damage,
    reported when the journal is read."""
    try:
        return bool(read_log(path).records)
    except FileNotFoundError:
        return False


def discard_unstarted(path: str | Path) -> bool:
    """Remove a journal file whose run never started (no complete first
    line), so the run can begin afresh or its reservation be released;
    whether there was one."""
    path = Path(path)
    if not path.exists() or journal_started(path):
        return False
    FS.unlink(path)
    FS.sync_dir(path.parent)
    return True


def read_journal(path: str | Path) -> JournalState:
    """The journal at `path` as a story; `LogDamaged` names the line of any
    record that does not fit it. A torn last line is left out."""
    path = Path(path)
    return journal_of(read_log(path, decode=JOURNAL.decode).records, path)


def journal_of(records: Sequence[Record], where: str | Path) -> JournalState:
    """Records read elsewhere (a file, or a store's rows in line order) as a
    story, told by the same rules; `where` names them in a `LogDamaged`."""
    if not records:
        raise LogDamaged(str(where), 1, "the first record of a journal is its header")
    header = records[0]
    if not isinstance(header, Header):
        raise LogDamaged(str(Path(where)), 1, "the first record of a journal is its header")
    builder = _Builder(JournalState(Path(where), header))
    for number, record in enumerate(records[1:], start=2):
        builder.add(number, record)
    return builder.state


class _Builder:
    """Tells the records after a journal's header as its story (`state`)."""

    def __init__(self, state: JournalState) -> None:
        self.state = state

    def damaged(self, line: int, reason: str) -> LogDamaged:
        return LogDamaged(str(self.state.path), line, reason)

    def add(self, line: int, record: Record) -> None:
        if self.state.end is not None:
            raise self.damaged(line, "a record after the journal's end")
        match record:
            case Header():
                self._header(line, record)
            case Intent() | Value():
                self._new_op(line, record)
            case OutcomeRecord():
                self._outcome(line, record)
            case Resolved():
                self._resolved(line, record)
            case Print():
                self._print(line, record)
            case Stopped():
                self._stopped(line, record)
            case End():
                self._end(line, record)
            case _:
                raise KeyError(type(record))
        self.state.history.append(record)

    def _header(self, line: int, record: Header) -> None:
        raise self.damaged(line, "a second header")

    def _new_op(self, line: int, record: Intent | Value) -> None:
        state = self.state
        earlier = self._retried(record)
        if earlier is not None and isinstance(record, Intent):
            # An op resolved as not having happened, attempted again: in doubt
            # once more until its outcome, and an operator may answer again.
            entry = state.ops[record.op]
            entry.earlier.append(earlier)
            entry.intent, entry.resolved = record, None
            state.stopped = None
            return
        if record.op != state.last_op + 1:
            raise self.damaged(line, f"op {record.op} follows op {state.last_op}")
        unsettled = [op for op, e in state.ops.items() if not e.settled]
        if unsettled:
            raise self.damaged(line, f"op {record.op} begins while op {unsettled[0]} is unsettled")
        entry = OpEntry(record.op)
        if isinstance(record, Intent):
            entry.intent = record
        else:
            entry.value = record
        state.ops[record.op] = entry
        state.stopped = None

    def _retried(self, record: Intent | Value) -> Attempt | None:
        """The attempt `record` makes again, if it is one: an intent for the
        last op, resolved as not having happened, with the same action."""
        entry = self.state.ops.get(record.op)
        if not isinstance(record, Intent) or entry is None or entry.intent is None:
            return None
        before, resolved = entry.intent, entry.resolved
        if (record.op == self.state.last_op and entry.outcome is None
                and resolved is not None and not resolved.happened
                and (record.param, record.cap, record.action, record.args_sha256)
                == (before.param, before.cap, before.action, before.args_sha256)):
            return Attempt(before, resolved)
        return None

    def _outcome(self, line: int, record: OutcomeRecord) -> None:
        entry = self.state.ops.get(record.op)
        if entry is None or entry.intent is None:
            raise self.damaged(line, f"an outcome for op {record.op}, which has no intent")
        if entry.outcome is not None:
            raise self.damaged(line, f"a second outcome for op {record.op}")
        if entry.resolved is not None and entry.resolved.happened:
            raise self.damaged(line, f"an outcome for op {record.op}, resolved as having happened")
        entry.outcome = record
        self.state.stopped = None

    def _resolved(self, line: int, record: Resolved) -> None:
        entry = self.state.ops.get(record.op)
        if entry is None or not entry.in_doubt:
            raise self.damaged(line, f"a resolution for op {record.op}, which is not in doubt")
        entry.resolved = record
        if self.state.stopped is not None and self.state.stopped.op == record.op:
            self.state.stopped = None  # answered: the run goes on at its next resume

    def _print(self, line: int, record: Print) -> None:
        if record.seq != self.state.prints + 1:
            raise self.damaged(line, f"print {record.seq} follows print {self.state.prints}")
        self.state.prints = record.seq

    def _stopped(self, line: int, record: Stopped) -> None:
        if record.op > self.state.last_op + 1:
            raise self.damaged(line, f"a stop at op {record.op}, after the last op")
        self.state.stopped = record

    def _end(self, line: int, record: End) -> None:
        # A read with no outcome is the one unsettled op a run may end with:
        # it changed nothing, and what it read is not needed any more.
        if any(not e.settled and not e.is_unanswered_read for e in self.state.ops.values()):
            raise self.damaged(line, "an end while an op is unsettled")
        self.state.end = record
