"""When a run waits for an operator (seed 000 section 7, DESIGN.md 9): a
durable record written once and kept as first written (supervisor/store/notes.py:
a file, or a row of the shared store), a line on stderr,
and the manifest's notify command, retried with backoff until it exits 0,
never blocking calls."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

from staal.runtime.backoff import Backoff
from staal.supervisor.store.files import RunFiles
from staal.supervisor.store.notes import RunNotes
from staal.supervisor.telemetry.log import Log

NOTIFY_TIMEOUT_S = 60
MAX_BACKOFF_S = 300.0


class Waiting:
    def __init__(self, notes: RunNotes, notify: tuple[str, ...] | None,
                 notify_env: tuple[str, ...], log: Log) -> None:
        self.notes = notes
        self.notify = notify
        self.notify_env = notify_env
        self.log = log
        self.stopping = threading.Event()

    def record(self, tool: str, files: RunFiles, op: int, message: str) -> None:
        """Keep the record (`Fenced` on a shared store if the run is not this
        instance's); the notify command runs once per record, here, where it
        was first written."""
        record = self.notes.waiting_record(tool, files, op, message)
        written = self.notes.wait(files, record)
        self.log("run_waits_for_operator", level="warning", run=files.run, tool=tool, op=op,
                 record=str(files.waiting), resolve=record.resolve)
        if written is not None and self.notify:
            threading.Thread(target=self._notify, args=(self.notify, written), daemon=True,
                             name=f"staal-notify-{files.run[:8]}").start()

    def _notify(self, notify: tuple[str, ...], path: Path) -> None:
        env = {name: os.environ[name] for name in self.notify_env if name in os.environ}
        env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
        # Waits of 1 s, doubling up to MAX_BACKOFF_S: never at once, since a
        # command that failed now will most likely fail again now.
        delays, attempt = Backoff(first=1.0, cap=MAX_BACKOFF_S, at_once=0), 0
        while not self.stopping.is_set():
            attempt += 1
            try:
                done = subprocess.run([*notify, str(path)], env=env, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      timeout=NOTIFY_TIMEOUT_S, close_fds=True, check=False)
                if done.returncode == 0:
                    self.log("notified", record=str(path), attempt=attempt)
                    return
                reason = f"exit code {done.returncode}: {done.stderr.decode(errors='replace')[-200:]}"
            except (OSError, subprocess.TimeoutExpired) as exc:
                reason = str(exc)
            delay = delays.after(attempt)
            self.log("notify_failed", level="warning", record=str(path), attempt=attempt,
                     error=reason, retry_in_s=delay)
            if self.stopping.wait(delay):
                return
