"""An attacker holding connections open without a token (issue 24, item 4):
`count` TCP connections to one loopback address, a third sending nothing, a
third dribbling an endless request head a byte at a time, a third sending a
whole head (no token) and dribbling its endless body, each re-opened as
soon as the server closes it. It runs in a thread of its own (its own event
loop) until stopped, for at most `bound_s` seconds and `max_opens` opens,
and talks only to 127.0.0.1."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

DRIBBLE_S = 0.5  # between two bytes of a dribbled head or body
KINDS = ("idle", "head", "body")


class IdleSockets:
    def __init__(self, port: int, count: int = 300, bound_s: float = 120.0,
                 max_opens: int = 20_000) -> None:
        self.port = port
        self.count = count
        self.bound_s = bound_s
        self.max_opens = max_opens
        self.opens = 0
        self.held = 0
        # What the server wrote before it closed a connection (its status
        # line's code, "" if nothing or the connection was reset).
        self.closed_with: Counter[str] = Counter()
        self.all_held = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self.deadline = time.monotonic() + bound_s
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    @property
    def reopened(self) -> int:
        """Connections the server closed and the attacker opened again."""
        return sum(self.closed_with.values())

    def __enter__(self) -> IdleSockets:
        self._thread.start()
        self._ready.wait()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(self.bound_s + 30)

    def _run(self) -> None:
        try:
            asyncio.run(self._all())
        except BaseException as exc:  # noqa: BLE001 - kept for the test's message
            self.error = exc

    async def _all(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._ready.set()
        tasks = [asyncio.ensure_future(self._hold(KINDS[i % len(KINDS)]))
                 for i in range(self.count)]
        try:
            await asyncio.wait_for(self._stop.wait(), self.bound_s)
        except TimeoutError:
            pass
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _hold(self, kind: str) -> None:
        """One connection after another, as long as the attack lasts."""
        while not self.over:
            self.opens += 1
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError as exc:
                self.error = exc
                return
            self.held += 1
            if self.held == self.count:
                self.all_held.set()
            try:
                closed_with = await self._until_closed(reader, writer, kind)
                if closed_with is not None:
                    self.closed_with[closed_with] += 1
            finally:
                self.held -= 1
                writer.close()

    @property
    def over(self) -> bool:
        """Stopped, or past its bound in time or opens. (Checked as well as
        its tasks cancelled: wait_for may swallow a cancellation that
        arrives as its read completes.)"""
        return ((self._stop is not None and self._stop.is_set()) or self.opens >= self.max_opens
                or time.monotonic() >= self.deadline)

    async def _until_closed(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            kind: str) -> str | None:
        """Send nothing, or a head or a body that never ends, until the server
        closes (what it wrote) or the attack stops (None)."""
        assert self._stop is not None
        host = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n".encode()
        endless = host + b"X-Pad: " + b"a" * 100_000  # a head never whole
        if kind == "body":  # a whole head, no token, and a body never whole
            writer.write(host + b"Content-Type: application/json\r\n"
                         b"Accept: application/json, text/event-stream\r\n"
                         b"Content-Length: 100000\r\n\r\n")
            endless = b" " * 100_000
        dribble = kind != "idle"
        sent = 0
        answer = b""
        try:
            while not self._stop.is_set():
                if dribble:
                    writer.write(endless[sent:sent + 1])
                    sent += 1
                try:
                    chunk = await asyncio.wait_for(reader.read(1024),
                                                   DRIBBLE_S if dribble else None)
                except TimeoutError:
                    continue
                if not chunk:
                    break
                answer += chunk
        except ConnectionError:
            pass
        if self._stop.is_set():
            return None
        parts = answer.split(b" ", 2)
        return parts[1].decode() if len(parts) > 1 else ""
