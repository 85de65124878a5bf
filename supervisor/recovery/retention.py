"""Keeping files (seed 000 section 7): at start and once a day, delete the
journals and logs of runs settled longer ago than `server.keep` days, the
log first and then the journal (a failure in between leaves a journal
without a log, never a log without its journal); then compact the ledger
(seed 000 section 6). A run in progress, unsettled or holding a once key
not yet expired is never deleted, whatever its age. `Retention` sweeps at
start and then once a day, on the clock it is given."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from staal.errors import StaalError
from staal.manifest.model import Manifest
from staal.records.fsio import FS
from staal.runtime.clock import MONOTONIC, Monotonic
from staal.supervisor.store.files import RunFiles
from staal.supervisor.store.ledger import Compaction, Ledger, RunEntry
from staal.supervisor.telemetry.log import Log

DAY_S = 24 * 3600


@dataclass(frozen=True)
class Sweep:
    deleted: tuple[str, ...]
    compaction: Compaction


def expired(entry: RunEntry, keep_ms: int | None, now_ms: int) -> bool:
    if keep_ms is None or entry.state != "settled" or entry.ended_ms is None:
        return False
    return entry.ended_ms + keep_ms < now_ms and not entry.holds_key(now_ms)


def _unlink(path: Path) -> None:
    try:
        FS.unlink(path)
    except FileNotFoundError:
        pass


def sweep(manifest: Manifest, ledger: Ledger) -> Sweep:
    journals = manifest.server.journals
    keep = manifest.server.keep
    now = ledger.now_ms()
    deleted, folders = [], set()
    for entry in ledger.runs():
        if expired(entry, keep.ms if keep else None, now):
            files = RunFiles(journals, entry.tool, entry.run)
            if files.journal.exists() or files.log.exists():
                _unlink(files.log)
                _unlink(files.cancel)
                _unlink(files.journal)
                deleted.append(entry.run)
                folders.add(files.folder)
    # Compaction may drop these runs from the ledger, durably; a removal not
    # yet durable could then bring a journal back after a power loss, with
    # no reservation, and the server would refuse to start
    # (docs/power-loss.md). So the removals are made durable first.
    for folder in sorted(folders):
        FS.sync_dir(folder)

    def files_kept(entry: RunEntry) -> bool:
        files = RunFiles(journals, entry.tool, entry.run)
        return files.journal.exists() or files.log.exists()

    return Sweep(tuple(deleted), ledger.compact(files_kept, quota_windows(manifest)))


def quota_windows(manifest: Manifest) -> dict[str, int]:
    """Each tool's longest window its runs count in: its quota's, a caller
    profile's quota on it, or a caller's rate (every tool its profile
    allows), so compaction never drops a run a limit still counts."""
    windows: dict[str, int] = {}

    def count(tool: str, ms: int) -> None:
        windows[tool] = max(windows.get(tool, 0), ms)

    for tool in manifest.tools:
        if tool.quota is not None:
            count(tool.name, tool.quota.window.ms)
    for caller in manifest.callers or ():
        for name, allowed in caller.tools.items():
            if allowed.quota is not None:
                count(name, allowed.quota.window.ms)
            if caller.rate is not None:
                count(name, caller.rate.window.ms)
    return windows


class Retention:
    """Sweeps (`sweep`: over the manifest and the ledger) at start, then once
    a day while the server serves; a failed daily sweep is logged and tried
    again the next day."""

    def __init__(self, sweep: Callable[[], Sweep], log: Log, clock: Monotonic = MONOTONIC) -> None:
        self.sweep = sweep
        self.log = log
        self.clock = clock

    async def sweep_now(self) -> None:
        result = await asyncio.to_thread(self.sweep)
        self.log("retention", deleted=len(result.deleted), kept=len(result.compaction.kept),
                 dropped=len(result.compaction.dropped))

    async def daily(self) -> None:
        """Until cancelled (serving ended)."""
        while True:
            await self.clock.sleep(DAY_S)
            try:
                await self.sweep_now()
            except StaalError as exc:
                self.log("retention_failed", level="error", kind=exc.kind, message=exc.message)
