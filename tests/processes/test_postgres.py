"""`db.postgres.read` and `db.postgres.write` end to end: `staal run` and
`staal resume` processes acting on a real PostgreSQL server.

The server is `STAAL_TEST_POSTGRES_DSN`, else the local one at
127.0.0.1:5432, which the `postgres_dsn` fixture starts if it is not running
(tests/helpers/services.py). These tests are never skipped: without a server they fail.
Each test works in a schema of its own, dropped afterwards.
"""

from __future__ import annotations

import datetime
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.helpers.runs import KILL_AT_INTENT, KILL_AT_OUTCOME, Workspace

NET = {"timeout_ms": 5000, "connect_timeout_ms": 5000}
# The grant names the variable; only the run's environment holds the value.
ENV = "SHOP_DSN"


@dataclass
class Shop:
    dsn: str
    schema: str

    def rows(self) -> list[tuple]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return conn.execute(f"SELECT name, total FROM {self.schema}.orders ORDER BY id").fetchall()

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {ENV: self.dsn, **(extra or {})}


@pytest.fixture
def shop(postgres_dsn: str) -> Iterator[Shop]:
    dsn = postgres_dsn
    schema = f"staal_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.orders (id serial PRIMARY KEY, name text, "
                     "total integer, price numeric(10, 2), at timestamptz, day date, "
                     "receipt bytea, ref uuid, tags text[], extra jsonb, paid boolean)")
        conn.execute(f"INSERT INTO {schema}.orders (name, total, price, at, day, receipt, ref, "
                     "tags, extra, paid) VALUES ('o1', 100, 12.50, '2026-01-02 03:04:05+00', "
                     "'2026-01-02', '\\xc0ffee', '6a2f41a3-c4e1-4b5f-9bb6-0a8c2f1c2d3e', "
                     "ARRAY['a', 'b'], '{\"k\": [1, 2.5, null]}', true)")
    try:
        yield Shop(dsn, schema)
    finally:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def workspace(tmp_path: Path, shop: Shop, program: str, cap: str = "db.postgres.write",
              inputs: dict | None = None, net: dict | None = None, **grant) -> Workspace:
    ws = Workspace(tmp_path)
    ws.program(f"SCHEMA = {shop.schema!r}\n" + program)
    ws.config(grants={"db": {"cap": cap, "dsn": {"env": ENV}, **grant}},
              inputs={"name": "o2"} if inputs is None else inputs, net=net or NET)
    return ws


INSERT = """
from staal.caps import PostgresWrite

def main(name: str, db: PostgresWrite) -> dict:
    changed = db.execute(f"INSERT INTO {SCHEMA}.orders (name, total) VALUES (%s, %s)", [name, 500])
    rows = db.query(f"SELECT name, total FROM {SCHEMA}.orders WHERE name = %(name)s", {"name": name})
    return {"changed": changed, "rows": rows}
"""


# -- reads -----------------------------------------------------------------------


def test_a_query_returns_its_rows_as_objects_of_json_values(tmp_path, shop):
    ws = workspace(tmp_path, shop, """
from staal.caps import PostgresRead

def main(db: PostgresRead) -> list:
    return db.query(f"SELECT * FROM {SCHEMA}.orders WHERE total >= %s", [100])
""", cap="db.postgres.read", inputs={})
    done = ws.run(env=shop.env())
    assert done.code == 0, done.stderr
    (row,) = done.outcome["result"]
    assert row == {
        "id": 1, "name": "o1", "total": 100, "price": "12.50", "day": "2026-01-02",
        "at": row["at"], "receipt": "c0ffee", "ref": "6a2f41a3-c4e1-4b5f-9bb6-0a8c2f1c2d3e",
        "tags": ["a", "b"], "extra": {"k": [1, 2.5, None]}, "paid": True,
    }
    at = datetime.datetime.fromisoformat(row["at"])  # ISO 8601, with the session's offset
    assert at == datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    assert list(row) == sorted(row)  # as a replayed row has them
    (intent,) = ws.records("intent")
    assert (intent["cap"], intent["action"]) == ("db.postgres.read", "query")
    assert ws.records("outcome")[0]["result"] == done.outcome["result"]


def test_a_value_with_no_json_form_is_refused_naming_its_column(tmp_path, shop):
    ws = workspace(tmp_path, shop, """
from staal.caps import PostgresRead

def main(db: PostgresRead) -> list:
    return db.query("SELECT interval '1 day' AS wait")
""", cap="db.postgres.read", inputs={})
    done = ws.run(env=shop.env())
    assert done.outcome["failure"]["kind"] == "action"
    assert "column 'wait' holds a timedelta" in done.outcome["failure"]["message"]


def test_a_write_through_a_read_grant_is_refused_by_postgresql_and_changes_nothing(tmp_path, shop):
    ws = workspace(tmp_path, shop, """
from staal.caps import PostgresRead

def main(db: PostgresRead) -> list:
    return db.query(f"INSERT INTO {SCHEMA}.orders (name, total) VALUES ('o9', 9) RETURNING id")
""", cap="db.postgres.read", inputs={})
    done = ws.run(env=shop.env())
    assert done.code == 1
    failure = done.outcome["failure"]
    assert failure["kind"] == "action"
    assert "cannot execute INSERT in a read-only transaction" in failure["message"]
    assert shop.rows() == [("o1", 100)]


def test_a_query_through_a_write_grant_cannot_write_either(tmp_path, shop):
    ws = workspace(tmp_path, shop, """
from staal.caps import PostgresWrite

def main(db: PostgresWrite) -> list:
    return db.query(f"UPDATE {SCHEMA}.orders SET total = 0 RETURNING id")
""", inputs={})
    done = ws.run(env=shop.env())
    assert "read-only transaction" in done.outcome["failure"]["message"]
    assert shop.rows() == [("o1", 100)]


# -- writes ----------------------------------------------------------------------


def test_an_execute_commits_and_is_journaled_as_a_write(tmp_path, shop):
    ws = workspace(tmp_path, shop, INSERT)
    done = ws.run(env=shop.env())
    assert done.code == 0, done.stderr
    assert done.outcome["result"] == {"changed": 1, "rows": [{"name": "o2", "total": 500}]}
    assert shop.rows() == [("o1", 100), ("o2", 500)]
    first, second = ws.records("intent")
    assert (first["cap"], first["action"]) == ("db.postgres.write", "execute")
    assert (second["cap"], second["action"]) == ("db.postgres.write", "query")
    assert ws.records("outcome")[0]["result"] == 1


def test_an_execute_returns_how_many_rows_it_changed_and_runs_one_statement(tmp_path, shop):
    ws = workspace(tmp_path, shop, """
from staal import ActionFailed
from staal.caps import PostgresWrite

def main(db: PostgresWrite) -> list:
    db.execute(f"INSERT INTO {SCHEMA}.orders (name, total) VALUES ('o2', 1), ('o3', 2)")
    out = [db.execute(f"UPDATE {SCHEMA}.orders SET total = total + 1"),
           db.execute(f"CREATE TABLE {SCHEMA}.notes (text text)")]
    for sql in (f"DELETE FROM {SCHEMA}.orders; DELETE FROM {SCHEMA}.notes", "BEGIN"):
        try:
            db.execute(sql)
        except ActionFailed as exc:
            out.append(str(exc))
    return out
""", inputs={})
    done = ws.run(env=shop.env())
    assert done.code == 0, done.stderr
    updated, created, several, begin = done.outcome["result"]
    assert (updated, created) == (3, 0)
    assert "one statement at a time" in several
    assert "leaves a transaction open" in begin
    assert shop.rows() == [("o1", 101), ("o2", 2), ("o3", 3)]
    assert ws.records("stopped") == []


# -- kill and resume ----------------------------------------------------------------


def test_killed_after_a_writes_outcome_the_resume_replays_it_and_writes_once(tmp_path, shop):
    ws = workspace(tmp_path, shop, INSERT)
    assert ws.run(env=shop.env(KILL_AT_OUTCOME)).code == -9
    assert shop.rows() == [("o1", 100), ("o2", 500)]

    done = ws.resume(env=shop.env())
    assert done.code == 0, done.stderr
    assert done.outcome["result"] == {"changed": 1, "rows": [{"name": "o2", "total": 500}]}
    assert shop.rows() == [("o1", 100), ("o2", 500)]


def test_killed_after_a_writes_intent_the_resume_waits_for_an_operator_then_writes_once(tmp_path, shop):
    ws = workspace(tmp_path, shop, INSERT)
    assert ws.run(env=shop.env(KILL_AT_INTENT)).code == -9
    assert shop.rows() == [("o1", 100)]

    stopped = ws.resume(env=shop.env())
    assert stopped.code == 3, stopped.stderr
    assert stopped.outcome["outcome"] == "stopped" and stopped.outcome["op"] == 1
    assert "db.postgres.write execute through 'db'" in stopped.outcome["message"]
    assert shop.rows() == [("o1", 100)]  # the write never ran

    assert ws.staal("resolve", "--journal", "run.journal", "--op", "1", "--happened", "no").code == 0
    done = ws.resume(env=shop.env())
    assert done.code == 0, done.stderr
    assert shop.rows() == [("o1", 100), ("o2", 500)]


def test_an_operators_answer_for_an_execute_is_its_row_count(tmp_path, shop):
    ws = workspace(tmp_path, shop, INSERT)
    assert ws.run(env=shop.env(KILL_AT_INTENT)).code == -9
    base = ["resolve", "--journal", "run.journal", "--op", "1", "--happened", "yes", "--result"]
    assert ws.staal(*base, '[{"id": 2}]').code == 2
    assert ws.staal(*base, "1").code == 0
    done = ws.resume(env=shop.env())
    assert done.outcome["result"]["changed"] == 1
    assert shop.rows() == [("o1", 100)]  # the operator said it happened


# -- the broker and the secret ----------------------------------------------------------


def test_an_action_over_uses_is_refused_and_the_database_is_unchanged_by_it(tmp_path, shop):
    ws = workspace(tmp_path, shop, """
from staal.caps import PostgresWrite

def main(db: PostgresWrite) -> dict:
    db.execute(f"INSERT INTO {SCHEMA}.orders (name, total) VALUES ('o2', 2)")
    db.execute(f"INSERT INTO {SCHEMA}.orders (name, total) VALUES ('o3', 3)")
    return {}
""", inputs={}, uses=1)
    done = ws.run(env=shop.env())
    assert done.outcome["failure"] == {
        "kind": "capability",
        "message": "'db.postgres.write' allows 1 action per run; this would be action 2"}
    assert shop.rows() == [("o1", 100), ("o2", 2)]


def test_a_missing_dsn_is_refused_before_anything_is_journaled_or_run(tmp_path, shop):
    ws = workspace(tmp_path, shop, INSERT)
    done = ws.run()  # SHOP_DSN is not set
    assert done.code == 1
    assert done.outcome["failure"]["kind"] == "capability"
    assert ENV in done.outcome["failure"]["message"]
    assert ws.records("intent") == []
    assert shop.rows() == [("o1", 100)]


def test_the_dsn_never_appears_in_messages_the_journal_or_outputs(tmp_path, shop):
    password = "hunter2-" + uuid.uuid4().hex
    params = conninfo_to_dict(shop.dsn)
    secret = shop.dsn if params.get("password") else make_conninfo(shop.dsn, password=password)
    hidden = params.get("password") or password
    ws = workspace(tmp_path, shop, """
from staal import ActionFailed
from staal.caps import PostgresWrite

def main(name: str, db: PostgresWrite) -> dict:
    db.execute(f"INSERT INTO {SCHEMA}.orders (name, total) VALUES (%s, 1)", [name])
    try:
        db.query("SELECT current_setting('no.such.setting') AS x, %s AS dsn", [repr(db)])
    except ActionFailed as exc:
        said = str(exc)
    return {"said": said, "rows": db.query(f"SELECT name FROM {SCHEMA}.orders ORDER BY id")}
""")
    done = ws.run(env={ENV: secret})
    assert done.code == 0, done.stderr
    assert done.outcome["result"]["rows"] == [{"name": "o1"}, {"name": "o2"}]
    # A server it cannot reach: the connection error names no part of the secret.
    unreachable = make_conninfo(secret, port="1", host="127.0.0.1")
    ws.config(grants={"db": {"cap": "db.postgres.write", "dsn": {"env": ENV}}},
              inputs={"name": "o3"}, net=NET, name="down.json")
    down = ws.run("down.json", journal="down.journal", env={ENV: unreachable})
    assert down.outcome["failure"]["kind"] == "action"
    assert "could not connect to PostgreSQL" in down.outcome["failure"]["message"]
    assert f"${ENV}" in down.outcome["failure"]["message"]
    for text in (done.stdout, done.stderr, down.stdout, down.stderr,
                 (tmp_path / "run.journal").read_text(), (tmp_path / "down.journal").read_text()):
        assert hidden not in text
        assert secret not in text and unreachable not in text


def test_a_malformed_dsn_fails_without_quoting_it(tmp_path, shop):
    ws = workspace(tmp_path, shop, INSERT)
    secret = "postgresql//nobody:" + uuid.uuid4().hex + "@nowhere"
    done = ws.run(env={ENV: secret})
    assert done.outcome["failure"]["kind"] == "action"
    assert "not a valid PostgreSQL connection string" in done.outcome["failure"]["message"]
    assert secret.split(":")[1].split("@")[0] not in (tmp_path / "run.journal").read_text() + done.stdout
    assert shop.rows() == [("o1", 100)]


# -- timeouts ------------------------------------------------------------------------


def test_a_query_longer_than_timeout_ms_is_cancelled_and_fails(tmp_path, shop):
    ws = workspace(tmp_path, shop, """
from staal.caps import PostgresRead

def main(db: PostgresRead) -> list:
    return db.query("SELECT pg_sleep(30) AS slept")
""", cap="db.postgres.read", inputs={}, net={"timeout_ms": 300, "connect_timeout_ms": 2000})
    began = time.monotonic()
    done = ws.run(env=shop.env())
    assert time.monotonic() - began < 15
    assert done.code == 1
    assert done.outcome["failure"]["kind"] == "action"
    assert "statement timeout" in done.outcome["failure"]["message"]


def test_a_write_longer_than_timeout_ms_fails_for_certain_and_changes_nothing(tmp_path, shop):
    ws = workspace(tmp_path, shop, """
from staal.caps import PostgresWrite

def main(db: PostgresWrite) -> int:
    return db.execute(f"INSERT INTO {SCHEMA}.orders (name, total) SELECT 'late', 1 FROM pg_sleep(30)")
""", inputs={}, net={"timeout_ms": 300, "connect_timeout_ms": 2000})
    began = time.monotonic()
    done = ws.run(env=shop.env())
    assert time.monotonic() - began < 15
    assert done.code == 1, done.stdout
    assert "statement timeout" in done.outcome["failure"]["message"]
    assert ws.records("stopped") == []  # cancelled by the server: not in doubt
    assert shop.rows() == [("o1", 100)]


def test_a_server_that_never_answers_fails_the_connection_within_connect_timeout(tmp_path, shop):
    silent = socket.socket()  # accepts connections into its backlog, never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        port = silent.getsockname()[1]
        ws = workspace(tmp_path, shop, INSERT, net={"timeout_ms": 300, "connect_timeout_ms": 1000})
        began = time.monotonic()
        done = ws.run(env={ENV: make_conninfo(shop.dsn, host="127.0.0.1", port=str(port))})
        waited = time.monotonic() - began
    finally:
        silent.close()
    assert done.code == 1, done.stdout
    assert "could not connect to PostgreSQL" in done.outcome["failure"]["message"]
    assert "timeout" in done.outcome["failure"]["message"]
    assert waited < 15  # libpq waits whole seconds, at least 2
    assert ws.records("stopped") == []  # nothing was sent: it failed for certain
    assert shop.rows() == [("o1", 100)]


def test_the_timeouts_come_from_the_run_configs_net(tmp_path, shop):
    ws = workspace(tmp_path, shop, """
from staal.caps import PostgresRead

def main(db: PostgresRead) -> list:
    return db.query("SELECT current_setting('statement_timeout') AS statement, "
                    "current_setting('default_transaction_read_only') AS read_only")
""", cap="db.postgres.read", inputs={}, net={"timeout_ms": 1234, "connect_timeout_ms": 2000})
    done = ws.run(env=shop.env())
    assert done.outcome["result"] == [{"statement": "1234ms", "read_only": "on"}]
