"""staal.worker.capabilities.transport in this process: the one httpx client
every HTTP capability shares, against a real local service."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from staal.worker.capabilities.transport import Limits, client, exchange
from tests.helpers.recorder import Recorder

LIMITS = Limits(timeout_ms=5_000, connect_timeout_ms=5_000, max_bytes=1_000_000)


@pytest.fixture
def service() -> Iterator[Recorder]:
    recorder = Recorder().start()
    try:
        yield recorder
    finally:
        recorder.stop()


def test_a_cookie_a_service_sets_is_never_sent_back_on_a_later_request(service):
    service.route("GET", "/login", headers={"Set-Cookie": "session=from-an-earlier-run; Path=/"})
    service.route("GET", "/next")

    first = exchange("GET", f"{service.base}/login", LIMITS, {})
    exchange("GET", f"{service.base}/next", LIMITS, {})

    assert first.headers["set-cookie"].startswith("session=from-an-earlier-run")
    later, = service.seen("GET", "/next")
    assert "cookie" not in later.headers
    assert len(client().cookies.jar) == 0


def test_an_idle_connection_is_dropped_before_the_five_seconds_after_which_servers_often_close_it():
    # httpcore's pool is where the expiry is enforced; its settings are the
    # client's, so this reads the pool the shared client really uses.
    pool = client()._transport._pool  # type: ignore[attr-defined]

    assert pool._keepalive_expiry < 5.0
    assert (pool._max_connections, pool._max_keepalive_connections) == (100, 20)
