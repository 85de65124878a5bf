"""Which runs a caller sees as resources (issue 16), decided in one place
(`staal.supervisor.calls.resources.visible`): with no principal (stdio, or HTTP
without authentication) every run the server made, newest first and paged
each run once; an authenticated caller only the runs it owns, another's
run answered exactly as one that does not exist; a released run (it never
started) nobody."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from staal.journal.records import End, Header, Print, Value
from staal.journal.writer import JournalWriter
from staal.manifest.model import NetConfig, ResourceDecl, Tool
from staal.protocol.mcp.cursors import CursorSigner
from staal.protocol.mcp.jsonrpc import RpcError
from staal.protocol.mcp.resources import Collection, Contents, ReadResource, RecordIds, ResourceCatalogue
from staal.protocol.mcp.results import Done
from staal.protocol.mcp.revisions import MODERN
from staal.protocol.prompts.completion import list_after
from staal.runtime.clock import SYSTEM_CLOCK
from staal.supervisor.auth.callers import LOCAL, Admitted
from staal.supervisor.auth.principal import Principal
from staal.supervisor.calls.pipeline import Calls, CallState
from staal.supervisor.calls.resources import Resources, cursor_key, visible
from staal.supervisor.recovery.waiting import Waiting
from staal.supervisor.store.entries import Admission
from staal.supervisor.store.file_ledger import FileLedger
from staal.supervisor.store.files import RunFiles
from staal.supervisor.store.journals import FILE_JOURNALS, RunJournals
from staal.supervisor.store.notes import FileNotes

BASE = "staal://shop"
ALICE = Principal("https://issuer.example", "alice", "agent-1")


@dataclass
class LedgerOnly:
    """What staal_run_status (Calls' own) uses of the call pipeline: its
    ledger, where runs' files are, and the runs' notes."""

    ledger: FileLedger
    journals: Path
    waiting: Waiting = field(init=False)
    run_journals: RunJournals = FILE_JOURNALS

    def __post_init__(self) -> None:
        self.waiting = Waiting(FileNotes(self.journals), None, (), lambda *a, **k: None)

    def files(self, tool: str, run: str) -> RunFiles:
        return RunFiles(self.journals, tool, run)

    def run_status(self, run: str, admitted: Admitted = LOCAL):
        return Calls.run_status(self, run, admitted)  # type: ignore[arg-type]


async def no_calls(call, state, admitted):
    raise AssertionError("the runs resources call no tool")


@pytest.fixture
def served(tmp_path):
    ledger = FileLedger.open(tmp_path / "server.ledger", SYSTEM_CLOCK)
    runs = []
    for i in range(5):
        run = ledger.reserve_call(f"tool{i}", None, 1, (), None).run
        if i != 2:
            ledger.settle(run, "done", ())
        runs.append(run)
    released = ledger.reserve_call("never", None, 1, (), None).run
    ledger.release(released)
    alices = ledger.reserve_call("tool0", None, 1, (), None, Admission(ALICE.identity)).run
    ledger.settle(alices, "done", ())
    catalogue = ResourceCatalogue("shop", [], CursorSigner(cursor_key(tmp_path)))
    only = LedgerOnly(ledger, tmp_path)
    resources = Resources(ledger, only.waiting.notes, tmp_path, only.run_status, no_calls,
                          catalogue, ())
    yield SimpleNamespace(resources=resources, catalogue=catalogue, runs=runs, released=released,
                          alices=alices)
    ledger.close()


def read(served, uri: str, principal: Principal | None = None):
    ref = served.catalogue.reference(uri)
    assert not isinstance(ref, RpcError), ref
    return served.resources._runs_resource(ReadResource(1, uri, ref, MODERN),
                                           Admitted(principal, None))


def test_without_a_principal_every_started_run_is_listed_newest_first_and_paged_once(served):
    seen, uri = [], f"{BASE}/runs?limit=2"
    while True:
        page = read(served, uri).data
        seen.append([item["run"] for item in page["items"]])
        if "nextCursor" not in page:
            break
        uri = f"{BASE}/runs?limit=2&cursor={page['nextCursor']}"
    assert seen == [served.runs[4:2:-1], served.runs[2:0:-1], served.runs[0:1]]  # not alice's
    states = {i["run"]: i["state"] for i in read(served, f"{BASE}/runs").data["items"]}
    assert states[served.runs[2]] == "running" and states[served.runs[0]] == "done"
    assert served.released not in states  # it never started


def test_without_a_principal_a_run_is_read_and_a_released_one_is_unknown(served):
    status = read(served, f"{BASE}/runs/{served.runs[2]}")
    assert status.data == {"run": served.runs[2], "status": "running"} and status.ttl_ms == 0
    unknown = read(served, f"{BASE}/runs/{served.released}")
    assert isinstance(unknown, RpcError) and unknown.code == -32602


def test_an_authenticated_caller_sees_its_own_runs_and_none_of_anyone_elses(served):
    assert [i["run"] for i in read(served, f"{BASE}/runs", ALICE).data["items"]] == [served.alices]
    mine = read(served, f"{BASE}/runs/{served.alices}", ALICE)
    assert mine.data == {"run": served.alices, "status": "expired"}  # its result file is not kept here
    local = read(served, f"{BASE}/runs/{served.alices}")
    assert isinstance(local, RpcError) and local.code == -32602  # the local client's are others'
    assert served.alices not in [i["run"] for i in read(served, f"{BASE}/runs").data["items"]]
    others = read(served, f"{BASE}/runs/{served.runs[0]}", ALICE)
    nobody = read(served, f"{BASE}/runs/{'f' * 32}", ALICE)
    assert isinstance(others, RpcError) and others.code == -32602
    # Another caller's run is answered exactly as a run that does not exist.
    assert others.message.replace(served.runs[0], "R") == nobody.message.replace("f" * 32, "R")
    journal = read(served, f"{BASE}/runs/{served.runs[0]}/journal", ALICE)
    assert isinstance(journal, RpcError) and journal.code == -32602


def test_visibility_compares_the_runs_caller_with_the_principals_identity():
    owned = SimpleNamespace(state="settled", caller=ALICE.identity)
    bob = Principal("https://issuer.example", "bob", "agent-1")
    alice, bob = Admitted(ALICE, None), Admitted(bob, None)
    assert visible(owned, alice) and not visible(owned, bob) and not visible(owned, LOCAL)
    assert not visible(SimpleNamespace(state="released", caller=ALICE.identity), alice)
    local = SimpleNamespace(state="settled", caller=None)  # the local client's
    assert visible(local, LOCAL) and not visible(local, alice)


def test_the_cursor_key_is_made_once_private_and_kept_across_starts(tmp_path):
    key = cursor_key(tmp_path)
    assert len(key) == 32 and cursor_key(tmp_path) == key
    assert (tmp_path / "resources.key").stat().st_mode & 0o777 == 0o600


def test_a_journal_is_read_100_records_a_page_with_hashes_for_values(served, tmp_path):
    run = served.runs[0]
    files = RunFiles(tmp_path, "tool0", run)
    files.folder.mkdir(parents=True)
    sha = "ab" * 32
    header = Header(run=run, tool="tool0", program="/srv/secret-path/tool0.py",
                    program_sha256=sha, config_sha256=sha, inputs_sha256=sha,
                    runtime="staal 0.1.0", time=1_760_000_000_000)
    with JournalWriter.create(files.journal, header) as journal:
        for op in range(1, 131):
            journal.write(Value(op=op, cap="random.bytes", value=f"secret-{op}",
                                time=1_760_000_000_000 + op, param="rng"), sync=False)
        journal.write(Print(seq=1, text="card 4242", time=1_760_000_000_200))
        journal.write(End(outcome="done", time=1_760_000_000_300, result={"ok": True}))
    pages, uri = [], f"{BASE}/runs/{run}/journal"
    while True:
        page = read(served, uri)
        pages.append(page)
        if "nextCursor" not in page.data:
            break
        uri = f"{BASE}/runs/{run}/journal?cursor={page.data['nextCursor']}"
    assert [len(p.data["items"]) for p in pages] == [100, 32]
    items = [item for p in pages for item in p.data["items"]]
    assert [i["op"] for i in items if i["type"] == "value"] == list(range(1, 131))
    assert items[-2] == {"type": "print", "seq": 1, "time": items[-2]["time"]}
    assert items[-1]["type"] == "end" and items[-1]["result"] == {"ok": True}
    assert pages[-1].ttl_ms > 0  # ended: it never changes again
    text = json.dumps([p.data for p in pages])
    assert "secret" not in text and "4242" not in text  # values, printed text and paths


def test_a_run_waiting_for_an_operator_is_listed_as_waiting(served, tmp_path):
    waiting = RunFiles(tmp_path, "tool2", served.runs[2]).waiting
    waiting.parent.mkdir(parents=True, exist_ok=True)
    waiting.write_text(json.dumps({"op": 1, "message": "op 1 may or may not have happened"}))
    states = {i["run"]: i["state"] for i in read(served, f"{BASE}/runs").data["items"]}
    assert states[served.runs[2]] == "waiting_for_operator"
    assert states[served.runs[1]] == "done"


def completing(tmp_path, ids: list[str], page: int = 4):
    """Resources over one collection whose list run (recorded) answers `ids`
    after its `after`, at most its `limit`."""
    tools = {kind: Tool(f"@orders.{kind}", "Orders.", tmp_path / "orders.py", kind, {},
                        NetConfig(1000, 1000)) for kind in ("get", "list")}
    decl = ResourceDecl("orders", "Orders.", page, tools["get"], tools["list"])
    calls = []

    async def list_run(call, state, admitted):
        calls.append((call.name, call.arguments))
        after = call.arguments["after"] or ""
        return Done("f" * 32, [{"id": i} for i in ids if i > after][:call.arguments["limit"]])

    catalogue = ResourceCatalogue("shop", [Collection("orders", "Orders.", page)],
                                  CursorSigner(cursor_key(tmp_path)))
    ledger = FileLedger.open(tmp_path / "server.ledger", SYSTEM_CLOCK)
    resources = Resources(ledger, FileNotes(tmp_path), tmp_path, lambda *a: None, list_run,
                          catalogue, (decl,))
    return resources, calls, ledger


@pytest.mark.parametrize(("prefix", "values", "more"), [
    ("o01", ["o010", "o011"], False),
    ("o1", ["o10", "o11", "o12", "o13"], True),
    ("", ["o00", "o010", "o011", "o02"], True),
])
def test_a_completion_from_a_collection_is_one_list_run_from_just_before_the_prefix(
        tmp_path, prefix, values, more):
    ids = ["o00", "o010", "o011", "o02", "o10", "o11", "o12", "o13", "o14"]
    resources, calls, ledger = completing(tmp_path, ids)
    read = ReadResource(1, "the ids of orders", RecordIds("orders", prefix), MODERN)
    answer = asyncio.run(resources.read(read, LOCAL, CallState()))
    ledger.close()
    assert calls == [("@orders.list", {"after": list_after(prefix), "limit": 5})]
    assert isinstance(answer, Contents) and answer.data["values"] == values
    assert answer.data["hasMore"] is more
