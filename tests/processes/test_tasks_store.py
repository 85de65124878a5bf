"""Tasks on the PostgreSQL store (issue 28 item 3): a task is its run, read
from the shared store, so a task created through one instance is followed
and fetched through another, which never ran it."""

from __future__ import annotations

from pathlib import Path

from staal.protocol.mcp.revisions import CLIENT_CAPABILITIES_KEY
from staal.protocol.mcp.tasks import TASKS_EXTENSION
from tests.helpers.http_servers import HttpServer
from tests.helpers.pg_store import PgStore
from tests.helpers.servers import Site

ENV = "STAAL_STORE_DSN"
STORE = {"postgres": {"dsn": {"env": ENV}}}
COUNT = """
def main(n: int) -> dict:
    return {"n": n}
"""
WITH_TASKS = {CLIENT_CAPABILITIES_KEY: {"extensions": {TASKS_EXTENSION: {}}}}


def task_site(root: Path) -> Site:
    root.mkdir()
    site = Site(root)
    site.program("count.py", COUNT)
    site.write([{"name": "count", "program": "count.py", "task": "required"}], store=STORE)
    return site


def test_a_task_created_through_one_instance_is_followed_through_another(
        tmp_path: Path, pg_store: PgStore) -> None:
    env = {ENV: pg_store.dsn}
    with HttpServer(task_site(tmp_path / "a"), env) as a, \
            HttpServer(task_site(tmp_path / "b"), env) as b:
        created = a.modern("tools/call", {"name": "count", "arguments": {"n": 7}}, **WITH_TASKS)
        assert created.status_code == 200, created.text
        task_id = created.json()["result"]["taskId"]
        # b never ran it: tasks/result waits on the store until the run's end is there.
        result = b.legacy("tasks/result", {"taskId": task_id}).json()["result"]
        assert result["structuredContent"] == {"result": {"n": 7}}
        got = b.modern("tasks/get", {"taskId": task_id}, **WITH_TASKS).json()["result"]
        assert got["status"] == "completed" and got["result"]["structuredContent"] == {"result": {"n": 7}}
        assert "run_started" not in b.stderr.text
    assert [row[0] for row in pg_store.rows("SELECT run FROM staal_runs")] == [task_id]
