"""A ledger event as the PostgreSQL store keeps it, read back: one reader of
the rows of a run (its reserve, its end and its forget) for a serving
instance, `staal-supervisor forget`, status and the console; and a page of
one caller's runs (`CallerRuns`), one indexed query for the page alone
(`staal_runs_caller_seq`, schema version 6) however many runs other callers
have, answering as the file ledger's `page_in` over the whole ledger."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from staal.errors import StaalError
from staal.records.ledger_records import Forget, Release, Reserve, Settle
from staal.supervisor.store.caller_runs import CallerRuns
from staal.supervisor.store.entries import RunEntry
from staal.supervisor.store.errors import StoreError
from staal.supervisor.store.state import Event, LedgerState, decode_event, entry_of

if TYPE_CHECKING:
    from psycopg import Cursor

# Every run with its end and forget, if it has them; callers add WHERE and ORDER BY.
RUN_ROWS = ("SELECT r.seq, r.event, e.event, f.event FROM staal_runs r "
            "LEFT JOIN staal_ends e ON e.run = r.run LEFT JOIN staal_forgets f ON f.run = r.run")


def apply_stored(state: LedgerState, seq: int, data: object) -> tuple[Event, RunEntry]:
    """The stored event `seq` applied to `state`: the event and its run's
    entry; a StoreError naming `seq` if it cannot be read or applied."""
    try:
        event = decode_event(data)
        return event, state.apply(event)
    except StaalError as exc:  # a RecordError, or a LedgerBug (both StaalErrors)
        raise StoreError(f"the PostgreSQL store's event {seq} is damaged: "
                         f"{exc.message}") from None


def entries_where(cur: Cursor[Any], where: str, params: dict[str, Any],
                  order: str = "r.seq") -> list[RunEntry]:
    """The entries of the runs `where` selects, in `order` (the ledger's, by default)."""
    cur.execute(f"{RUN_ROWS} WHERE {where} ORDER BY {order}", params)
    return [stored_entry(*row) for row in cur.fetchall()]


def entry_where_run(cur: Cursor[Any], run: str) -> RunEntry | None:
    found = entries_where(cur, "r.run = %(run)s", {"run": run})
    return found[0] if found else None


def stored_entry(seq: int, reserve: object, end: object, forget: object) -> RunEntry:
    """A run's entry from its rows' events; a StoreError naming the reserve's
    `seq` if one cannot be read or does not belong where it is kept."""
    try:
        made = decode_event(reserve)
        ended = None if end is None else decode_event(end)
        forgot = None if forget is None else decode_event(forget)
    except StaalError as exc:
        raise StoreError(f"the PostgreSQL store's run at event {seq} is damaged: "
                         f"{exc.message}") from None
    if not isinstance(made, Reserve) or not isinstance(ended, Settle | Release | None) \
            or not isinstance(forgot, Forget | None):
        raise StoreError(f"the PostgreSQL store's run at event {seq} is damaged: an event "
                         "of another kind is kept in its reserve's, end's or forget's place")
    return entry_of(made, ended, forgot)


def caller_page(cur: Cursor[Any], which: CallerRuns) -> list[RunEntry]:
    sql, params = page_query(cur, which)
    cur.execute(sql, params)
    return [stored_entry(*row) for row in cur.fetchall()]


def page_query(cur: Cursor[Any], which: CallerRuns) -> tuple[str, dict[str, Any]]:
    """The page's statement and parameters. A cursor's run, if the page
    would list it, is found first (by primary key): the page starts past
    its place in the ledger's order; if it is gone, past its time."""
    chosen = ["r.caller IS NULL" if which.caller is None else "r.caller = %(caller)s"]
    if which.started:
        chosen.append("e.kind IS DISTINCT FROM 'release'")
    params: dict[str, Any] = {"caller": which.caller, "limit": which.limit}
    where = list(chosen)
    position = which.position()
    if position is not None:
        params["ms"], params["run"] = position
        cur.execute(f"SELECT r.seq FROM staal_runs r LEFT JOIN staal_ends e ON e.run = r.run "
                    f"WHERE r.run = %(run)s AND {' AND '.join(chosen)}", params)
        row = cur.fetchone()
        if row is not None:
            params["seq"] = row[0]
            where.append("r.seq < %(seq)s")
        else:
            where.append("r.reserved_ms < %(ms)s")
    return (f"{RUN_ROWS} WHERE {' AND '.join(where)} ORDER BY r.seq DESC LIMIT %(limit)s",
            params)
