"""The PostgreSQL ledger's statements that write a run's events, each a
transaction by itself or the last of one (supervisor/store/postgres/ledger.py
uses them): the time of what they write is computed in the statement, so no
other write can come between the reading of the key's last time and the row.
"""

from staal.supervisor.store.postgres.decisions import LATEST

# A reserve no key decides on: stamped in the statement that inserts it.
RESERVE = (
    "INSERT INTO staal_runs (run, tool, reserved_ms, seq, event, owner, fence, caller, "
    "calls_used, money_used) "
    "SELECT %(run)s, %(tool)s, t, nextval('staal_event_seq'), "
    "jsonb_set(%(event)s, '{time}', to_jsonb(t)), %(me)s, %(fence)s, %(caller)s, "
    "%(calls)s, %(money)s "
    f"FROM (SELECT greatest(%(now)s, ({LATEST})) AS t) AS stamp RETURNING reserved_ms")
# A run's end, only by its owner under its current token: the run's row is
# marked ended (locking it, so a takeover waits), what it counts in its
# windows set (a settle: its charges; a release: nothing) and the end
# inserted, in one statement stamped no earlier than its reserve nor its
# tool's last reserve.
END = (
    "WITH owned AS (UPDATE staal_runs r SET ended = true, "
    "calls_used = CASE WHEN %(kind)s = 'release' THEN 0 ELSE r.calls_used END, "
    "money_used = %(money)s FROM staal_instances i "
    "WHERE r.run = %(run)s AND NOT r.ended AND r.owner = %(me)s AND i.instance = r.owner "
    "AND i.fence = %(fence)s RETURNING r.run, r.event, greatest(%(now)s, r.reserved_ms, "
    "(SELECT max(reserved_ms) FROM staal_runs t WHERE t.tool = r.tool)) AS t) "
    "INSERT INTO staal_ends (run, kind, ended_ms, seq, event) SELECT run, %(kind)s, t, "
    "nextval('staal_event_seq'), jsonb_set(%(event)s, '{time}', to_jsonb(t)) FROM owned "
    "RETURNING ended_ms, (SELECT event FROM owned)")
# Why a run could not be ended: whether it exists, how it ended, whose it is.
WHY_NOT = ("SELECT e.kind, r.owner = %(me)s AND i.fence = %(fence)s FROM staal_runs r "
            "LEFT JOIN staal_ends e ON e.run = r.run "
            "LEFT JOIN staal_instances i ON i.instance = r.owner WHERE r.run = %(run)s")
# Where the ledger's time stands at start (the last events written), and the
# last forget, after which forgets are told to `on_forget`.
START = ("SELECT greatest(0, (SELECT reserved_ms FROM staal_runs ORDER BY seq DESC LIMIT 1), "
          "(SELECT ended_ms FROM staal_ends ORDER BY seq DESC LIMIT 1), "
          "(SELECT forgotten_ms FROM staal_forgets ORDER BY seq DESC LIMIT 1)), "
          "(SELECT coalesce(max(seq), 0) FROM staal_forgets)")
