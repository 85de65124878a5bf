"""The fake payment service (examples/fake_payments.py) as a test fixture.

`payments` starts the service as its own process on a free port with a
fresh secret key, and kills it after the test. The helper speaks the
service's `/_control/` endpoints: make payment intents, set faults, read
back every request and refund, and wait (bounded, on the service's side)
until requests have arrived or are held.
"""

from __future__ import annotations

import secrets
import selectors
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

FAKE = Path(__file__).resolve().parents[2] / "examples" / "fake_payments.py"
START_WAIT = 10.0
WAIT = 10.0


class Payments:
    def __init__(self, key: str | None = None, record: Path | None = None) -> None:
        self.key = key or "sk_test_" + secrets.token_hex(12)
        self.process = subprocess.Popen(
            [sys.executable, str(FAKE), "--port", "0", "--key", self.key,
             *(["--record", str(record)] if record else [])],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            self.port = int(self._first_line())
        except BaseException:
            self.stop()
            raise
        self.base = f"http://127.0.0.1:{self.port}"
        self.client = httpx.Client(base_url=self.base, timeout=WAIT + 5, trust_env=False)

    def _first_line(self) -> str:
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            if not selector.select(START_WAIT):
                raise RuntimeError(f"the fake payment service printed no port in {START_WAIT} s")
        line = self.process.stdout.readline()
        if not line.strip().isdigit():
            raise RuntimeError(f"the fake payment service said {line!r}: {self.process.stderr.read()}")
        return line

    # -- controls ------------------------------------------------------------

    def _control(self, method: str, path: str, **kwargs: Any) -> Any:
        answer = self.client.request(method, "/_control/" + path, **kwargs)
        answer.raise_for_status()
        return answer.json()

    def intent(self, amount: int = 5000, currency: str = "usd", **fields: Any) -> dict:
        """A payment intent, paid in full unless `amount_received` says otherwise."""
        return self._control("POST", "intents", json={"amount": amount, "currency": currency, **fields})

    def fault(self, path: str, kind: str, times: int = 1, hold_ms: int | None = None) -> None:
        body: dict[str, Any] = {"path": path, "kind": kind, "times": times}
        if hold_ms is not None:
            body["hold_ms"] = hold_ms
        self._control("POST", "faults", json=body)

    def reset(self) -> None:
        self._control("POST", "reset")

    def release(self) -> None:
        self._control("POST", "release")

    def requests(self, method: str | None = None, path: str | None = None) -> list[dict]:
        return [r for r in self._control("GET", "requests")["data"]
                if (method is None or r["method"] == method)
                and (path is None or r["path"].split("?")[0] == path)]

    def refunds(self) -> list[dict]:
        return self._control("GET", "refunds")["data"]

    def wait(self, path: str | None = None, *, requests: int = 0, held: int = 0,
             finished: int = 0, refunds: int = 0, timeout: float = WAIT) -> None:
        """Until the service has that many requests to `path` / held / handled
        to their end / refunds in all; fails the test if that does not happen
        within `timeout`."""
        params: dict[str, Any] = {"requests": requests, "held": held, "finished": finished,
                                  "refunds": refunds, "timeout_ms": int(timeout * 1000)}
        if path is not None:
            params["path"] = path
        answer = self.client.get("/_control/wait", params=params, timeout=timeout + 5)
        assert answer.status_code == 200, (
            f"waited {timeout} s for {params} at the fake payment service: "
            f"{len(self.requests())} requests, {len(self.refunds())} refunds")

    # -- the end -------------------------------------------------------------

    def stop(self) -> None:
        if getattr(self, "client", None) is not None:
            self.client.close()
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=WAIT)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def payments() -> Iterator[Payments]:
    service = Payments()
    try:
        yield service
    finally:
        service.stop()
