"""Answering resources/read (issue 16): a caller's runs, one run's status
and journal, read from the ledger and journals with their one readers; and
an operator's records, each read a run of the collection's hidden `get` or
`list` tool through the one call pipeline (supervisor/calls/pipeline.py), so it is checked,
confined, journaled and counted as any run is.

Which runs a caller may see is decided in one place, `visible`; every runs
resource goes through it, and a run it hides is answered exactly as a run
that does not exist (-32602), so nothing tells a caller another's run ids.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from staal.errors import LogDamaged
from staal.journal.reader import read_journal
from staal.manifest.model import ResourceDecl
from staal.manifest.resources import ENTRY_INPUTS
from staal.protocol.mcp.dispatch import CallTool
from staal.protocol.mcp.jsonrpc import INTERNAL_ERROR, RpcError
from staal.protocol.mcp.resources import (
    ENDED_TTL_MS,
    JOURNAL_PAGE,
    Contents,
    JournalPage,
    ReadAnswer,
    ReadResource,
    RecordIds,
    RecordItem,
    RecordsPage,
    ResourceCatalogue,
    RunItem,
    RunsPage,
    unknown_resource,
)
from staal.protocol.mcp.results import CallOutcome, Done, Refused, RunStatus, shape_run_status
from staal.protocol.prompts.completion import ids_completion, list_after
from staal.records.fsio import FS
from staal.supervisor.auth.callers import Admitted
from staal.supervisor.calls.pipeline import CallState
from staal.supervisor.errors import SupervisorError
from staal.supervisor.store.caller_runs import CallerRuns
from staal.supervisor.store.files import RunFiles
from staal.supervisor.store.ledger import Ledger, RunEntry
from staal.supervisor.store.notes import RunNotes
from staal.supervisor.views.journal_view import header_data, record_data, when

KEY_FILE = "resources.key"
KEY_SIZE = 32
# What a run's status may be kept for once it can no longer change.
ENDED = ("done", "failed", "expired")


class ResourceKeyUnusable(SupervisorError):
    kind = "resource_key"


def cursor_key(journals: Path) -> bytes:
    """The server's key for signing cursors: made once, at the first start,
    in the journal directory (0600, like the ledger), so cursors stay valid
    across restarts; never logged, never sent."""
    path = journals / KEY_FILE
    try:
        fd = FS.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        key = path.read_bytes()
        if len(key) != KEY_SIZE:
            raise ResourceKeyUnusable(f"{path} is not a cursor key ({KEY_SIZE} bytes); remove it "
                                      "to make a new one (cursors handed out before then are "
                                      "refused)") from None
        return key
    key = os.urandom(KEY_SIZE)
    try:
        FS.write(fd, key)
        FS.sync_file(fd)
    finally:
        os.close(fd)
    FS.sync_dir(journals)
    return key


def runs_seen(admitted: Admitted, limit: int = 0, after: str | None = None) -> CallerRuns:
    """The runs the caller `admitted` may see, as a page of them: the one
    decision every runs resource goes through. A run that never started
    (released) nobody; any other, its own caller only (the rule of
    `Admitted.owns`, which `staal_run_status` follows too)."""
    return CallerRuns(admitted.identity, started=True, limit=limit, after=after)


def visible(entry: RunEntry, admitted: Admitted) -> bool:
    """Whether the caller `admitted` may see run `entry` (`runs_seen`)."""
    return runs_seen(admitted).holds(entry)


# A call through the one pipeline (`Calls.call_tool`): an operator's records
# are read by a run of a collection's entry.
CallThrough = Callable[[CallTool, CallState, Admitted], Awaitable[CallOutcome | None]]
# How the caller's own run stands (`Calls.run_status`, staal_run_status's answer).
StatusOf = Callable[[str, Admitted], RunStatus]


class Resources:
    def __init__(self, ledger: Ledger, notes: RunNotes, journals: Path, run_status: StatusOf,
                 call_tool: CallThrough, catalogue: ResourceCatalogue,
                 collections: tuple[ResourceDecl, ...]) -> None:
        self.ledger = ledger
        self.notes = notes
        self.journals = journals
        self.run_status = run_status
        self.call_tool = call_tool
        self.catalogue = catalogue
        self.collections = {c.name: c for c in collections}

    async def read(self, read: ReadResource, admitted: Admitted,
                   state: CallState) -> ReadAnswer:
        ref = read.ref
        if isinstance(ref, (RecordItem, RecordsPage, RecordIds)):
            return await self.records(read, ref, state, admitted)
        return await asyncio.to_thread(self._runs_resource, read, admitted)

    def _runs_resource(self, read: ReadResource, admitted: Admitted) -> ReadAnswer:
        ref = read.ref
        # read() serves those: records()
        assert not isinstance(ref, (RecordItem, RecordsPage, RecordIds))
        if isinstance(ref, RunsPage):
            return self.runs_page(ref, admitted)
        entry = self.ledger.run(ref.run)
        if entry is None or not visible(entry, admitted):
            return unknown_resource(read.uri, f"no run {ref.run} of yours is known here")
        if isinstance(ref, RunItem):
            status = self.run_status(ref.run, admitted)
            data = shape_run_status(status).structured
            return Contents(data, ENDED_TTL_MS if status.status in ENDED else 0)
        return self.journal_page(read, ref, entry)

    # -- runs ------------------------------------------------------------------

    def runs_page(self, ref: RunsPage, admitted: Admitted) -> Contents:
        """Newest first: the reverse of the ledger's order of reserves (run
        ids are random, and reserves share milliseconds). The cursor holds
        the last run's reserve time and id: the page after it starts past
        that run, or, if retention has dropped it since, past its time. One
        more than the page is read: whether there is a next page is then
        known; on a shared store the ledger reads that page alone."""
        entries = self.ledger.caller_runs(runs_seen(admitted, ref.limit + 1, ref.after))
        page = entries[:ref.limit]
        waiting = self.notes.all_waiting() if any(e.unsettled for e in page) else {}
        data: dict[str, Any] = {"items": [_run_item(e, waiting) for e in page]}
        if len(entries) > ref.limit:
            last = page[-1]
            data["nextCursor"] = self.catalogue.next_cursor(ref, f"{last.reserved_ms}:{last.run}")
        return Contents(data)

    def journal_page(self, read: ReadResource, ref: JournalPage, entry: RunEntry) -> ReadAnswer:
        files = RunFiles(self.journals, entry.tool, entry.run)
        try:
            journal = read_journal(files.journal)
        except FileNotFoundError:
            return unknown_resource(read.uri, f"run {entry.run} has no journal: it was never "
                                    "started, or is no longer kept")
        except LogDamaged as exc:
            return RpcError(INTERNAL_ERROR, f"run {entry.run}'s journal cannot be read: "
                            f"{exc.reason} (line {exc.line})")
        start = int(ref.after) if ref.after is not None and ref.after.isdigit() else 0
        records = journal.history[start:start + JOURNAL_PAGE]
        data: dict[str, Any] = {"run": header_data(journal),
                                "items": [d for r in records if (d := record_data(r, entry.run))]}
        if start + JOURNAL_PAGE < len(journal.history):
            data["nextCursor"] = self.catalogue.next_cursor(ref, str(start + JOURNAL_PAGE))
        # An ended run's journal never changes (retention only deletes it).
        return Contents(data, ENDED_TTL_MS if journal.end is not None else 0)

    # -- an operator's records ---------------------------------------------------

    async def records(self, read: ReadResource, ref: RecordItem | RecordsPage | RecordIds,
                      state: CallState, admitted: Admitted) -> ReadAnswer:
        decl = self.collections[ref.segment]
        completing = ref if isinstance(ref, RecordIds) else None
        if isinstance(ref, RecordIds):
            # A completion reads one page from just before its prefix's ids.
            ref = RecordsPage(ref.segment, decl.max_page_size, list_after(ref.prefix))
        arguments: dict[str, Any]  # a call's arguments, as CallTool holds them
        if isinstance(ref, RecordItem):
            tool, arguments = decl.get, {"id": ref.id}
        else:
            # One more than the page: whether there is a next page is then
            # known without a page that comes back empty.
            tool, arguments = decl.list, {"after": ref.after, "limit": ref.limit + 1}
        call = CallTool(read.request_id, tool.name, arguments, read.revision)
        # The caller's own run (its rate counts it; it lists it among its runs).
        outcome = await self.call_tool(call, state, admitted)
        if not isinstance(outcome, Done):
            return _read_failed(read.uri, outcome)
        if outcome.content is not None:  # a resource's contents are JSON records
            return RpcError(INTERNAL_ERROR, f"run {outcome.run}: the collection's {tool.name} "
                            "returned content parts (images, audio, resources), not JSON")
        if isinstance(ref, RecordItem):
            return self._record(read, ref, outcome)
        page = self._page(read, ref, outcome)
        if completing is None or not isinstance(page, Contents):
            return page
        data: Any = page.data
        ids = [item["id"] for item in data["items"]]
        return Contents(ids_completion(ids, completing.prefix, "nextCursor" in data))

    def _record(self, read: ReadResource, ref: RecordItem, outcome: Done) -> ReadAnswer:
        if outcome.result is None:
            return unknown_resource(read.uri, f"no record with id {ref.id[:80]!r}")
        if not isinstance(outcome.result, dict):
            return RpcError(INTERNAL_ERROR, f"run {outcome.run}: the collection's get entry "
                            "returned something other than a record (a JSON object) or None")
        return Contents(outcome.result)

    def _page(self, read: ReadResource, ref: RecordsPage, outcome: Done) -> ReadAnswer:
        items = outcome.result
        problem = _page_problem(items, ref)
        if problem is not None:
            return RpcError(INTERNAL_ERROR, f"run {outcome.run}: the collection's list entry "
                            f"{problem}")
        page = items[:ref.limit]
        data: dict[str, Any] = {"items": page}
        if len(items) > ref.limit:
            data["nextCursor"] = self.catalogue.next_cursor(ref, page[-1]["id"])
        return Contents(data)


def _page_problem(items: object, ref: RecordsPage) -> str | None:
    """Why a list entry's answer is not a page of records after `ref.after`."""
    if not isinstance(items, list):
        return "returned something other than a list of records"
    if len(items) > ref.limit + 1:
        return f"returned {len(items)} records; it was asked for at most {ref.limit + 1}"
    ids = [item["id"] for item in items if isinstance(item, dict) and isinstance(item.get("id"), str)]
    if len(ids) != len(items):
        return 'returned a record without an "id" string'
    if ids != sorted(set(ids)) or (ref.after is not None and ids and ids[0] <= ref.after):
        return "returned records out of id order, repeated, or not after the cursor's id"
    return None


def _read_failed(uri: str, outcome: CallOutcome | None) -> RpcError:
    if outcome is None:
        return RpcError(INTERNAL_ERROR, f"the read of {uri[:200]} was cancelled")
    if isinstance(outcome, Refused):
        return RpcError(INTERNAL_ERROR, f"{outcome.kind}: {outcome.message}")
    kind = getattr(outcome, "kind", "stopped")
    message = "see the server's log" if kind == "internal" else getattr(outcome, "message", "")
    run = getattr(outcome, "run", None)
    return RpcError(INTERNAL_ERROR, f"run {run}, reading {uri[:200]}, ended as {kind}: {message}")


def entry_problems(collections: tuple[ResourceDecl, ...], inputs: dict[str, Any]) -> list[str]:
    """Each collection's entries must take exactly the inputs staal passes
    (`id`; `after` and `limit`), besides their capabilities. `inputs` is each
    checked tool's inputs description, by tool name."""
    problems = []
    for decl in collections:
        for kind, tool in (("get", decl.get), ("list", decl.list)):
            checked = inputs.get(tool.name)
            if checked is None:
                continue  # its check failed, and says why
            names = sorted(item["name"] for item in checked["inputs"])
            wanted = sorted(ENTRY_INPUTS[kind])
            if names != wanted:
                problems.append(f"resources '{decl.name}': its {kind} entry '{tool.entry}' takes "
                                f"{', '.join(names) or 'no inputs'}; it must take "
                                f"{' and '.join(wanted)} (besides its capabilities)")
    return problems


def _run_item(entry: RunEntry, waiting: Mapping[str, object]) -> dict[str, Any]:
    """One run as the list shows it: a run with a waiting record says so
    (staal_run_status's word for it), any other unsettled one is running; a
    settled one is its outcome."""
    if entry.state != "unsettled":
        return _run_item_fields(entry, entry.outcome)
    return _run_item_fields(entry, "waiting_for_operator" if entry.run in waiting else "running")


def _run_item_fields(entry: RunEntry, state: str | None) -> dict[str, Any]:
    return {"run": entry.run, "tool": entry.tool, "state": state,
            "reserved": when(entry.reserved_ms), "ended": when(entry.ended_ms)}
