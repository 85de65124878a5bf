"""A run's log lines, held in memory while it runs and written beside its
journal in one write when it ends or stops (one write per run instead of
one per line). Calls and recovery both end a run's log with the line
saying how it ended; this is where those lines are made.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from staal.journal.records import End
from staal.records.outcomes import Failure
from staal.supervisor.store.files import RunFiles
from staal.supervisor.telemetry.log import log_file_line


@dataclass
class RunLogs:
    """The lines of each run of this process not yet written, by run id."""

    held: dict[str, list[bytes]] = field(default_factory=dict)

    def of(self, files: RunFiles) -> list[bytes]:
        """The run's lines so far, to append to."""
        return self.held.setdefault(files.run, [])

    def last_lines(self, files: RunFiles, ended: str, failure: Failure | None = None,
                   **said: str) -> bytes:
        """The run's lines held until now, and the one saying how it ended;
        the run holds none after this."""
        lines = self.held.pop(files.run, [])
        lines.append(log_file_line("ended", outcome=ended, **failure_fields(failure), **said))
        return b"".join(lines)

    def recovered(self, files: RunFiles, end: End) -> bytes:
        """The last lines of a run recovery settles from its end: any its
        call of this process still held (its settle failed), and the one
        saying how it ended and was recovered."""
        return self.last_lines(files, end.outcome, end.failure, recovered="settled from its end")


def failure_fields(failure: Failure | None) -> dict[str, Any]:
    """A failure as log fields: kind, message, the kind of the error behind it
    (its cause, when a refusal ended the run) and the program's frames."""
    if failure is None:
        return {}
    fields: dict[str, Any] = {"kind": failure.kind, "message": failure.message}
    if failure.cause is not None:
        fields["cause"] = failure.cause
    if failure.traceback:
        fields["traceback"] = [
            {"file": f.file, "line": f.line, "function": f.function, "source": f.source}
            for f in failure.traceback]
    return fields
