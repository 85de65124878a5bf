"""`python -m tests.lease_model --report`: explore the model at a bound and
print what was explored, each violation with the trace reaching it, and last
the line `states N, violations M`."""

from __future__ import annotations

import argparse
import sys

from tests.lease_model.search import Result, explore
from tests.lease_model.state import Budget, Config, State, Variant

VARIANTS = {
    "faithful": Variant(),
    "line-check": Variant("line-check", append_checks_line=True),
    "no-renew-while-starting": Variant("no-renew-while-starting", no_renew_while_starting=True),
    "no-append-fence": Variant("no-append-fence", skip_append_fence=True),
    "no-end-check": Variant("no-end-check", skip_end_fence=True),
    "register-keeps-token": Variant("register-keeps-token", register_keeps_token=True),
    "redo-in-doubt": Variant("redo-in-doubt", redo_in_doubt=True),
    "takeover-released-only": Variant("takeover-released-only", takeover_released_only=True),
    "takeover-takes-held": Variant("takeover-takes-held", takeover_takes_held=True),
    "takes-held-line-check": Variant("takes-held-line-check", takeover_takes_held=True,
                                     append_checks_line=True),
}


def parse(argv: list[str]) -> tuple[Config, bool]:
    p = argparse.ArgumentParser(prog="python -m tests.lease_model", description=__doc__)
    p.add_argument("--report", action="store_true", help="print the bound, counts and traces")
    p.add_argument("--variant", choices=sorted(VARIANTS), default="faithful")
    p.add_argument("--skews", default="0,0,1", help="each instance's clock minus real time, ticks")
    p.add_argument("--lease", type=int, default=2, help="the lease, in ticks (renewed every tick)")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--kills", type=int, default=1)
    p.add_argument("--pauses", type=int, default=1)
    p.add_argument("--db-restarts", type=int, default=0)
    p.add_argument("--duplicates", type=int, default=0)
    a = p.parse_args(argv)
    skews = tuple(int(x) for x in a.skews.split(","))
    if len(skews) != 3:
        p.error(f"--skews: 3 instances need 3 skews, got {a.skews!r}")
    budget = Budget(a.runs, a.kills, a.pauses, a.db_restarts, a.duplicates)
    return Config(skews, a.lease, budget, VARIANTS[a.variant]), a.report


def describe(s: State) -> str:
    procs = []
    for i, (p, old) in enumerate(zip(s.procs, s.stale, strict=True)):
        text = "dead" if p is None else (f"{p.status}/{p.lease}{' starting' if p.starting else ''}"
                                         f" holds {[h[:2] for h in p.held]}")
        if old is not None:
            text += f" + old {old.status}/{old.lease} holds {[h[:2] for h in old.held]}"
        procs.append(f"i{i} {text}")
    runs = [f"run{n} owner i{r.owner} journal {r.journal or '-'}{' ' + r.end if r.end else ''}"
            f"{' waiting' if r.waiting else ''} actions {r.actions}" for n, r in enumerate(s.runs)]
    db = "db up" if s.db_up else "db DOWN"
    return f"{db}; leases-now {s.leases}; " + "; ".join(procs + runs)


def report(config: Config, result: Result) -> str:
    lines = [f"model: {config.variant.name}; 3 instances, clock skews {config.skews} ticks, "
             f"lease {config.lease} ticks renewed every tick",
             f"bound: {config.budget.runs} call(s), {config.budget.kills} kill(s), "
             f"{config.budget.pauses} pause(s), {config.budget.db_restarts} database restart(s), "
             f"{config.budget.duplicates} second registration(s); ticks unbounded (time is "
             "relative to now)",
             f"explored: {result.states} states, {result.transitions} transitions, "
             f"depth {result.depth}; checked 5 safety invariants and 1 liveness property"]
    for v in result.violations:
        lines.append(f"VIOLATION {v.invariant}: {v.message}")
        for n, (label, state) in enumerate(v.trace):
            lines.append(f"  {n:3d}. {label}\n       {describe(state)}")
    lines.append(f"states {result.states}, violations {len(result.violations)}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    config, verbose = parse(argv)
    result = explore(config)
    if verbose:
        print(report(config, result))
    else:
        print(f"states {result.states}, violations {len(result.violations)}")
    return 1 if result.violations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
