"""A ledger event as the PostgreSQL store keeps it, read back: one reader for
a serving instance and for `staal-supervisor forget`."""

from __future__ import annotations

from staal.errors import StaalError
from staal.supervisor.store.entries import RunEntry
from staal.supervisor.store.errors import StoreError
from staal.supervisor.store.state import Event, LedgerState, decode_event


def apply_stored(state: LedgerState, seq: int, data: object) -> tuple[Event, RunEntry]:
    """The stored event `seq` applied to `state`: the event and its run's
    entry; a StoreError naming `seq` if it cannot be read or applied."""
    try:
        event = decode_event(data)
        return event, state.apply(event)
    except StaalError as exc:  # a RecordError, or a LedgerBug (both StaalErrors)
        raise StoreError(f"the PostgreSQL store's event {seq} is damaged: "
                         f"{exc.message}") from None
