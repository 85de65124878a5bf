"""Recovery at start, before anything is answered (seed 000 section 7;
DESIGN.md section 9), with exactly one rule per case:

- a reservation with no journal, or with a journal cut before its header
  was durable: the run never started; release it and remove its inputs file
  (and that journal file);
- a journal with no end: resume it (one after another), as `staal resume`
  would, from the journal and the kept arguments;
- a journal that ended but is not settled: settle it from its end record;
- a waiting run: resume it; it stops again unless an operator resolved it;
- a journal with no reservation: refuse to start, naming it;
- an unfinished run whose program, config or runtime changed: refuse to
  start, naming each run and what changed;
- inputs files left by settled or released runs: removed.

Settling in place (a live instance's own runs a failure left unsettled,
supervisor/recovery/takeover.py) plans by the same rules; it never looks at
a run with a waiting record (resumed, it would only stop at its op in doubt
again), so a stopped run it plans is one an operator answered, or
one whose record could not be written, which stops again and writes it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import staal
from staal.errors import LogDamaged
from staal.journal.reader import JournalState, journal_started, read_journal
from staal.journal.records import End
from staal.manifest.model import Manifest
from staal.records.runconfig import from_tool
from staal.supervisor.store.files import RunFiles, find_journals
from staal.supervisor.store.ledger import Ledger, RunEntry


@dataclass
class RecoveryPlan:
    release: list[RunFiles] = field(default_factory=list)
    settle: list[tuple[RunFiles, End]] = field(default_factory=list)
    resume: list[RunFiles] = field(default_factory=list)
    remove_inputs: list[RunFiles] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def planned(self) -> set[str]:
        """The runs the plan does something to."""
        return {files.run for files in (*self.release, *self.resume,
                                        *(files for files, _ in self.settle))}


def plan_recovery(manifest: Manifest, ledger: Ledger) -> RecoveryPlan:
    plan = RecoveryPlan()
    journals = manifest.server.journals
    entries = {entry.run: entry for entry in ledger.runs()}
    found = find_journals(journals)
    for run, (_tool, path) in sorted(found.items()):
        if run not in entries:
            plan.problems.append(
                f"journal {path} has no reservation in the ledger: staal cannot tell what this "
                "run holds; move the journal out of the journal directory once you have checked "
                "what it did (staal journal show), then start again")
    # On a shared store another instance's runs are in the ledger too, with
    # their journals on its own disk: only this one's are recovered here.
    for entry in ledger.mine():
        files = RunFiles(journals, entry.tool, entry.run)
        if entry.state != "unsettled":
            if files.inputs.exists() or files.waiting.exists():
                plan.remove_inputs.append(files)  # left by a crash after its settle
            continue
        _plan_unsettled(manifest, entry, files, entry.run in found, plan)
    return plan


def plan_taken(manifest: Manifest, ledger: Ledger, taken: list[RunFiles]) -> RecoveryPlan:
    """The plan for runs taken over from an instance whose lease expired (or
    left unsettled here: settling in place), their local copies restored
    from their rows: each by the rules of recovery at start."""
    plan = RecoveryPlan()
    for files in taken:
        entry = ledger.run(files.run)
        if entry is not None and entry.state == "unsettled":
            _plan_unsettled(manifest, entry, files, files.journal.exists(), plan)
    return plan


def _plan_unsettled(manifest: Manifest, entry: RunEntry, files: RunFiles, has_journal: bool,
                    plan: RecoveryPlan) -> None:
    # A journal with no complete header was cut during its creation: there
    # is no journal, and the run never started (seed 000 section 7, step 3).
    if not has_journal or not journal_started(files.journal):
        plan.release.append(files)
        return
    try:
        journal = read_journal(files.journal)
    except LogDamaged as exc:
        plan.problems.append(f"run {entry.run}: its journal is damaged: {exc.message}")
        return
    if journal.end is not None:
        plan.settle.append((files, journal.end))
        return
    changed = what_changed(manifest, entry.tool, journal)
    if changed:
        plan.problems.append(
            f"run {entry.run} of tool '{entry.tool}' is unfinished and cannot be resumed: "
            f"{changed}. Run the previous version until every run ends "
            "(staal-supervisor status lists them), or resolve this run by hand")
        return
    if not files.inputs.exists():
        plan.problems.append(f"run {entry.run}: its arguments file {files.inputs} is missing, "
                             "so it cannot be resumed")
        return
    plan.resume.append(files)


def what_changed(manifest: Manifest, tool_name: str, journal: JournalState) -> str:
    """What differs from what the run began with, each a whole clause (the
    refusal joins them), or "" when it may resume."""
    tool = manifest.tool(tool_name)
    if tool is None:
        return f"the manifest no longer has tool '{tool_name}'"
    header, changed = journal.header, []
    if header.runtime != staal.RUNTIME:
        changed.append(f"the runtime changed since it began (it began under {header.runtime}; "
                       f"this is {staal.RUNTIME})")
    program = Path(header.program)
    if program != tool.program:
        changed.append(f"its program changed since it began (it began with {program}; "
                       f"the manifest names {tool.program})")
    elif not program.is_file():
        changed.append(f"its program {program} is gone since it began")
    elif _sha256(program) != header.program_sha256:
        changed.append(f"its program {program} changed since it began")
    if from_tool(manifest, tool).sha256() != header.config_sha256:
        changed.append("the tool's config (grants, limits, net or entry) changed since it began")
    return "; ".join(changed)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
