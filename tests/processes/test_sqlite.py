"""`db.sqlite.read` and `db.sqlite.write` end to end: `staal run` and
`staal resume` processes acting on a real SQLite file that the test reads
back itself."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from staal.worker.capabilities.sql import MAX_ROWS, check_sql_result
from staal.worker.capabilities.sqlite import LOCK_TIMEOUT_S
from tests.helpers.runs import KILL_AT_INTENT, Workspace

KILL_AT_OUTCOME = {"STAAL_TEST_KILL_POINTS": "1", "STAAL_KILL_AT": "worker:outcome"}

INSERT = """
from staal.caps import SqliteWrite

def main(name: str, db: SqliteWrite) -> dict:
    changed = db.execute("INSERT INTO orders (name, total) VALUES (?, ?)", [name, 500])
    rows = db.query("SELECT name, total FROM orders WHERE name = :name", {"name": name})
    return {"changed": changed, "rows": rows}
"""


def database(path: Path) -> Path:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, name TEXT, total INTEGER, "
                     "price REAL, receipt BLOB)")
        conn.execute("INSERT INTO orders (name, total, price, receipt) "
                     "VALUES ('o1', 100, 1.5, x'c0ffee')")
    conn.close()
    return path


def rows(path: Path) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT name, total FROM orders ORDER BY id").fetchall()
    finally:
        conn.close()


def workspace(tmp_path: Path, program: str, cap: str = "db.sqlite.write", inputs: dict | None = None,
              **grant) -> Workspace:
    database(tmp_path / "shop.db")
    ws = Workspace(tmp_path)
    ws.program(program)
    ws.config(grants={"db": {"cap": cap, "path": "shop.db", **grant}},
              inputs={"name": "o2"} if inputs is None else inputs)
    return ws


# -- reads -----------------------------------------------------------------------


def test_a_query_returns_its_rows_as_objects_of_json_values(tmp_path):
    ws = workspace(tmp_path, """
from staal.caps import SqliteRead

def main(db: SqliteRead) -> list:
    return db.query("SELECT * FROM orders WHERE total >= ? ORDER BY id", (100,))
""", cap="db.sqlite.read", inputs={})
    done = ws.run()
    assert done.code == 0, done.stderr
    assert done.outcome["result"] == [
        {"id": 1, "name": "o1", "price": 1.5, "receipt": "c0ffee", "total": 100}]
    (intent,) = ws.records("intent")
    assert (intent["cap"], intent["action"], intent["param"]) == ("db.sqlite.read", "query", "db")
    (outcome,) = ws.records("outcome")
    assert outcome["ok"] is True and outcome["result"] == done.outcome["result"]
    assert done.outcome["usage"] == {"db": {"actions": 1, "charged": []}}


def test_a_query_returning_more_rows_than_the_bound_fails_saying_so(tmp_path):
    ws = workspace(tmp_path, f"""
from staal.caps import SqliteRead

def main(db: SqliteRead) -> list:
    return db.query("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                    "WHERE i < {MAX_ROWS + 1}) SELECT i FROM n")
""", cap="db.sqlite.read", inputs={})
    done = ws.run()
    assert done.code == 1
    assert done.outcome["failure"]["kind"] == "action"
    assert f"more than {MAX_ROWS} rows" in done.outcome["failure"]["message"]


def test_a_write_through_a_read_grant_fails_in_sqlite_and_changes_nothing(tmp_path):
    ws = workspace(tmp_path, """
from staal.caps import SqliteRead

def main(db: SqliteRead) -> list:
    return db.query("INSERT INTO orders (name, total) VALUES ('o9', 9) RETURNING id")
""", cap="db.sqlite.read", inputs={})
    done = ws.run()
    assert done.code == 1
    failure = done.outcome["failure"]
    assert failure["kind"] == "action"
    assert "attempt to write a readonly database" in failure["message"]
    assert rows(tmp_path / "shop.db") == [("o1", 100)]


def test_a_query_through_a_write_grant_cannot_write_either(tmp_path):
    # A query is a read: sent again if found in doubt, so it must never write.
    ws = workspace(tmp_path, """
from staal.caps import SqliteWrite

def main(db: SqliteWrite) -> list:
    return db.query("INSERT INTO orders (name, total) VALUES ('o9', 9) RETURNING id")
""", inputs={})
    done = ws.run()
    assert done.outcome["failure"]["kind"] == "action"
    assert "readonly" in done.outcome["failure"]["message"]
    assert rows(tmp_path / "shop.db") == [("o1", 100)]


# -- writes ----------------------------------------------------------------------


def test_an_execute_commits_and_is_journaled_as_a_write(tmp_path):
    ws = workspace(tmp_path, INSERT)
    done = ws.run()
    assert done.code == 0, done.stderr
    assert done.outcome["result"] == {"changed": 1, "rows": [{"name": "o2", "total": 500}]}
    assert rows(tmp_path / "shop.db") == [("o1", 100), ("o2", 500)]
    kinds = [r["type"] for r in ws.journal_lines()]
    assert kinds == ["header", "intent", "outcome", "intent", "outcome", "end"]
    first, second = ws.records("intent")
    assert (first["cap"], first["action"]) == ("db.sqlite.write", "execute")
    assert (second["cap"], second["action"]) == ("db.sqlite.write", "query")
    assert ws.records("outcome")[0]["result"] == 1


def test_an_execute_returns_how_many_rows_it_changed(tmp_path):
    ws = workspace(tmp_path, """
from staal.caps import SqliteWrite

def main(db: SqliteWrite) -> list:
    db.execute("INSERT INTO orders (name, total) VALUES ('o2', 1), ('o3', 2)")
    return [db.execute("UPDATE orders SET total = total + 1"),
            db.execute("CREATE TABLE notes (text TEXT)"),
            db.execute("DELETE FROM orders WHERE name = ?", ["nobody"])]
""", inputs={})
    done = ws.run()
    assert done.outcome["result"] == [3, 0, 0]
    assert rows(tmp_path / "shop.db") == [("o1", 101), ("o2", 2), ("o3", 3)]


def test_a_failed_statement_fails_the_action_for_certain_and_does_not_stop_the_run(tmp_path):
    ws = workspace(tmp_path, """
from staal import ActionFailed
from staal.caps import SqliteWrite

def main(db: SqliteWrite) -> list:
    said = []
    for sql in ("INSERT INTO nowhere VALUES (1)",
                "INSERT INTO orders (name) VALUES ('a'); INSERT INTO orders (name) VALUES ('b')",
                "BEGIN"):
        try:
            db.execute(sql)
        except ActionFailed as exc:
            said.append(str(exc))
    db.execute("INSERT INTO orders (name, total) VALUES ('o2', 2)")
    return said
""", inputs={})
    done = ws.run()
    assert done.code == 0, done.stderr
    missing, several, begin = done.outcome["result"]
    assert "no such table: nowhere" in missing
    assert "one statement at a time" in several
    assert "leaves a transaction open" in begin
    # BEGIN was rolled back: the next execute committed on its own.
    assert rows(tmp_path / "shop.db") == [("o1", 100), ("o2", 2)]
    assert ws.records("stopped") == []


def test_a_grant_never_creates_its_database(tmp_path):
    ws = Workspace(tmp_path)
    ws.program(INSERT)
    ws.config(grants={"db": {"cap": "db.sqlite.write", "path": "missing.db"}}, inputs={"name": "o2"})
    done = ws.run()
    # Refused with the config, before anything runs (as a manifest is at start).
    assert done.code == 2 and done.outcome["failure"]["kind"] == "config"
    assert (f"grants.db.path: no database file at {(tmp_path / 'missing.db').resolve()}"
            in done.outcome["failure"]["message"])
    assert not (tmp_path / "missing.db").exists() and not (tmp_path / "run.journal").exists()


def test_a_grant_reaches_only_its_own_database_file(tmp_path):
    ws = workspace(tmp_path, """
from staal.caps import SqliteWrite

def main(db: SqliteWrite) -> int:
    return db.execute("ATTACH DATABASE 'other.db' AS other")
""", inputs={})
    done = ws.run()
    assert done.outcome["failure"]["kind"] == "action"
    assert "not authorized" in done.outcome["failure"]["message"]
    assert not (tmp_path / "other.db").exists()


# -- kill and resume ----------------------------------------------------------------


def test_killed_after_a_writes_outcome_the_resume_replays_it_and_writes_once(tmp_path):
    ws = workspace(tmp_path, INSERT)
    killed = ws.run(env=KILL_AT_OUTCOME)
    assert killed.code == -9
    assert rows(tmp_path / "shop.db") == [("o1", 100), ("o2", 500)]

    done = ws.resume()
    assert done.code == 0, done.stderr
    assert done.outcome["result"] == {"changed": 1, "rows": [{"name": "o2", "total": 500}]}
    assert rows(tmp_path / "shop.db") == [("o1", 100), ("o2", 500)]
    assert done.outcome["usage"] == {"db": {"actions": 2, "charged": []}}


def test_killed_after_a_writes_intent_the_resume_waits_for_an_operator_then_writes_once(tmp_path):
    ws = workspace(tmp_path, INSERT)
    assert ws.run(env=KILL_AT_INTENT).code == -9
    assert rows(tmp_path / "shop.db") == [("o1", 100)]

    stopped = ws.resume()
    assert stopped.code == 3, stopped.stderr
    assert stopped.outcome["outcome"] == "stopped" and stopped.outcome["op"] == 1
    assert "db.sqlite.write execute through 'db'" in stopped.outcome["message"]
    assert "staal resolve --journal" in stopped.outcome["message"]
    assert rows(tmp_path / "shop.db") == [("o1", 100)]  # the write never ran

    resolved = ws.staal("resolve", "--journal", "run.journal", "--op", "1", "--happened", "no")
    assert resolved.code == 0, resolved.stderr
    done = ws.resume()
    assert done.code == 0, done.stderr
    assert done.outcome["result"]["changed"] == 1
    assert rows(tmp_path / "shop.db") == [("o1", 100), ("o2", 500)]


def test_an_operators_answer_for_an_execute_is_its_row_count(tmp_path):
    ws = workspace(tmp_path, INSERT)
    assert ws.run(env=KILL_AT_INTENT).code == -9
    base = ["resolve", "--journal", "run.journal", "--op", "1", "--happened", "yes", "--result"]
    for wrong in ('[{"id": 1}]', "true", "-1", '"1"'):
        refused = ws.staal(*base, wrong)
        assert refused.code == 2, wrong
        assert "an integer" in refused.stderr
    assert ws.records("resolved") == []

    assert ws.staal(*base, "1").code == 0
    done = ws.resume()
    assert done.code == 0, done.stderr
    assert done.outcome["result"]["changed"] == 1
    assert rows(tmp_path / "shop.db") == [("o1", 100)]  # the operator said it happened


def test_a_query_cut_off_at_its_intent_is_read_again_and_never_asked_of_an_operator(tmp_path):
    ws = workspace(tmp_path, """
from staal.caps import SqliteRead

def main(db: SqliteRead) -> list:
    return db.query("SELECT name FROM orders")
""", cap="db.sqlite.read", inputs={})
    assert ws.run(env=KILL_AT_INTENT).code == -9
    (intent,) = ws.records("intent")
    assert intent["read"] is True
    refused = ws.staal("resolve", "--journal", "run.journal", "--op", "1", "--happened", "yes",
                       "--result", '[{"name": "told"}]')
    assert refused.code == 2
    assert "op 1 is not in doubt" in refused.stderr
    assert ws.records("resolved") == []
    done = ws.resume()
    assert done.code == 0, done.stderr
    assert done.outcome["result"] == [{"name": "o1"}]


def test_the_result_checks_name_what_each_action_returns():
    check_sql_result("query", [])
    check_sql_result("query", [{"a": None}])
    check_sql_result("execute", 0)
    with pytest.raises(ValueError, match=r"^a query's result is its rows: a list of objects, "):
        check_sql_result("query", [1])
    with pytest.raises(ValueError) as caught:
        check_sql_result("execute", 1.0)
    assert str(caught.value) == (
        "an execute's result is the number of rows it changed: an integer, 0 or more")


# -- the broker --------------------------------------------------------------------


def test_an_action_over_uses_is_refused_and_the_database_is_unchanged_by_it(tmp_path):
    ws = workspace(tmp_path, """
from staal.caps import SqliteWrite

def main(db: SqliteWrite) -> dict:
    db.execute("INSERT INTO orders (name, total) VALUES ('o2', 2)")
    db.execute("INSERT INTO orders (name, total) VALUES ('o3', 3)")
    return {}
""", inputs={}, uses=1)
    done = ws.run()
    assert done.code == 1
    assert done.outcome["failure"] == {
        "kind": "capability",
        "message": "'db.sqlite.write' allows 1 action per run; this would be action 2"}
    assert rows(tmp_path / "shop.db") == [("o1", 100), ("o2", 2)]
    assert len(ws.records("intent")) == 1


@pytest.mark.parametrize("params", ['"o1"', "[{1}]", "[object()]", "{1: 'x'}", "[2**70]"])
def test_params_that_are_not_json_scalars_are_refused_before_anything_is_journaled(tmp_path, params):
    ws = workspace(tmp_path, f"""
from staal.caps import SqliteWrite

def main(db: SqliteWrite) -> int:
    return db.execute("INSERT INTO orders (name) VALUES (?)", {params})
""", inputs={})
    done = ws.run()
    assert done.outcome["failure"]["kind"] == "capability", done.outcome
    assert "params" in done.outcome["failure"]["message"]
    assert ws.records("intent") == []
    assert rows(tmp_path / "shop.db") == [("o1", 100)]


def test_a_program_may_not_open_the_database_around_the_broker(tmp_path):
    ws = workspace(tmp_path, """
import sqlite3

def main() -> int:
    sqlite3.connect("shop.db").execute("DELETE FROM orders")
    return 0
""", inputs={})
    ws.config(inputs={})
    done = ws.run()
    assert done.outcome["failure"]["kind"] == "capability"
    assert rows(tmp_path / "shop.db") == [("o1", 100)]


# -- locks ---------------------------------------------------------------------------


def test_waiting_for_a_locked_database_is_bounded_and_the_write_fails_for_certain(tmp_path):
    assert LOCK_TIMEOUT_S == 5  # seed 000 section 3: at most 5 s
    ws = workspace(tmp_path, INSERT)
    holder = sqlite3.connect(tmp_path / "shop.db", isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        began = time.monotonic()
        done = ws.run()
        waited = time.monotonic() - began
        assert done.code == 1, done.stderr
        assert done.outcome["failure"]["kind"] == "action"
        assert "database is locked" in done.outcome["failure"]["message"]
        assert LOCK_TIMEOUT_S <= waited < LOCK_TIMEOUT_S + 10
        assert ws.records("stopped") == []  # it failed for certain: nothing is in doubt
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert rows(tmp_path / "shop.db") == [("o1", 100)]
    assert ws.records("outcome")[0]["ok"] is False
