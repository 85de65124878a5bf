"""When a run waits for an operator (seed 000 section 7, DESIGN.md 9): a
durable record written once and kept as first written, a line on stderr,
and the manifest's notify command, retried with backoff until it exits 0,
never blocking calls."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from staal.clock import SYSTEM_CLOCK
from staal.fsio import FS
from staal.supervisor.files import RunFiles, write_durably

NOTIFY_TIMEOUT_S = 60
MAX_BACKOFF_S = 300.0


class Waiting:
    def __init__(self, journals: Path, notify: tuple[str, ...] | None, notify_env: tuple[str, ...],
                 log: Callable[..., None]) -> None:
        self.journals = journals
        self.notify = notify
        self.notify_env = notify_env
        self.log = log
        self.stopping = threading.Event()

    def record(self, tool: str, files: RunFiles, op: int, message: str) -> None:
        record = {
            "run": files.run, "tool": tool, "op": op, "message": message,
            "journal": str(files.journal), "time": SYSTEM_CLOCK.now_ms(),
            "resolve": (f"staal resolve --journal {files.journal} --op {op} --happened yes "
                        "--result JSON   (or --happened no)"),
        }
        written = write_durably(files.waiting, orjson.dumps(record, option=orjson.OPT_INDENT_2))
        self.log("run_waits_for_operator", level="warning", run=files.run, tool=tool, op=op,
                 record=str(files.waiting), resolve=record["resolve"])
        if written and self.notify:
            threading.Thread(target=self._notify, args=(files.waiting,), daemon=True,
                             name=f"staal-notify-{files.run[:8]}").start()

    def read(self, files: RunFiles) -> dict[str, Any] | None:
        try:
            return orjson.loads(files.waiting.read_bytes())
        except FileNotFoundError:
            return None

    def remove(self, files: RunFiles) -> None:
        try:
            FS.unlink(files.waiting)
        except FileNotFoundError:
            pass

    def _notify(self, path: Path) -> None:
        env = {name: os.environ[name] for name in self.notify_env if name in os.environ}
        env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
        delay, attempt = 1.0, 0
        while not self.stopping.is_set():
            attempt += 1
            try:
                done = subprocess.run([*self.notify, str(path)], env=env, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      timeout=NOTIFY_TIMEOUT_S, close_fds=True, check=False)
                if done.returncode == 0:
                    self.log("notified", record=str(path), attempt=attempt)
                    return
                reason = f"exit code {done.returncode}: {done.stderr.decode(errors='replace')[-200:]}"
            except (OSError, subprocess.TimeoutExpired) as exc:
                reason = str(exc)
            self.log("notify_failed", level="warning", record=str(path), attempt=attempt,
                     error=reason, retry_in_s=delay)
            if self.stopping.wait(delay):
                return
            delay = min(delay * 2, MAX_BACKOFF_S)
