"""One instance racing others on a shared PostgreSQL store, for
tests/supervisor/store/postgres/test_store.py: `python -m tests.helpers.store_racer DSN INSTANCE N`
opens the ledger, says "ready", waits for "go" on stdin, then tries N
reserves against a quota of QUOTA_CALLS calls and N with one once key, and
prints what it got as JSON."""

from __future__ import annotations

import json
import sys

from staal.manifest.durations import Duration
from staal.manifest.model import QuotaConfig
from staal.records.ledger_records import OnceHold
from staal.runtime.clock import SYSTEM_CLOCK
from staal.supervisor.store.ledger import Existing, Reserved
from staal.supervisor.store.postgres.ledger import PostgresLedger

QUOTA_CALLS = 5
KEY = OnceHold(key="c" * 64, args="d" * 64, keep_ms=None)


def main() -> None:
    dsn, instance, tries = sys.argv[1], sys.argv[2], int(sys.argv[3])
    quota = QuotaConfig(window=Duration.parse("1h"), calls=QUOTA_CALLS)
    with PostgresLedger.open(dsn, instance, SYSTEM_CLOCK) as ledger:
        print("ready", flush=True)
        if sys.stdin.readline().strip() != "go":
            raise SystemExit("expected go")
        quota_runs, once_runs, existing = [], [], 0
        for _ in range(tries):
            got = ledger.reserve_call("quota-tool", quota, 1, (), None)
            if isinstance(got, Reserved):
                quota_runs.append(got.run)
            got = ledger.reserve_call("once-tool", None, 1, (), KEY)
            if isinstance(got, Reserved):
                once_runs.append(got.run)
            elif isinstance(got, Existing):
                existing += 1
        print(json.dumps({"quota": quota_runs, "once": once_runs, "existing": existing}),
              flush=True)


if __name__ == "__main__":
    main()
