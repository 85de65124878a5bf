"""`staal-supervisor status MANIFEST [--json]`: beside a running server,
without taking its lock or changing any file, the unfinished runs (waiting
for an operator, with the op in doubt and the exact resolve command; in
progress; interrupted and to be resumed at the next start), each tool's
quota use in its window, and each authenticated caller's use (by the
SHA-256 of its identity, which is all the ledger keeps, and its profile's
name): its runs, its rate and its own quotas."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import psutil

from staal.errors import LogDamaged
from staal.journal.reader import read_journal
from staal.manifest.model import Manifest, QuotaConfig
from staal.records.waiting import WaitingRecord, resolve_in_the_store, resolve_on_this_machine
from staal.runtime.clock import SYSTEM_CLOCK, Clock
from staal.runtime.utc import for_machines
from staal.supervisor.store.choice import (
    describe_store,
    read_ledger_view,
    read_waiting,
    this_instance,
)
from staal.supervisor.store.entries import QuotaUse, RunEntry
from staal.supervisor.store.files import RunFiles
from staal.supervisor.store.ledger import LedgerState
from staal.supervisor.store.lockfile import lock_holder
from staal.supervisor.store.notes import AllWaiting
from staal.supervisor.store.reads.view import Instance, LedgerView, StateView, quota_use
from staal.supervisor.store.state import caller_key
from staal.supervisor.views.status_report import (
    WAITING,
    CallerStatus,
    Doubt,
    ForgottenRun,
    InstanceStatus,
    MoneyUse,
    QuotaStatus,
    RateStatus,
    ServerStatus,
    StatusReport,
    UnfinishedRun,
)


def server_pid(journals: Path) -> int | None:
    """The pid of the server using `journals`, if one is running (the lock
    file holds its pid; the lock itself is not touched)."""
    pid = lock_holder(journals)
    if pid is None:
        return None
    try:
        process = psutil.Process(pid)
        command = " ".join(process.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    return pid if "serve" in command else None


def ledger_now_ms(view: LedgerView | LedgerState, clock: Clock = SYSTEM_CLOCK) -> int:
    """Now, for a reader beside the server: the later of the clock and the
    latest reservation the ledger holds, so a clock set back never puts a
    quota's window before the runs it counts (the ledger's own `now_ms` is
    the later of the clock and its last event, likewise)."""
    if isinstance(view, LedgerState):
        view = StateView(view)
    return max(view.latest_reserve_ms(), clock.now_ms())


def _when(ms: int | None) -> str | None:
    if ms is None:
        return None
    return for_machines(ms, millis=False)


@dataclass(frozen=True, slots=True)
class Beside:
    """What status reads beside the ledger to tell an unfinished run's
    state: this instance, its server's pid, and the waiting records."""

    journals: Path
    me: str | None
    pid: int | None
    waiting: AllWaiting
    shared: bool

    @classmethod
    def of(cls, manifest: Manifest) -> Beside:
        server = manifest.server
        return cls(server.journals, this_instance(server), server_pid(server.journals),
                   read_waiting(server), server.store is not None)

    def unfinished(self, entry: RunEntry, owners: Mapping[str, str]) -> UnfinishedRun:
        """The unfinished run `entry` as status shows it."""
        record = self.waiting.get(entry.run)
        owner = owners.get(entry.run)
        if owner is not None and owner != self.me:
            return _elsewhere(entry, owner, record)
        return _run(entry, self.journals, self.pid is not None, record, self.shared)


def collect(manifest: Manifest, view: LedgerView | None = None) -> StatusReport:
    """The report, read from `view` (by default the store's, opened for it)."""
    if view is None:
        with read_ledger_view(manifest.server) as opened:
            return collect(manifest, opened)
    beside = Beside.of(manifest)
    owners = view.owners()
    runs = tuple(beside.unfinished(entry, owners) for entry in view.unsettled())
    now = ledger_now_ms(view)
    quotas = tuple(_quota(quota_use(view, tool.name, tool.quota, now)) for tool in manifest.tools
                   if tool.quota is not None)
    server = ServerStatus(running=beside.pid is not None, pid=beside.pid,
                          journals=str(beside.journals), store=describe_store(manifest.server))
    instances = tuple(_instance(i, beside.me, owners, now) for i in view.instances())
    return StatusReport(server, runs, quotas, _callers(manifest, view, now), _forgotten(view),
                        instances or None)


def _forgotten(view: LedgerView) -> tuple[ForgottenRun, ...]:
    """Ended runs whose once key an operator released (`staal-supervisor
    forget`), while the ledger still holds them."""
    return tuple(ForgottenRun(e.run, e.tool, e.outcome, _when(e.ended_ms), _when(e.forgotten_ms))
                 for e in view.forgotten())


def _elsewhere(entry: RunEntry, owner: str, record: WaitingRecord | None) -> UnfinishedRun:
    """An unfinished run another instance owns: its journal's copy is on that
    instance's disk, so the ledger's part is known here, and its waiting
    record, which is the shared store's."""
    run = UnfinishedRun(entry.run, entry.tool, _when(entry.reserved_ms),
                        "owned by another instance", owner=owner)
    if record is None:
        return run
    doubt = Doubt(record.op, record.message, record.resolve, since=_when(record.time),
                  recorded_by=record.instance)
    return replace(run, state=WAITING, doubt=doubt)


def _instance(instance: Instance, me: str | None, owners: Mapping[str, str],
              now: int) -> InstanceStatus:
    """One instance; its lease is live while it renews it (supervisor/recovery/lease.py)."""
    unsettled = sum(1 for owner in owners.values() if owner == instance.instance)
    until = instance.lease_until_ms
    return InstanceStatus(
        instance.instance, instance.instance == me, instance.fence, _when(instance.started_ms),
        instance.version, _when(until),
        "released" if until is None else "live" if until > now else "expired", unsettled)


def _callers(manifest: Manifest, view: LedgerView, now: int) -> tuple[CallerStatus, ...]:
    """Each caller the ledger holds runs of: its profile (as of its latest
    run), its runs, and its use of its profile's rate and quotas."""
    profiles = {profile.name: profile for profile in manifest.callers or ()}
    callers = []
    for count in view.callers():
        caller = CallerStatus(count.caller, count.runs, count.unsettled, count.profile)
        profile = profiles.get(count.profile) if count.profile is not None else None
        if profile is not None:
            rate = None
            if profile.rate is not None:
                limit = QuotaConfig(profile.rate.window, calls=profile.rate.calls)
                use = quota_use(view, caller_key(count.caller), limit, now)
                rate = RateStatus(use.calls, use.calls_limit, use.window_ms,
                                  _when(use.calls_frees_at_ms))
            quotas = tuple(
                _quota(quota_use(view, caller_key(count.caller, name), allowed.quota, now))
                for name, allowed in profile.tools.items() if allowed.quota is not None)
            caller = replace(caller, rate=rate, quotas=quotas)
        callers.append(caller)
    return tuple(callers)


def _run(entry: RunEntry, journals: Path, serving: bool, record: WaitingRecord | None,
         shared: bool) -> UnfinishedRun:
    """A run of this instance's, from its journal (on a shared store, its
    local copy) and its waiting record."""
    files = RunFiles(journals, entry.tool, entry.run)
    run = UnfinishedRun(entry.run, entry.tool, _when(entry.reserved_ms), "in_progress",
                        journal=str(files.journal))
    summary = None
    if files.journal.exists():
        try:
            summary = read_journal(files.journal)
        except (LogDamaged, OSError) as exc:  # a damaged journal is itself something to report
            run = replace(run, problem=str(exc))
    stop = summary.stopped if summary is not None and summary.end is None else None
    waits = record is not None
    if stop is not None and (waits or not serving):
        return replace(run, state=WAITING,
                       doubt=Doubt(stop.op, stop.message, _resolve(files, stop.op, shared)))
    if waits and summary is not None:
        # An operator answered the op it waited at; the server's next start resumes it.
        return replace(run, state="answered: resumed at the next start")
    if waits:
        return replace(run, state=WAITING, doubt=Doubt(None, None, _resolve(files, None, shared)))
    if serving:
        return run
    return replace(run, state="interrupted: resumed at the next start")


def _resolve(files: RunFiles, op: int | None, shared: bool) -> str:
    """How to answer the op in doubt: on a shared store from any machine
    (the rows are the journal), else on this one, with its journal's path."""
    if shared:
        return resolve_in_the_store(files.run, op)
    return resolve_on_this_machine(files.journal, op)


def _quota(use: QuotaUse) -> QuotaStatus:
    money = None
    if use.money_limit is not None:
        money = MoneyUse(str(use.money_held), str(use.money_charged), str(use.money_limit),
                         _when(use.money_frees_at_ms))
    return QuotaStatus(use.tool, use.window_ms, use.calls, use.calls_limit,
                       _when(use.calls_frees_at_ms), use.unsettled, money)


def render(report: StatusReport) -> str:
    server = report.server
    lines = [f"server: {'running, pid ' + str(server.pid) if server.running else 'not running'}"
             f"  journals {server.journals}", ""]
    runs = report.runs
    if not runs:
        lines.append("unfinished runs: none")
    else:
        lines.append(f"unfinished runs: {len(runs)}")
        lines.append(f"  {'run':<32}  {'tool':<20}  {'state':<36}  reserved")
        for run in runs:
            lines.append(f"  {run.run:<32}  {run.tool:<20}  {run.state:<36}  {run.reserved}")
            if run.doubt is not None:
                lines.append(f"      in doubt: {in_doubt(run.doubt)}")
                lines.append(f"      resolve:  {run.doubt.resolve}")
            if run.owner is not None:
                lines.append(f"      owner:    {run.owner}")
    lines.append("")
    for instance in report.instances or ():
        this = " (this one)" if instance.this else ""
        until = f" until {instance.lease_until}" if instance.lease_until else ""
        lines.append(f"instance {instance.instance}{this}: fencing token {instance.fence}, "
                     f"started {instance.started}, staal {instance.version}, "
                     f"lease {instance.lease}{until}, "
                     f"{instance.unsettled_runs} unfinished runs")
    if report.instances:
        lines.append("")
    if not report.quotas:
        lines.append("quotas: none")
    for quota in report.quotas:
        line = f"quota {quota.tool}: calls {_calls(quota)} in the last {_window(quota.window_ms)}"
        if quota.money is not None:
            line += (f"; money held {quota.money.held}, spent {quota.money.spent}, "
                     f"limit {quota.money.limit}")
        frees = (quota.money.frees_at if quota.money is not None else None) or quota.calls_frees_at
        if frees:
            line += f"; next frees at {frees}"
        lines.append(line)
    lines += _render_callers(report.callers)
    lines += _render_forgotten(report.forgotten)
    return "\n".join(lines)


def _calls(quota: QuotaStatus) -> str:
    return f"{quota.calls}" + (f"/{quota.calls_limit}" if quota.calls_limit else "")


def _render_forgotten(forgotten: tuple[ForgottenRun, ...]) -> list[str]:
    """Runs whose once key was released; nothing at all without any."""
    if not forgotten:
        return []
    lines = ["", f"forgotten once keys: {len(forgotten)} (the next identical call starts a new run)"]
    for run in forgotten:
        lines.append(f"  {run.run:<32}  {run.tool:<20}  ended {run.outcome} "
                     f"{run.ended}, key forgotten {run.forgotten}")
    return lines


def _window(ms: int) -> str:
    return f"{ms // 60000} min" if ms < 3_600_000 else f"{ms // 3_600_000} h"


def _render_callers(callers: tuple[CallerStatus, ...]) -> list[str]:
    """Each authenticated caller's use; nothing at all without any (stdio,
    or HTTP without auth: the report reads as it always has)."""
    lines = [""] if callers else []
    for caller in callers:
        line = (f"caller {caller.caller} (profile {caller.profile or '-'}): "
                f"runs {caller.runs}, unsettled {caller.unsettled_runs}")
        rate = caller.rate
        if rate is not None:
            line += f"; rate {rate.calls}/{rate.calls_limit} in the last {_window(rate.window_ms)}"
        lines.append(line)
        for quota in caller.quotas or ():
            lines.append(f"  quota {quota.tool}: calls {_calls(quota)} in the last "
                         f"{_window(quota.window_ms)}")
    return lines


def in_doubt(doubt: Doubt) -> str:
    """The stop message, which names its op itself unless it is not the
    engine's usual one."""
    message = doubt.message or ""
    prefix = f"op {doubt.op}"
    return message if message.startswith(prefix) else f"{prefix}: {message}".rstrip(": ")
