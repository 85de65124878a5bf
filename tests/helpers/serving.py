"""A real `staal-supervisor serve` process driven with raw JSON-RPC lines."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WAIT = 30.0


def server_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("STAAL_TEST_KILL_POINTS", "STAAL_KILL_AT", "STAAL_KILL_ONCE")}
    env.update(extra)
    return env


class Served:
    """One server process; `call` sends a tools/call and waits for its answer."""

    def __init__(self, manifest: Path, env: dict[str, str] | None = None) -> None:
        self.stderr_path = manifest.parent / f"server-{time.monotonic_ns()}.log"
        self.stderr_file = open(self.stderr_path, "wb")  # noqa: SIM115 - the server's, closed by close()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "staal.supervisor.app.main", "serve", str(manifest)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr_file,
            env=env or server_env(), cwd=manifest.parent, start_new_session=True)
        self.next_id = 0
        self.buffer = b""
        self.notifications: list[dict] = []
        self.answers: dict[Any, dict] = {}

    def send(self, message: dict) -> None:
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()

    def request(self, method: str, params: dict | None = None) -> dict:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}})
        return self.answer(self.next_id)

    def answer(self, request_id: int, timeout: float = WAIT) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for message in self._lines():
                if "method" in message:
                    self.notifications.append(message)
                else:
                    self.answers[message.get("id")] = message
            if request_id in self.answers:
                return self.answers.pop(request_id)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no answer to request {request_id}:\n{self.stderr()}")
            ready, _, _ = select.select([self.process.stdout], [], [], remaining)
            if ready:
                chunk = os.read(self.process.stdout.fileno(), 65536)
                if not chunk:
                    raise EOFError(f"the server closed its stdout:\n{self.stderr()}")
                self.buffer += chunk

    def _lines(self) -> list[dict]:
        *lines, self.buffer = self.buffer.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]

    def initialize(self) -> dict:
        answer = self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                             "clientInfo": {"name": "tests", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return answer

    def call(self, name: str, arguments: dict) -> dict:
        return self.request("tools/call", {"name": name, "arguments": arguments})["result"]

    def stderr(self) -> str:
        self.stderr_file.flush()
        return self.stderr_path.read_text(errors="replace")

    def events(self, name: str) -> list[dict]:
        found = []
        for line in self.stderr().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == name:
                found.append(event)
        return found

    def close(self) -> int:
        """Close stdin and wait for the server to exit; its exit code."""
        try:
            self.process.stdin.close()
        except OSError:
            pass
        try:
            return self.process.wait(timeout=WAIT)
        finally:
            self.stderr_file.close()

    def kill(self) -> None:
        """SIGKILL the server (its zygote and workers die with it)."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=WAIT)
        self.stderr_file.close()

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=WAIT)
        if not self.stderr_file.closed:
            self.stderr_file.close()


def start(manifest: Path, env: dict[str, str] | None = None) -> Served:
    served = Served(manifest, env)
    served.initialize()
    return served


def write_manifest(directory: Path, tools: list[dict], **server: Any) -> Path:
    data = {"server": {"name": "tests", "journals": "journals", **server}, "tools": tools}
    path = directory / "manifest.json"
    path.write_text(json.dumps(data))
    return path


def tool(name: str, program: str, grants: dict | None = None, **fields: Any) -> dict:
    return {"name": name, "description": f"The {name} tool.", "program": program,
            "grants": grants or {}, "net": {"timeout_ms": 5000, "connect_timeout_ms": 2000},
            **fields}
