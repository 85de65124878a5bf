"""`staal-supervisor check MANIFEST` checks what `serve` checks at start,
programs and configs included (in a worker, as at start): a manifest
`check` calls valid is one `serve` starts on, and each problem reads the
same in both."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.servers import RawServer, Site, server_env

LOOKUP = """
from staal.caps import SqliteRead

def main(order: str, db: SqliteRead) -> dict:
    return {"rows": db.query("SELECT 1", [])}
"""

MISTAKES = {
    "a syntax error in the program": (
        "def main(order: str) -> dict\n    return {}\n", {}),
    "a parameter whose capability differs from its grant's": (
        "from staal.caps import HttpPost\n\ndef main(order: str, db: HttpPost) -> dict:\n"
        "    return {}\n", {"db": {"cap": "net.http.get", "only": ["https://example.com/*"]}}),
    "a grant naming no parameter": (
        "def main(order: str) -> dict:\n    return {}\n",
        {"db": {"cap": "net.http.get", "only": ["https://example.com/*"]}}),
}


def check(manifest: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "check", str(manifest)],
                          capture_output=True, text=True, timeout=120, env=server_env(), check=False)


def serve_start(site: Site) -> list[str]:
    """What serve refuses at start: the problems of its startup_failed event."""
    with RawServer(site) as server:
        server.close_stdin()
        assert server.wait_exit() == 2
        (failed,) = server.stderr.events("startup_failed")
    assert server.messages() == []  # nothing answered
    return failed["message"].split("; tools ")


def site_with(tmp_path: Path, source: str, grants: dict) -> Site:
    tmp_path.mkdir(exist_ok=True)
    site = Site(tmp_path)
    site.program("lookup.py", source)
    site.write([{"name": "lookup", "program": "lookup.py", "grants": grants}])
    return site


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_check_refuses_what_serve_refuses_with_the_same_text(tmp_path, mistake):
    source, grants = MISTAKES[mistake]
    site = site_with(tmp_path, source, grants)
    checked = check(site.manifest)
    refused = serve_start(site)
    assert checked.returncode == 2 and checked.stdout == ""
    lines = checked.stderr.splitlines()
    assert lines[0] == f"{site.manifest.resolve()}: {len(lines) - 1} problem" + (
        "s" if len(lines) > 2 else "")
    assert "; tools ".join(line.strip() for line in lines[1:]) == "; tools ".join(refused)
    assert all(line.strip().startswith("tools 'lookup': ") for line in lines[1:])
    assert not site.journals.exists() or site.journal_files() == []


def test_check_names_each_of_the_three_mistakes(tmp_path):
    said = {}
    for number, mistake in enumerate(sorted(MISTAKES)):
        source, grants = MISTAKES[mistake]
        said[mistake] = check(site_with(tmp_path / str(number), source, grants).manifest).stderr
    assert "program: line 1: expected ':'" in said["a syntax error in the program"]
    assert "net.http.get" in said["a parameter whose capability differs from its grant's"]
    assert "tools 'lookup': grants.db: names no parameter of main()" in said[
        "a grant naming no parameter"]


def test_a_manifest_check_calls_valid_is_one_serve_starts_on(tmp_path):
    (tmp_path / "shop.db").write_bytes(b"")
    site = site_with(tmp_path, LOOKUP, {"db": {"cap": "db.sqlite.read", "path": "shop.db"}})
    checked = check(site.manifest)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout == f"{site.manifest.resolve()}: valid: 1 tool (lookup)\n"
    with RawServer(site) as server:
        server.initialize()
        listed = server.call("tools/list")["result"]["tools"]
        server.close_stdin()
        assert server.wait_exit() == 0
    assert [t["name"] for t in listed] == ["lookup", "staal_run_status"]


def test_a_sqlite_grant_whose_database_does_not_exist_is_refused_at_check_and_at_start(tmp_path):
    site = site_with(tmp_path, LOOKUP, {"db": {"cap": "db.sqlite.read", "path": "shop.db"}})
    problem = (f"tools[0].grants.db.path: no database file at {(tmp_path / 'shop.db').resolve()} "
               "(a grant never creates its database)")
    checked = check(site.manifest)
    assert checked.returncode == 2 and problem in checked.stderr
    with RawServer(site) as server:
        server.close_stdin()
        assert server.wait_exit() == 2
        (refused,) = server.stderr.events("manifest_refused")
    assert refused["problems"] == [problem]
    assert not (tmp_path / "shop.db").exists()  # nothing created it


def test_a_database_removed_after_the_start_fails_the_call_and_is_not_created(tmp_path):
    (tmp_path / "shop.db").write_bytes(b"")
    site = site_with(tmp_path, LOOKUP, {"db": {"cap": "db.sqlite.read", "path": "shop.db"}})
    with RawServer(site) as server:
        server.initialize()
        (tmp_path / "shop.db").unlink()
        result = server.call_tool("lookup", {"order": "o1"})
        server.close_stdin()
        assert server.wait_exit() == 0
    assert result["isError"] is True and "no database file there" in result["content"][0]["text"]
    assert not (tmp_path / "shop.db").exists()
