"""The test command starts the services the tests need (tests/helpers/services.py):
here against stand-ins for `pg_isready` and `pg_ctlcluster`, so the shared
PostgreSQL server other test runs use is never stopped or started."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import services

LOCAL = services.DEFAULT_POSTGRES_DSN


class FakePostgres:
    """`pg_isready` answers once `pg_ctlcluster ... start` ran (or at once,
    if it was running); each records its arguments."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch, running: bool) -> None:
        self.calls = root / "calls"
        self.up = root / "up"
        if running:
            self.up.touch()
        bin_dir = root / "bin"
        bin_dir.mkdir()
        self.stub(bin_dir / "pg_isready", f'[ -e "{self.up}" ]')
        self.stub(bin_dir / "pg_ctlcluster", f'touch "{self.up}"')
        clusters = root / "etc-postgresql"
        (clusters / "15" / "main").mkdir(parents=True)
        (clusters / "16" / "main").mkdir(parents=True)
        monkeypatch.setattr(services, "CLUSTERS", clusters)
        monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")

    def stub(self, path: Path, then: str) -> None:
        path.write_text(f'#!/bin/sh\necho "{path.name} $*" >> "{self.calls}"\n{then}\n')
        path.chmod(0o755)

    def ran(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []


def test_a_local_postgresql_that_does_not_answer_is_started_with_pg_ctlcluster(
        tmp_path, monkeypatch):
    fake = FakePostgres(tmp_path, monkeypatch, running=False)
    monkeypatch.delenv(services.POSTGRES_ENV, raising=False)
    assert services.postgres_dsn() == LOCAL
    assert fake.ran() == [f"pg_isready -q -d {LOCAL}",
                          "pg_ctlcluster --skip-systemctl-redirect 15 main start",
                          f"pg_isready -q -d {LOCAL}"]


def test_the_dsn_defaults_to_the_local_server_and_is_exported_to_what_tests_start(
        tmp_path, monkeypatch):
    FakePostgres(tmp_path, monkeypatch, running=True)
    monkeypatch.delenv(services.POSTGRES_ENV, raising=False)
    services.postgres_dsn()
    assert os.environ[services.POSTGRES_ENV] == LOCAL


def test_a_running_postgresql_is_not_started_again(tmp_path, monkeypatch):
    fake = FakePostgres(tmp_path, monkeypatch, running=True)
    monkeypatch.setenv(services.POSTGRES_ENV, LOCAL)
    assert services.postgres_dsn() == LOCAL
    assert fake.ran() == [f"pg_isready -q -d {LOCAL}"]


def test_a_dsn_naming_another_server_is_checked_and_never_started(tmp_path, monkeypatch):
    fake = FakePostgres(tmp_path, monkeypatch, running=False)
    other = "host=db.example port=5432 dbname=shop user=ci"
    monkeypatch.setenv(services.POSTGRES_ENV, other)
    with pytest.raises(services.ServiceMissing, match="does not accept connections"):
        services.postgres_dsn()
    assert fake.ran() == [f"pg_isready -q -d {other}"]


def test_without_postgresql_installed_the_failure_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv(services.POSTGRES_ENV, LOCAL)
    with pytest.raises(services.ServiceMissing, match="apt-get install postgresql"):
        services.postgres_dsn()
