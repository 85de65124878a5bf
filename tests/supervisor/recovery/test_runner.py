"""Carrying out a recovery plan (supervisor/recovery/runner.py), with a
real ledger and notes on files: a run that never started is released and
its journal cut before its header removed; an ended run is settled from its
end; a run to resume is resumed while recovery holds it; leftover inputs
files go. What the plans are is tests/supervisor/recovery/test_at_start.py's."""

from __future__ import annotations

import asyncio

from staal.journal.records import End
from staal.protocol.mcp.results import Done
from staal.runtime.clock import SYSTEM_CLOCK
from staal.supervisor.calls.in_flight import Holder, RunsInFlight
from staal.supervisor.calls.run_logs import RunLogs
from staal.supervisor.recovery.at_start import RecoveryPlan
from staal.supervisor.recovery.runner import Recovery
from staal.supervisor.store.file_ledger import FileLedger
from staal.supervisor.store.files import RunFiles, make_run_folders
from staal.supervisor.store.notes import FileNotes


class Scene:
    def __init__(self, tmp_path) -> None:
        self.journals = tmp_path
        make_run_folders(tmp_path, ["tool"])
        self.ledger = FileLedger.open(tmp_path / "server.ledger", SYSTEM_CLOCK)
        self.in_flight = RunsInFlight()
        self.logged: list[tuple[str, dict[str, object]]] = []
        self.resumed: list[tuple[str, Holder]] = []
        self.recovery = Recovery(self.ledger, FileNotes(tmp_path), RunLogs(), self.resume,
                                 self.in_flight, self.log)

    def log(self, event: str, **fields: object) -> None:
        self.logged.append((event, fields))

    def rules(self) -> list[tuple[object, object]]:
        return [(f["rule"], f["run"]) for e, f in self.logged if e == "recovered"]

    async def resume(self, files: RunFiles) -> Done:
        self.resumed.append((files.run, self.in_flight.holder(files.run)))
        return Done(files.run, None)

    def reserved(self) -> RunFiles:
        run = self.ledger.reserve_call("tool", None, 1, (), None).run
        return RunFiles(self.journals, "tool", run)


def test_a_plan_releases_settles_and_resumes_its_runs_holding_them_while_it_does(tmp_path):
    scene = Scene(tmp_path)
    never, ended, unfinished = scene.reserved(), scene.reserved(), scene.reserved()
    never.journal.write_bytes(b'{"kind": "hea')  # cut before its header was durable
    plan = RecoveryPlan(release=[never], settle=[(ended, End(outcome="done", time=0))],
                        resume=[unfinished])
    asyncio.run(scene.recovery.at_start(plan))
    assert scene.rules() == [("released: it never started", never.run),
                             ("settled from its end", ended.run),
                             ("resuming", unfinished.run), ("resumed", unfinished.run)]
    assert not never.journal.exists()
    assert scene.ledger.run(never.run).state == "released"
    assert scene.ledger.run(ended.run).state == "settled"
    assert scene.resumed == [(unfinished.run, Holder.RECOVERY)]
    assert all(scene.in_flight.holder(f.run) is Holder.FREE for f in (never, ended, unfinished))
    scene.ledger.close()


def test_a_failure_while_recovering_held_runs_is_logged_and_the_runs_are_let_go(tmp_path):
    scene = Scene(tmp_path)
    files = scene.reserved()

    async def fails(files: RunFiles) -> Done:
        raise OSError("no space left on device")

    scene.recovery.resume = fails
    held = scene.in_flight.claim([files.run])
    asyncio.run(scene.recovery.held(RecoveryPlan(resume=[files]), held, "takeover_failed"))
    (failed,) = [f for e, f in scene.logged if e == "takeover_failed"]
    assert failed["error"] == "OSError: no space left on device"
    assert scene.in_flight.holder(files.run) is Holder.FREE
    scene.ledger.close()


def test_inputs_files_left_by_settled_runs_are_removed(tmp_path):
    scene = Scene(tmp_path)
    files = scene.reserved()
    scene.ledger.settle(files.run, "done", ())
    files.inputs.write_text("{}")
    asyncio.run(scene.recovery.carry_out(RecoveryPlan(remove_inputs=[files])))
    assert not files.inputs.exists()
    scene.ledger.close()
