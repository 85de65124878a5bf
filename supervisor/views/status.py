"""`staal-supervisor status MANIFEST [--json]`: beside a running server,
without taking its lock or changing any file, the unfinished runs (waiting
for an operator, with the op in doubt and the exact resolve command; in
progress; interrupted and to be resumed at the next start), each tool's
quota use in its window, and each authenticated caller's use (by the
SHA-256 of its identity, which is all the ledger keeps, and its profile's
name): its runs, its rate and its own quotas."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil

from staal.errors import LogDamaged
from staal.manifest.model import Manifest, QuotaConfig
from staal.records.journal import read_journal
from staal.records.waiting import WaitingRecord, resolve_in_the_store, resolve_on_this_machine
from staal.runtime.clock import SYSTEM_CLOCK, Clock
from staal.runtime.utc import for_machines
from staal.supervisor.app.lockfile import lock_holder
from staal.supervisor.store.choice import describe_store, read_view, read_waiting, this_instance
from staal.supervisor.store.files import RunFiles
from staal.supervisor.store.ledger import LedgerState
from staal.supervisor.store.state import caller_key


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


def ledger_now_ms(state: LedgerState, clock: Clock = SYSTEM_CLOCK) -> int:
    """Now, for a reader beside the server: the later of the clock and the
    latest reservation the ledger holds, so a clock set back never puts a
    quota's window before the runs it counts (the ledger's own `now_ms` is
    the later of the clock and its last event, likewise)."""
    return max([e.reserved_ms for e in state.runs()] + [clock.now_ms()])


def _when(ms: int | None) -> str | None:
    if ms is None:
        return None
    return for_machines(ms, millis=False)


def collect(manifest: Manifest) -> dict[str, Any]:
    journals = manifest.server.journals
    view = read_view(manifest.server)
    state, me = view.state, this_instance(manifest.server)
    pid = server_pid(journals)
    waiting = read_waiting(manifest.server)
    shared = manifest.server.store is not None
    runs = [_run(entry, journals, pid is not None, waiting.get(entry.run), shared)
            if view.owners.get(entry.run, me) == me
            else _elsewhere(entry, view.owners[entry.run], waiting.get(entry.run))
            for entry in state.unsettled()]
    now = ledger_now_ms(state)
    quotas = [_quota(state.quota_use(tool.name, tool.quota, now)) for tool in manifest.tools
              if tool.quota is not None]
    report = {"server": {"running": pid is not None, "pid": pid, "journals": str(journals),
                         "store": describe_store(manifest.server)},
              "runs": runs, "quotas": quotas, "callers": _callers(manifest, state, now),
              "forgotten": _forgotten(state)}
    if view.instances:
        report["instances"] = [_instance(i, me, view.owners, state, now)
                               for i in view.instances]
    return report


def _forgotten(state: LedgerState) -> list[dict[str, Any]]:
    """Ended runs whose once key an operator released (`staal-supervisor
    forget`), while the ledger still holds them."""
    return [{"run": e.run, "tool": e.tool, "outcome": e.outcome, "ended": _when(e.ended_ms),
             "forgotten": _when(e.forgotten_ms)}
            for e in state.runs() if e.forgotten_ms is not None]


def _elsewhere(entry: Any, owner: str, record: WaitingRecord | None) -> dict[str, Any]:
    """An unfinished run another instance owns: its journal's copy is on that
    instance's disk, so the ledger's part is known here, and its waiting
    record, which is the shared store's."""
    run = {"run": entry.run, "tool": entry.tool, "reserved": _when(entry.reserved_ms),
           "state": "owned by another instance", "owner": owner}
    if record is not None:
        run.update(state="waiting_for_operator", op=record.op, message=record.message,
                   resolve=record.resolve, waiting_since=_when(record.time),
                   recorded_by=record.instance)
    return run


def _instance(instance: Any, me: str | None, owners: Mapping[str, str],
              state: LedgerState, now: int) -> dict[str, Any]:
    """One instance; its lease is live while it renews it (supervisor/recovery/lease.py)."""
    unsettled = sum(1 for e in state.unsettled() if owners.get(e.run) == instance.instance)
    until = instance.lease_until_ms
    return {"instance": instance.instance, "this": instance.instance == me,
            "fence": instance.fence, "started": _when(instance.started_ms),
            "version": instance.version, "lease_until": _when(until),
            "lease": "released" if until is None else "live" if until > now else "expired",
            "unsettled_runs": unsettled}


def _callers(manifest: Manifest, state: LedgerState, now: int) -> list[dict[str, Any]]:
    """Each caller the ledger holds runs of: its profile (as of its latest
    run), its runs, and its use of its profile's rate and quotas."""
    callers: dict[str, dict[str, Any]] = {}
    for entry in state.runs():
        if entry.caller is None:
            continue
        caller = callers.setdefault(entry.caller, {"caller": entry.caller, "runs": 0,
                                                   "unsettled_runs": 0})
        caller["profile"] = entry.profile
        caller["runs"] += 1
        caller["unsettled_runs"] += entry.unsettled
    profiles = {profile.name: profile for profile in manifest.callers or ()}
    for identity, caller in callers.items():
        profile = profiles.get(caller["profile"])
        if profile is None:
            continue
        if profile.rate is not None:
            rate = QuotaConfig(profile.rate.window, calls=profile.rate.calls)
            use = state.quota_use(caller_key(identity), rate, now)
            caller["rate"] = {"calls": use.calls, "calls_limit": use.calls_limit,
                              "window_ms": use.window_ms, "calls_frees_at": _when(use.calls_frees_at_ms)}
        caller["quotas"] = [_quota(state.quota_use(caller_key(identity, name), allowed.quota, now))
                            for name, allowed in profile.tools.items() if allowed.quota is not None]
    return list(callers.values())


def _run(entry: Any, journals: Path, serving: bool, record: WaitingRecord | None,
         shared: bool) -> dict[str, Any]:
    """A run of this instance's, from its journal (on a shared store, its
    local copy) and its waiting record."""
    files = RunFiles(journals, entry.tool, entry.run)
    run: dict[str, Any] = {"run": entry.run, "tool": entry.tool,
                           "reserved": _when(entry.reserved_ms), "journal": str(files.journal)}
    summary = None
    if files.journal.exists():
        try:
            summary = read_journal(files.journal)
        except (LogDamaged, OSError) as exc:  # a damaged journal is itself something to report
            run["problem"] = str(exc)
    stop = summary.stopped if summary is not None and summary.end is None else None
    waits = record is not None
    if stop is not None and (waits or not serving):
        run.update(state="waiting_for_operator", op=stop.op, message=stop.message,
                   resolve=_resolve(files, stop.op, shared))
    elif waits and summary is not None:
        # An operator answered the op it waited at; the server's next start resumes it.
        run["state"] = "answered: resumed at the next start"
    elif waits:
        run.update(state="waiting_for_operator", op=None, message=None,
                   resolve=_resolve(files, None, shared))
    elif serving:
        run["state"] = "in_progress"
    else:
        run["state"] = "interrupted: resumed at the next start"
    return run


def _resolve(files: RunFiles, op: int | None, shared: bool) -> str:
    """How to answer the op in doubt: on a shared store from any machine
    (the rows are the journal), else on this one, with its journal's path."""
    if shared:
        return resolve_in_the_store(files.run, op)
    return resolve_on_this_machine(files.journal, op)


def _quota(use: Any) -> dict[str, Any]:
    quota: dict[str, Any] = {"tool": use.tool, "window_ms": use.window_ms,
                             "calls": use.calls, "calls_limit": use.calls_limit,
                             "calls_frees_at": _when(use.calls_frees_at_ms),
                             "unsettled_runs": use.unsettled}
    if use.money_limit is not None:
        quota.update(money_held=str(use.money_held), money_spent=str(use.money_charged),
                     money_limit=str(use.money_limit), money_frees_at=_when(use.money_frees_at_ms))
    return quota


def render(report: dict[str, Any]) -> str:
    server = report["server"]
    lines = [f"server: {'running, pid ' + str(server['pid']) if server['running'] else 'not running'}"
             f"  journals {server['journals']}", ""]
    runs = report["runs"]
    if not runs:
        lines.append("unfinished runs: none")
    else:
        lines.append(f"unfinished runs: {len(runs)}")
        lines.append(f"  {'run':<32}  {'tool':<20}  {'state':<36}  reserved")
        for run in runs:
            lines.append(f"  {run['run']:<32}  {run['tool']:<20}  {run['state']:<36}  {run['reserved']}")
            if run["state"] == "waiting_for_operator":
                lines.append(f"      in doubt: {in_doubt(run)}")
                lines.append(f"      resolve:  {run['resolve']}")
            if "owner" in run:
                lines.append(f"      owner:    {run['owner']}")
    lines.append("")
    for instance in report.get("instances", []):
        this = " (this one)" if instance["this"] else ""
        until = f" until {instance['lease_until']}" if instance["lease_until"] else ""
        lines.append(f"instance {instance['instance']}{this}: fencing token {instance['fence']}, "
                     f"started {instance['started']}, staal {instance['version']}, "
                     f"lease {instance['lease']}{until}, "
                     f"{instance['unsettled_runs']} unfinished runs")
    if report.get("instances"):
        lines.append("")
    if not report["quotas"]:
        lines.append("quotas: none")
    for quota in report["quotas"]:
        window = _window(quota["window_ms"])
        calls = f"{quota['calls']}" + (f"/{quota['calls_limit']}" if quota["calls_limit"] else "")
        line = f"quota {quota['tool']}: calls {calls} in the last {window}"
        if "money_limit" in quota:
            line += (f"; money held {quota['money_held']}, spent {quota['money_spent']}, "
                     f"limit {quota['money_limit']}")
        frees = quota.get("money_frees_at") or quota.get("calls_frees_at")
        if frees:
            line += f"; next frees at {frees}"
        lines.append(line)
    lines += _render_callers(report.get("callers", []))
    lines += _render_forgotten(report.get("forgotten", []))
    return "\n".join(lines)


def _render_forgotten(forgotten: list[dict[str, Any]]) -> list[str]:
    """Runs whose once key was released; nothing at all without any."""
    if not forgotten:
        return []
    lines = ["", f"forgotten once keys: {len(forgotten)} (the next identical call starts a new run)"]
    for run in forgotten:
        lines.append(f"  {run['run']:<32}  {run['tool']:<20}  ended {run['outcome']} "
                     f"{run['ended']}, key forgotten {run['forgotten']}")
    return lines


def _window(ms: int) -> str:
    return f"{ms // 60000} min" if ms < 3_600_000 else f"{ms // 3_600_000} h"


def _render_callers(callers: list[dict[str, Any]]) -> list[str]:
    """Each authenticated caller's use; nothing at all without any (stdio,
    or HTTP without auth: the report reads as it always has)."""
    lines = [""] if callers else []
    for caller in callers:
        line = (f"caller {caller['caller']} (profile {caller['profile'] or '-'}): "
                f"runs {caller['runs']}, unsettled {caller['unsettled_runs']}")
        rate = caller.get("rate")
        if rate is not None:
            line += f"; rate {rate['calls']}/{rate['calls_limit']} in the last {_window(rate['window_ms'])}"
        lines.append(line)
        for quota in caller.get("quotas", ()):
            calls = f"{quota['calls']}" + (f"/{quota['calls_limit']}" if quota["calls_limit"] else "")
            lines.append(f"  quota {quota['tool']}: calls {calls} in the last "
                         f"{_window(quota['window_ms'])}")
    return lines


def in_doubt(run: dict[str, Any]) -> str:
    """The stop message, which names its op itself unless it is not the
    engine's usual one."""
    message = run.get("message") or ""
    prefix = f"op {run['op']}"
    return message if message.startswith(prefix) else f"{prefix}: {message}".rstrip(": ")
