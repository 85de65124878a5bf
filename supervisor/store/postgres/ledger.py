"""The PostgreSQL ledger (issue 15): the `Ledger` interface on a database
that several staal instances share; the schema is `pg_schema.py`'s.

Every event is a row committed, with synchronous_commit on, before the call
that wrote it returns, so it is as durable as the file ledger's fsync'd
line. Writers serialize on one row, `staal_head`, locked FOR UPDATE in
every writing transaction: the reserve's check of the tool's and the
caller's quotas and once key, and its insert, are one transaction no other
instance can interleave with, so quotas are exact across instances. The
same row holds the ledger's last time: a stamp is the later of this
instance's clock and that time, written back in the same transaction, so
ledger time never goes backwards across instances either.

Each instance keeps the ledger in memory as a `LedgerState`, the very code
the file ledger decides with, and before every decision or answer applies
the rows committed since it last looked, in `seq` order (taken under the
head lock, so seq order is commit order). Compaction bumps the head's
`generation`; an instance that sees a new one reads the ledger anew.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg.types.json import Jsonb

from staal.manifest.model import QuotaConfig
from staal.money import Money
from staal.records.ledger_records import Forget, Release, Reserve, Settle
from staal.runtime.clock import Clock
from staal.supervisor.recovery.lease import DEFAULT_LEASE, LeaseTiming
from staal.supervisor.store.entries import (
    Admission,
    Compaction,
    FilesKept,
    LedgerBug,
    OnceRequest,
    OverQuota,
    QuotaUse,
    Reserved,
    ReserveResult,
    RunEntry,
)
from staal.supervisor.store.errors import StoreError
from staal.supervisor.store.ledger import (
    EndsRuns,
    Stamper,
    Warn,
    check_held,
    checked_encoding,
    decide,
    new_reserve,
    quota_refusal,
    warn_on_stderr,
)
from staal.supervisor.store.postgres.connection import (
    ConnectionLost,
    check_settings,
    connect,
    one_row,
    reason,
    secrets_of,
    usable,
)
from staal.supervisor.store.postgres.events import apply_stored
from staal.supervisor.store.postgres.instances import register_instance
from staal.supervisor.store.postgres.schema import EVENTS_SINCE, ensure_schema, lock_key
from staal.supervisor.store.state import LedgerState

T = TypeVar("T")


class Fenced(StoreError):
    """A write by an instance that no longer owns the run, or whose fencing
    token is not its instance's current one: nothing was written."""

    kind = "fenced"


class PostgresLedger(EndsRuns):
    """The shared ledger; made by `open`. One connection, used by one
    thread at a time: calls of this instance wait for each other as on the
    file ledger, and for other instances' writes on the head row."""

    def __init__(self, dsn: str, conn: psycopg.Connection[Any], instance: str, fence: int,
                 clock: Clock, warn: Warn) -> None:
        self._dsn = dsn
        self._hide = secrets_of(dsn)
        self._conn: psycopg.Connection[Any] | None = conn
        self.instance = instance
        self.fence = fence
        self._stamper = Stamper(clock, warn, "in the PostgreSQL store")
        self._lock = threading.Lock()
        self._state = LedgerState()
        self._owners: dict[str, str] = {}
        self._seq = 0
        self._generation: int | None = None
        # Told of each forget an operator commits while this instance serves
        # (`staal-supervisor forget`), for its log: events past `_seen`,
        # the highest seq it ever applied (None: it has not read yet).
        self.on_forget: Callable[[RunEntry], None] | None = None
        self._seen: int | None = None

    @classmethod
    def open(cls, dsn: str, instance: str, clock: Clock, warn: Warn | None = None,
             lease: LeaseTiming = DEFAULT_LEASE) -> PostgresLedger:
        """Connect, create or upgrade the schema, and register `instance`
        with a new fencing token (a restart's token replaces the last one,
        so a process left over from before cannot write) and a lease of
        `lease`'s length."""
        conn = connect(dsn)
        try:
            with conn.transaction(), conn.cursor() as cur:
                check_settings(cur)
                ensure_schema(cur)
                fence = register_instance(cur, instance, clock.now_ms(), lease.lease_ms)
        except psycopg.Error as exc:
            conn.close()
            raise StoreError(f"the PostgreSQL store could not be prepared: "
                             f"{reason(exc, secrets_of(dsn))}") from None
        except BaseException:
            conn.close()
            raise
        ledger = cls(dsn, conn, instance, fence, clock, warn or warn_on_stderr)
        ledger.now_ms()
        return ledger

    # -- transactions ---------------------------------------------------------

    @contextmanager
    def _transaction(self, write: bool) -> Iterator[psycopg.Cursor[Any]]:
        """A transaction, caught up with the ledger; a writing one holds the
        head row until it commits. A database error is a `StoreError`
        (`ConnectionLost` if the connection broke), a constraint refusing a
        row a `LedgerBug`, all without the DSN."""
        try:
            conn = self._connection()
            with conn.transaction(), conn.cursor() as cur:
                self._catch_up(cur, write)
                yield cur
        except BaseException as exc:
            # The state may hold an event whose commit failed: read it anew.
            self._generation = None
            if isinstance(exc, psycopg.errors.IntegrityError):
                raise LedgerBug(f"the PostgreSQL store refused the event: "
                                f"{reason(exc, self._hide)}") from None
            if isinstance(exc, psycopg.Error):
                lost = self._conn is None or self._conn.broken or self._conn.closed
                raise (ConnectionLost if lost else StoreError)(
                    f"the PostgreSQL store failed: {reason(exc, self._hide)}") from None
            raise

    def _write(self, attempt: Callable[[psycopg.Cursor[Any]], T]) -> T:
        """`attempt` in a writing transaction; if the connection broke, once
        more on a new one, where `attempt` first looks whether its first try
        committed (a commit whose answer was lost), so nothing is written
        twice and a call is not failed for a connection a failover cut."""
        with self._lock:
            try:
                with self._transaction(write=True) as cur:
                    return attempt(cur)
            except ConnectionLost:
                with self._transaction(write=True) as cur:
                    return attempt(cur)

    def _connection(self) -> psycopg.Connection[Any]:
        self._conn = usable(self._conn, self._dsn)
        return self._conn

    def _catch_up(self, cur: psycopg.Cursor[Any], write: bool) -> None:
        """Apply the events committed since this instance last looked; after
        a compaction (a new generation), read the ledger anew."""
        lock = " FOR UPDATE" if write else ""
        cur.execute(f"SELECT last_ms, generation FROM staal_head{lock}")
        last_ms, generation = one_row(cur)
        if generation != self._generation:
            self._state, self._owners, self._seq = LedgerState(), {}, 0
            self._generation = generation
        cur.execute(EVENTS_SINCE, {"seq": self._seq})
        for seq, data, owner in cur.fetchall():
            event, entry = apply_stored(self._state, seq, data)
            if owner is not None:
                self._owners[entry.run] = owner
            if isinstance(event, Forget) and self._seen is not None and seq > self._seen \
                    and self.on_forget is not None:
                self.on_forget(entry)
            self._seq = seq
        self._seen = max(self._seen or 0, self._seq)
        self._state.last_ms = max(self._state.last_ms, last_ms)

    def _stamp(self, cur: psycopg.Cursor[Any]) -> int:
        now = self._stamper.stamp(self._state.last_ms)
        cur.execute("UPDATE staal_head SET last_ms = %s", (now,))
        return now

    # -- time -------------------------------------------------------------------

    def now_ms(self) -> int:
        return self._read(lambda: self._stamper.stamp(self._state.last_ms))

    # -- writing ----------------------------------------------------------------

    def reserve_call(self, tool: str, quota: QuotaConfig | None, calls: int,
                     money: tuple[Money, ...], once: OnceRequest | None,
                     admission: Admission | None = None) -> ReserveResult:
        """Check the once key and quotas and reserve, in one transaction
        holding the head row: no other instance decides in between."""
        check_held(calls, money, "money")
        tried: list[str] = []

        def attempt(cur: psycopg.Cursor[Any]) -> ReserveResult:
            if tried and (entry := self._state.run(tried[0])) is not None:
                return Reserved(entry.run, entry.reserved_ms, entry)  # the first try committed
            now = self._stamp(cur)
            result = decide(self._state, tool, quota, calls, money, once, admission, now)
            if result is not None:
                return result
            event = new_reserve(tool, now, calls, money, once, admission)
            tried[:] = [event.run]
            self._state.check(event)
            return Reserved(event.run, now, self._own(event, self._insert_reserve(cur, event)))

        return self._write(attempt)

    def _insert_reserve(self, cur: psycopg.Cursor[Any], event: Reserve) -> int:
        cur.execute(
            "INSERT INTO staal_runs (run, tool, reserved_ms, seq, event, owner, fence) "
            "VALUES (%s, %s, %s, nextval('staal_event_seq'), %s, %s, %s) RETURNING seq",
            (event.run, event.tool, event.time, Jsonb(checked_encoding(event)), self.instance,
             self.fence))
        seq = one_row(cur)[0]
        if event.once is not None:
            # The key's last holder no longer holds it (decide said so): the
            # row passes to this run. Two live holders break the primary key.
            cur.execute("DELETE FROM staal_once WHERE tool = %s AND key = %s",
                        (event.tool, event.once.key))
            cur.execute("INSERT INTO staal_once (tool, key, run) VALUES (%s, %s, %s)",
                        (event.tool, event.once.key, event.run))
        return int(seq)

    def _end(self, make: Callable[[int], Settle | Release]) -> RunEntry:
        tried: list[str] = []

        def attempt(cur: psycopg.Cursor[Any]) -> RunEntry:
            if tried and (entry := self._state.run(tried[0])) is not None and not entry.unsettled:
                return entry  # the first try committed: only this instance ends its runs
            event = make(self._stamp(cur))
            tried[:] = [event.run]
            self._state.check(event)
            # Only the run's owner, holding its instance's current fencing
            # token, may end it: a stale writer inserts nothing.
            cur.execute(
                "INSERT INTO staal_ends (run, kind, ended_ms, seq, event) "
                "SELECT %s, %s, %s, nextval('staal_event_seq'), %s FROM staal_runs r "
                "JOIN staal_instances i ON i.instance = r.owner "
                "WHERE r.run = %s AND r.owner = %s AND i.fence = %s RETURNING seq",
                (event.run, event.TYPE, event.time, Jsonb(checked_encoding(event)),
                 event.run, self.instance, self.fence))
            row = cur.fetchone()
            if row is None:
                raise Fenced(f"run {event.run} is not this instance's to {event.TYPE} "
                             f"(instance {self.instance}, fencing token {self.fence}): "
                             "another instance owns it now, or this one restarted")
            return self._own(event, int(row[0]))

        return self._write(attempt)

    def _own(self, event: Reserve | Settle | Release, seq: int) -> RunEntry:
        """Apply an event of this instance's own, inserted in the open
        transaction, to the state (if the commit fails, the state is read
        anew: `_transaction`)."""
        entry = self._state.apply(event)
        if isinstance(event, Reserve):
            self._owners[event.run] = self.instance
        # The transaction caught up under the head lock, so every event
        # before this one is applied already (seq may skip numbers a rolled
        # back transaction took).
        self._seq = seq
        return entry

    # -- reading ----------------------------------------------------------------

    def _read(self, query: Callable[[], T]) -> T:
        """`query` in a reading transaction; if the connection broke (the
        database restarted since this instance last used it), once more on
        a new one: a read changes nothing, so the retry is always safe and
        the first call after a restart is not failed for it."""
        # `query` reads self._state when called: catching up may replace it.
        with self._lock:
            try:
                with self._transaction(write=False):
                    return query()
            except ConnectionLost:
                with self._transaction(write=False):
                    return query()

    def run(self, run_id: str) -> RunEntry | None:
        return self._read(lambda: self._state.run(run_id))

    def runs(self) -> tuple[RunEntry, ...]:
        return self._read(lambda: self._state.runs())

    def once_holder(self, tool: str, key: str) -> RunEntry | None:
        return self._read(lambda: self._state.once_holder(
            tool, key, self._stamper.stamp(self._state.last_ms)))

    def unsettled(self) -> tuple[RunEntry, ...]:
        return self._read(lambda: self._state.unsettled())

    def renew_lease(self, lease_ms: int) -> bool:
        """Extend the lease while this process holds its instance's fencing
        token; False once another registered the same instance."""
        with self._lock, self._transaction(write=False) as cur:
            cur.execute("UPDATE staal_instances SET lease_until_ms = %s "
                        "WHERE instance = %s AND fence = %s RETURNING 1",
                        (self._stamper.stamp(self._state.last_ms) + lease_ms, self.instance,
                         self.fence))
            return cur.fetchone() is not None

    def mine(self) -> tuple[RunEntry, ...]:
        return self._read(lambda: tuple(e for e in self._state.runs()
                                        if self._owners.get(e.run) == self.instance))

    def mine_unsettled(self) -> tuple[RunEntry, ...]:
        """The owners of the unsettled runs are read again: a takeover moves
        a run without an event, so the events alone would keep naming a run
        taken over from this instance (or to it) as its last owner's."""
        with self._lock, self._transaction(write=False) as cur:
            unsettled = {e.run: e for e in self._state.unsettled()}
            if unsettled:
                cur.execute("SELECT run, owner FROM staal_runs WHERE run = ANY(%s)",
                            (list(unsettled),))
                self._owners.update({str(run): str(owner) for run, owner in cur.fetchall()})
            return tuple(e for run, e in unsettled.items() if self._owners.get(run) == self.instance)

    def quota_use(self, tool: str, quota: QuotaConfig, now: int | None = None) -> QuotaUse:
        def use() -> QuotaUse:
            at = self._stamper.stamp(self._state.last_ms) if now is None else now
            return self._state.quota_use(tool, quota, at)
        return self._read(use)

    def over_quota(self, tool: str, quota: QuotaConfig | None, calls: int,
                   money: tuple[Money, ...], admission: Admission | None = None) -> OverQuota | None:
        """Read in a transaction of its own that catches up without the head
        row's lock, so it waits for no writer: what it misses was committed
        after it read, and a missed reserve only lets the call on to
        `reserve_call`, which decides under the lock."""
        return self._read(lambda: quota_refusal(
            self._state, tool, quota, calls, money, admission,
            self._stamper.stamp(self._state.last_ms)))

    # -- compaction ---------------------------------------------------------------

    def compact(self, files_kept: FilesKept, windows: Mapping[str, int]) -> Compaction:
        """Delete the runs seed 000 section 6 no longer keeps, one instance
        at a time (an advisory lock), in one transaction. Another
        instance's runs are kept: their journal copies, kept arguments and
        logs are on its disk, and it compacts them itself."""
        with self._lock:
            with self._transaction(write=True) as cur:
                cur.execute(f"SELECT pg_advisory_xact_lock({lock_key('compact')})")
                now = self._stamper.stamp(self._state.last_ms)
                state = self._state
                keeps = {e.run: self._owners.get(e.run) != self.instance
                         or state.keeps(e, files_kept, windows, now) for e in state.runs()}
                kept = tuple(run for run, keep in keeps.items() if keep)
                dropped = tuple(run for run, keep in keeps.items() if not keep)
                if dropped:
                    cur.execute("DELETE FROM staal_runs WHERE run = ANY(%s)", (list(dropped),))
                    cur.execute("UPDATE staal_head SET generation = generation + 1")
            if dropped:
                self._generation = None
            return Compaction(kept, dropped)

    def close(self) -> None:
        """Give the lease up (status shows the instance stopped, not dead)
        and close the connection; a store out of reach lets the lease expire."""
        with self._lock:
            if self._conn is None:
                return
            try:
                if not self._conn.broken:
                    self._conn.execute("UPDATE staal_instances SET lease_until_ms = NULL "
                                       "WHERE instance = %s AND fence = %s",
                                       (self.instance, self.fence))
            except psycopg.Error:
                pass  # the lease runs out by itself
            finally:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> PostgresLedger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
