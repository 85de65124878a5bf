"""The PostgreSQL ledger (issues 15 and 27): the `Ledger` interface on a
database that several staal instances share; the schema is `schema.py`'s.

Every event is a row committed, with synchronous_commit on, before the call
that wrote it returns, so it is as durable as the file ledger's fsync'd
line. No instance keeps the ledger: each answer is an indexed query, and
each reserve decides in a transaction holding only the keys it decides on
(supervisor/store/postgres/decisions.py says which, and how time is kept).
A run's end locks only its row, if this instance owns it under its token.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, TypeVar

import psycopg
from psycopg.types.json import Jsonb

from staal.manifest.model import QuotaConfig
from staal.money import Money
from staal.records.ledger_records import Release, Reserve, Settle
from staal.runtime.clock import Clock
from staal.supervisor.recovery.lease import DEFAULT_LEASE, LeaseTiming
from staal.supervisor.store.caller_runs import CallerRuns
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
    window_use,
)
from staal.supervisor.store.errors import StoreError
from staal.supervisor.store.ledger import (
    EndsRuns,
    Stamper,
    Warn,
    check_held,
    checked_encoding,
    new_reserve,
    once_found,
    quota_refusal,
    warn_on_stderr,
)
from staal.supervisor.store.postgres.connection import (
    ConnectionLost,
    Pool,
    check_settings,
    connect,
    one_row,
    reason,
    secrets_of,
)
from staal.supervisor.store.postgres.decisions import (
    SqlWindows,
    decision_keys,
    latest,
    latest_of,
    lock_keys,
    money_map,
    once_holder,
)
from staal.supervisor.store.postgres.events import caller_page, entries_where, entry_where_run
from staal.supervisor.store.postgres.instances import register_instance
from staal.supervisor.store.postgres.ledger_sql import END, RESERVE, START, WHY_NOT
from staal.supervisor.store.postgres.schema import ensure_schema, lock_key
from staal.supervisor.store.state import LedgerState, decode_event, entry_of

T = TypeVar("T")

class Fenced(StoreError):
    """A write by an instance that no longer owns the run, or whose fencing
    token is not its instance's current one: nothing was written."""

    kind = "fenced"


class PostgresLedger(EndsRuns):
    """The shared ledger; made by `open`. Calls of this instance run side by
    side on a pool of connections, and wait for each other's (and other
    instances') only on the keys they share."""

    def __init__(self, dsn: str, conn: psycopg.Connection[Any], instance: str, fence: int,
                 clock: Clock, warn: Warn) -> None:
        self._pool = Pool(dsn, conn)
        self._hide = secrets_of(dsn)
        self.instance = instance
        self.fence = fence
        self._stamper = Stamper(clock, warn, "in the PostgreSQL store")
        self._lock = threading.Lock()  # guards the time and the forgets seen
        self._last = 0  # the latest time this instance stamped or read
        # Told of each forget an operator commits while this instance serves
        # (`staal-supervisor forget`), for its log: forgets past `_forgets`,
        # the last one's seq (forgets commit one at a time, in seq order).
        self.on_forget: Callable[[RunEntry], None] | None = None
        self._forgets = 0

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
                cur.execute(START)
                last, forgets = one_row(cur)
        except psycopg.Error as exc:
            conn.close()
            raise StoreError(f"the PostgreSQL store could not be prepared: "
                             f"{reason(exc, secrets_of(dsn))}") from None
        except BaseException:
            conn.close()
            raise
        ledger = cls(dsn, conn, instance, fence, clock, warn or warn_on_stderr)
        ledger._forgets = int(forgets)
        ledger._stamped(int(last))  # a clock behind the ledger is reported at once
        return ledger

    # -- transactions ---------------------------------------------------------

    @contextmanager
    def _session(self, atomic: bool) -> Iterator[psycopg.Cursor[Any]]:
        """A cursor in a transaction (`atomic`), or whose every statement is
        one. A database error is a `StoreError` (`ConnectionLost` if the
        connection broke), a constraint refusing a row a `LedgerBug`, all
        without the DSN."""
        with self._pool.connection() as conn:
            try:
                if atomic:
                    with conn.transaction(), conn.cursor() as cur:
                        yield cur
                else:
                    with conn.cursor() as cur:
                        yield cur
            except psycopg.errors.IntegrityError as exc:
                raise LedgerBug(f"the PostgreSQL store refused the event: "
                                f"{reason(exc, self._hide)}") from None
            except psycopg.Error as exc:
                raise (ConnectionLost if conn.broken or conn.closed else StoreError)(
                    f"the PostgreSQL store failed: {reason(exc, self._hide)}") from None

    def _do(self, attempt: Callable[[psycopg.Cursor[Any], bool], T], atomic: bool = False) -> T:
        """`attempt`; if the connection broke, once more on a new one, told
        so (`again`): a write first looks whether its first try committed (a
        commit whose answer was lost), so nothing is written twice and a
        call is not failed for a connection a failover or restart cut."""
        try:
            with self._session(atomic) as cur:
                return attempt(cur, False)
        except ConnectionLost:
            with self._session(atomic) as cur:
                return attempt(cur, True)

    @property
    def _conn(self) -> psycopg.Connection[Any] | None:
        """The connection used last (tests look at its session)."""
        return self._pool.last

    # -- time -------------------------------------------------------------------

    def _stamped(self, ledger_ms: int) -> int:
        """Ledger time given the ledger's latest at `ledger_ms`: the later of
        it, this instance's last, and the clock (a clock behind warned of)."""
        with self._lock:
            now = self._stamper.stamp(max(self._last, ledger_ms))
            self._last = now
            return now

    def now_ms(self) -> int:
        return self._stamped(0)

    # -- writing ----------------------------------------------------------------

    def reserve_call(self, tool: str, quota: QuotaConfig | None, calls: int,
                     money: tuple[Money, ...], once: OnceRequest | None,
                     admission: Admission | None = None) -> ReserveResult:
        """Check the once key and quotas and reserve, in one transaction
        holding the keys it decides on; with none, one statement."""
        check_held(calls, money, "money")
        keys = decision_keys(tool, quota, once, admission)
        made: list[Reserve] = []
        caller = admission.caller if admission is not None else None

        def attempt(cur: psycopg.Cursor[Any], again: bool) -> ReserveResult:
            if again and made and (entry := entry_where_run(cur, made[0].run)) is not None:
                return Reserved(entry.run, entry.reserved_ms, entry)  # the first try committed
            if not keys:
                return self._insert(cur, made, new_reserve(
                    tool, self._stamped(0), calls, money, None, admission), caller)
            lock_keys(cur, keys)
            now = self._stamped(latest(cur, tool, caller))
            if once is not None:
                holder = self._holder(cur, tool, once.key)
                now = self._stamped(now if holder is None else latest_of(holder))
                found = once_found(holder if holder and holder.holds_key(now) else None, once)
                if found is not None:
                    return found
            refused = quota_refusal(SqlWindows(cur), tool, quota, calls, money, admission, now)
            if refused is not None:
                return refused
            return self._insert(cur, made, new_reserve(tool, now, calls, money, once, admission),
                                caller)

        return self._do(attempt, atomic=bool(keys))

    def _insert(self, cur: psycopg.Cursor[Any], made: list[Reserve], event: Reserve,
                caller: str | None) -> Reserved:
        made[:] = [event]
        cur.execute(RESERVE, {"run": event.run, "tool": event.tool, "caller": caller,
                               "event": Jsonb(checked_encoding(event)), "me": self.instance,
                               "fence": self.fence, "now": event.time, "calls": event.calls,
                               "money": Jsonb(money_map(event))})
        time = int(one_row(cur)[0])
        if time != event.time:  # a later reserve of its tool: stamped with that time
            event = replace(event, time=self._stamped(time))
        if event.once is not None:
            # The key's last holder no longer holds it (the reserve said so):
            # its row passes to this run.
            cur.execute("INSERT INTO staal_once (tool, key, run) VALUES (%s, %s, %s) "
                        "ON CONFLICT (tool, key) DO UPDATE SET run = EXCLUDED.run",
                        (event.tool, event.once.key, event.run))
        return Reserved(event.run, event.time, entry_of(event))

    def _end(self, make: Callable[[int], Settle | Release]) -> RunEntry:
        ended: list[Settle | Release] = []

        def attempt(cur: psycopg.Cursor[Any], again: bool) -> RunEntry:
            if again and ended and (entry := entry_where_run(cur, ended[0].run)) is not None \
                    and not entry.unsettled:
                return entry  # the first try committed: only this instance ends its runs
            event = make(self._stamped(0))
            ended[:] = [event]
            params = {"run": event.run, "me": self.instance, "fence": self.fence}
            cur.execute(END, {**params, "kind": event.TYPE, "now": event.time,
                               "event": Jsonb(checked_encoding(event)),
                               "money": Jsonb(money_map(event))})
            row = cur.fetchone()
            if row is None:
                raise self._not_ended(cur, event, params)
            reserve = decode_event(row[1])
            assert isinstance(reserve, Reserve)  # staal_runs holds reserves: the schema's check
            return entry_of(reserve, replace(event, time=self._stamped(int(row[0]))))

        return self._do(attempt)

    def _not_ended(self, cur: psycopg.Cursor[Any], event: Settle | Release,
                   params: dict[str, Any]) -> StoreError | LedgerBug:
        cur.execute(WHY_NOT, params)
        row = cur.fetchone()
        if row is None:
            return LedgerBug(f"a {event.TYPE} for run {event.run}, which has no reserve")
        if row[0] is not None:
            return LedgerBug(f"a {event.TYPE} for run {event.run}, which was already "
                             f"{'settled' if row[0] == 'settle' else 'released'}")
        return Fenced(f"run {event.run} is not this instance's to {event.TYPE} "
                      f"(instance {self.instance}, fencing token {self.fence}): "
                      "another instance owns it now, or this one restarted")

    # -- reading ----------------------------------------------------------------

    def _read(self, query: Callable[[psycopg.Cursor[Any]], T]) -> T:
        """`query`, retried as `_do` does (a read changes nothing)."""
        return self._do(lambda cur, again: query(cur))

    def run(self, run_id: str) -> RunEntry | None:
        return self._read(lambda cur: entry_where_run(cur, run_id))

    def runs(self) -> tuple[RunEntry, ...]:
        return self._read(lambda cur: tuple(entries_where(cur, "true", {})))

    def unsettled(self) -> tuple[RunEntry, ...]:
        return self._read(lambda cur: tuple(entries_where(cur, "NOT r.ended", {})))

    def caller_runs(self, which: CallerRuns) -> tuple[RunEntry, ...]:
        """The page alone, by index, in one transaction."""
        return self._do(lambda cur, again: tuple(caller_page(cur, which)), atomic=True)

    def mine(self) -> tuple[RunEntry, ...]:
        return self._read(lambda cur: tuple(entries_where(cur, "r.owner = %(me)s",
                                                          {"me": self.instance})))

    def mine_unsettled(self) -> tuple[RunEntry, ...]:
        """Read now: a takeover moves a run without an event."""
        return self._read(lambda cur: tuple(entries_where(
            cur, "r.owner = %(me)s AND NOT r.ended", {"me": self.instance})))

    def once_holder(self, tool: str, key: str) -> RunEntry | None:
        def query(cur: psycopg.Cursor[Any]) -> RunEntry | None:
            holder = self._holder(cur, tool, key)
            if holder is None:
                return None
            return holder if holder.holds_key(self._stamped(latest_of(holder))) else None

        return self._read(query)

    def _holder(self, cur: psycopg.Cursor[Any], tool: str, key: str) -> RunEntry | None:
        """The key's last holder; first, the forgets committed since this
        instance last looked are told (a forget frees a once key: a reserve
        with one is where it matters, and is logged)."""
        cur.execute("SELECT max(seq) FROM staal_forgets WHERE seq > %s", (self._forgets,))
        newest, seen = one_row(cur)[0], None
        with self._lock:  # each forget is told once, by the first call that sees it
            if newest is not None and newest > self._forgets:
                seen, self._forgets = self._forgets, int(newest)
        if seen is not None:
            forgotten = entries_where(cur, "f.seq > %(seen)s AND f.seq <= %(newest)s",
                                      {"seen": seen, "newest": newest}, "f.seq")
            for entry in forgotten:
                if self.on_forget is not None:
                    self.on_forget(entry)
        return once_holder(cur, tool, key)

    def quota_use(self, tool: str, quota: QuotaConfig, now: int | None = None) -> QuotaUse:
        def use(cur: psycopg.Cursor[Any]) -> QuotaUse:
            at = self._stamped(latest(cur, tool, None)) if now is None else now
            return window_use(SqlWindows(cur).sums(tool, quota, at), tool, quota, at)

        return self._read(use)

    def over_quota(self, tool: str, quota: QuotaConfig | None, calls: int,
                   money: tuple[Money, ...], admission: Admission | None = None) -> OverQuota | None:
        """Read without locking any key, so it waits for no writer: what it
        misses was committed after it read, and a missed reserve only lets
        the call on to `reserve_call`, which decides holding the keys."""
        def query(cur: psycopg.Cursor[Any]) -> OverQuota | None:
            now = self._stamped(latest(cur, tool, admission.caller if admission else None))
            return quota_refusal(SqlWindows(cur), tool, quota, calls, money, admission, now)

        return self._read(query)

    def renew_lease(self, lease_ms: int) -> bool:
        """Extend the lease while this process holds its instance's token."""
        def renew(cur: psycopg.Cursor[Any]) -> bool:
            cur.execute("UPDATE staal_instances SET lease_until_ms = %s "
                        "WHERE instance = %s AND fence = %s RETURNING 1",
                        (self._stamped(0) + lease_ms, self.instance, self.fence))
            return cur.fetchone() is not None

        return self._read(renew)

    # -- compaction ---------------------------------------------------------------

    def compact(self, files_kept: FilesKept, windows: Mapping[str, int]) -> Compaction:
        """Delete this instance's ended runs seed 000 section 6 no longer
        keeps, one instance at a time, in one transaction. Another's are
        kept: their files are on its disk, and it compacts them itself."""
        def attempt(cur: psycopg.Cursor[Any], again: bool) -> Compaction:
            cur.execute(f"SELECT pg_advisory_xact_lock({lock_key('compact')})")
            now = self._stamped(0)
            ended = entries_where(cur, "r.owner = %(me)s AND r.ended", {"me": self.instance})
            dropped = tuple(e.run for e in ended
                            if not _KEEPS.keeps(e, files_kept, windows, now))
            if dropped:
                cur.execute("DELETE FROM staal_runs WHERE run = ANY(%s)", (list(dropped),))
            cur.execute("SELECT run FROM staal_runs ORDER BY seq")
            return Compaction(tuple(str(row[0]) for row in cur.fetchall()), dropped)

        return self._do(attempt, atomic=True)

    def close(self) -> None:
        """Give the lease up (status shows the instance stopped, not dead)."""
        conns = self._pool.drain()
        try:
            live = [conn for conn in conns if not conn.broken and not conn.closed]
            if live:
                live[0].execute("UPDATE staal_instances SET lease_until_ms = NULL "
                                "WHERE instance = %s AND fence = %s", (self.instance, self.fence))
        except psycopg.Error:
            pass  # the lease runs out by itself
        finally:
            for conn in conns:
                conn.close()

    def __enter__(self) -> PostgresLedger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# Compaction's rule is the state's; it reads nothing of the state itself.
_KEEPS = LedgerState()

