"""Fixtures shared by the tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from tests.helpers import services
from tests.helpers.authorization import AuthorizationServer
from tests.helpers.payments import payments  # noqa: F401  (the fixture, for every test module)
from tests.helpers.pg_store import pg_store  # noqa: F401  (the fixture: a PostgreSQL store of its own)
from tests.helpers.recorder import Recorder

# Hypothesis's per-example deadline is a timing assertion: on a loaded
# machine one example can take 500 ms that takes 10 ms alone, which says
# nothing about the property tested. No test here has one.
settings.register_profile("staal", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("staal")


@pytest.fixture
def service() -> Iterator[Recorder]:
    recorder = Recorder().start()
    try:
        yield recorder
    finally:
        recorder.stop()


@pytest.fixture(scope="session")
def authorization() -> Iterator[AuthorizationServer]:
    """A real authorization server (oauth2-mock-server), started on first use."""
    server = AuthorizationServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_dsn() -> str:
    """The PostgreSQL server the tests use, started if it is the local one
    and not running (tests/helpers/services.py); a test fails, never skips, when
    there is none."""
    try:
        return services.postgres_dsn()
    except services.ServiceMissing as exc:
        pytest.fail(str(exc), pytrace=False)
