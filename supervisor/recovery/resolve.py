"""`staal-supervisor resolve`: an operator's answer for an op in doubt, on
the shared PostgreSQL store, from any machine with the DSN (issue 15).

The answer is checked against the run's journal rows by the same rules as
`staal resolve --journal` (worker/commands/resolve.py) and committed as the run's
next row. It is not fenced by an instance (an operator is none): the
journal's state is the condition instead. The run must be reserved and not
ended, and the new row takes the line after the last one read in the same
transaction, whose primary key refuses it if the run's owner appended
meanwhile. The owner (or an instance that takes the run over) restores its
copy from the rows and resumes the run after its next renewal of its lease
(settling in place, supervisor/recovery/takeover.py), or at its next start. The run's
waiting record goes in the same transaction.

The answer is checked by the worker's own `staal resolve` (which knows each
capability's result shape; the supervisor never imports worker code), run
on a private copy of the rows with no DSN in its environment; the record
it appends to the copy is the one committed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from staal.journal.copies import read_copy, write_copy
from staal.journal.records import JOURNAL, Resolved
from staal.manifest.model import ServerConfig
from staal.records.record import Json
from staal.supervisor.errors import SupervisorError
from staal.supervisor.store.choice import dsn_of
from staal.supervisor.store.errors import StoreRefused
from staal.supervisor.store.postgres.resolve_rows import answer_in_store


class ResolveRefused(SupervisorError):
    """The answer does not fit the run or its journal: nothing was written."""

    kind = "resolve_refused"


RESOLVE_TIMEOUT_S = 60


def resolve_in_store(server: ServerConfig, run: str, op: int, happened: bool,
                     result_text: str | None, environ: Mapping[str, str] = os.environ) -> str:
    """Commit the answer; what was recorded, for the operator."""
    if server.store is None:
        raise ResolveRefused("server.store is the file store: resolve on the server's machine "
                             "with staal resolve --journal PATH")
    def checked(rows: list[dict[str, Json]]) -> dict[str, Json]:
        return _checked_answer(run, rows, op, happened, result_text)

    try:
        owner = answer_in_store(dsn_of(server, environ), run, checked)
    except StoreRefused as exc:
        raise ResolveRefused(exc.message) from None
    said = "happened" if happened else "did not happen"
    return (f"op {op} of run {run} recorded as {said} in the shared store; instance {owner}, "
            "which owns the run, resumes it within a renewal of its lease if it is serving, "
            "else at its next start (or another instance, if it takes the run over)")


def _checked_answer(run: str, rows: list[dict[str, Json]], op: int, happened: bool,
                    result_text: str | None) -> dict[str, Json]:
    """The Resolved record `staal resolve` appends to a copy of the rows."""
    with tempfile.TemporaryDirectory(prefix="staal-resolve-") as folder:
        copy = Path(folder) / f"{run}.journal"
        write_copy(copy, rows, append=False)
        command = [sys.executable, "-m", "staal.worker.commands.cli", "resolve", "--journal", str(copy),
                   "--op", str(op), "--happened", "yes" if happened else "no"]
        if result_text is not None:
            command += ["--result", result_text]
        done = subprocess.run(command, capture_output=True, text=True, check=False,
                              timeout=RESOLVE_TIMEOUT_S, env=_without_secrets())
        if done.returncode != 0:
            said = " ".join(done.stderr.replace(str(copy), f"run {run}").split())
            raise ResolveRefused(said or f"staal resolve exited with {done.returncode}")
        written = read_copy(copy)
    if len(written) != len(rows) + 1 or not isinstance(JOURNAL.decode(written[-1]), Resolved):
        raise ResolveRefused(f"run {run}: staal resolve did not append one answer")
    return written[-1]


def _without_secrets() -> dict[str, str]:
    """The checker's environment: enough to run Python, no DSN or other secret."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH", "VIRTUAL_ENV", "TMPDIR")
    return {name: os.environ[name] for name in keep if name in os.environ}
