"""What the store raises, whichever store it is: a file-store server's call
path imports this, never the PostgreSQL schema."""

from __future__ import annotations

from staal.supervisor.errors import SupervisorError


class StoreError(SupervisorError):
    """The PostgreSQL store cannot be used as configured, or a statement on
    it failed; its message never holds the DSN."""

    kind = "store"


class StoreRefused(SupervisorError):
    """What an operator asked of the store does not fit what it holds (a run
    it does not know, one that ended, a journal that moved on): nothing was
    written. Each command raises its own refusal in its place."""

    kind = "store_refused"
