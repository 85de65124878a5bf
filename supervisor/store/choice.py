"""Which store holds the ledger (`server.store`, issue 15): the file store,
`<journals>/server.ledger` (the default, and what version 1 did), or a
PostgreSQL database several instances share. The server, status and the
console reach a store only through these functions.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from staal.manifest.model import ServerConfig
from staal.runtime.clock import Clock
from staal.supervisor.recovery.lease import LeaseTiming
from staal.supervisor.store.errors import StoreError
from staal.supervisor.store.file_ledger import FileLedger
from staal.supervisor.store.journals import FILE_JOURNALS, RunJournals, StoreJournals
from staal.supervisor.store.ledger import LEDGER_FILE, Ledger, RunEntry, Warn, read_ledger
from staal.supervisor.store.notes import AllWaiting, FileNotes, RunNotes, StoreNotes
from staal.supervisor.store.postgres.instances import instance_name
from staal.supervisor.store.postgres.journal_rows import JournalRows
from staal.supervisor.store.postgres.ledger import PostgresLedger
from staal.supervisor.store.postgres.note_rows import NoteRows, read_all_waiting
from staal.supervisor.store.postgres.view import open_view
from staal.supervisor.store.reads.view import LedgerView, StateView

__all__ = ["LedgerView", "StoreError", "describe_store", "open_journals", "open_ledger",
           "open_notes", "read_ledger_view", "read_waiting", "this_instance"]


def open_ledger(server: ServerConfig, clock: Clock, warn: Warn,
                environ: Mapping[str, str] = os.environ,
                on_forget: Callable[[RunEntry], None] | None = None) -> Ledger:
    """The ledger the server writes, opened (and on PostgreSQL, its schema
    created or upgraded and this instance registered). `on_forget` is told
    of each forget an operator commits on PostgreSQL while it serves (on
    the file store, none can be: the server holds the lock)."""
    if server.store is None:
        return FileLedger.open(server.journals / LEDGER_FILE, clock, warn=warn)
    ledger = PostgresLedger.open(dsn_of(server, environ), instance_name(server.journals), clock,
                                 warn, LeaseTiming.of(server.store))
    ledger.on_forget = on_forget
    return ledger


def open_journals(server: ServerConfig, ledger: Ledger,
                  environ: Mapping[str, str] = os.environ) -> RunJournals:
    """Where the runs' journals are durable: each worker's file on the file
    store; on PostgreSQL, rows this instance commits under its fencing
    token (the ledger's), on a connection of their own."""
    if not isinstance(ledger, PostgresLedger):
        return FILE_JOURNALS
    return StoreJournals(JournalRows(dsn_of(server, environ), ledger.instance, ledger.fence),
                         server.journals)


def open_notes(server: ServerConfig, journals: RunJournals) -> RunNotes:
    """Where the runs' waiting records and logs are kept: files in this
    instance's journal directory, or rows of the shared store, on the
    journal rows' connection."""
    if isinstance(journals, StoreJournals):
        return StoreNotes(NoteRows(journals.rows))
    return FileNotes(server.journals)


def read_waiting(server: ServerConfig,
                 environ: Mapping[str, str] = os.environ) -> AllWaiting:
    """Every waiting record, by run, read without changing any (status):
    this directory's files, or the shared store's rows, any instance's."""
    if server.store is None:
        return FileNotes(server.journals).all_waiting()
    return read_all_waiting(dsn_of(server, environ))


@contextmanager
def read_ledger_view(server: ServerConfig,
                     environ: Mapping[str, str] = os.environ) -> Iterator[LedgerView]:
    """The ledger as status and the console read it, in one snapshot while
    the block runs, without changing it (supervisor/store/reads/view.py): the
    file ledger read whole, or the shared store asked by query."""
    if server.store is None:
        yield StateView(read_ledger(server.journals / LEDGER_FILE))
        return
    with open_view(dsn_of(server, environ)) as view:
        yield view


def this_instance(server: ServerConfig) -> str | None:
    """This journal directory's instance on a shared store (None: the file store)."""
    return None if server.store is None else instance_name(server.journals)


def describe_store(server: ServerConfig) -> str:
    """Where the ledger is, for logs and status: never the DSN itself."""
    if server.store is None:
        return str(server.journals / LEDGER_FILE)
    return f"postgres (the DSN in ${server.store.dsn.env})"


def dsn_of(server: ServerConfig, environ: Mapping[str, str]) -> str:
    assert server.store is not None
    name = server.store.dsn.env
    dsn = environ.get(name)
    if not dsn:
        raise StoreError(f"server.store.postgres.dsn names ${name}, which is not set in the "
                         "supervisor's environment")
    return dsn
