"""Running the `staal` command line in a workspace, as an operator would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TIMEOUT = 60


def staal_command(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "staal.worker.commands.cli", *map(str, args)]


@dataclass
class Done:
    code: int
    stdout: str
    stderr: str

    @property
    def outcome(self) -> dict[str, Any]:
        lines = self.stdout.strip().splitlines()
        assert len(lines) == 1, f"expected one outcome line:\n{self.stdout}\n{self.stderr}"
        return json.loads(lines[0])


class Workspace:
    def __init__(self, root: Path) -> None:
        self.root = root

    def program(self, source: str, name: str = "prog.py") -> Path:
        path = self.root / name
        path.write_text(textwrap.dedent(source))
        return path

    def config(self, grants: dict | None = None, inputs: dict | None = None,
               name: str = "config.json", **fields: Any) -> Path:
        data = {"program": "prog.py", "grants": grants or {}, "inputs": inputs or {}, **fields}
        path = self.root / name
        path.write_text(json.dumps(data))
        return path

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        for key in ("STAAL_TEST_KILL_POINTS", "STAAL_KILL_AT", "STAAL_KILL_ONCE"):
            env.pop(key, None)
        env.update(extra or {})
        return env

    def staal(self, *args: str | Path, env: dict[str, str] | None = None) -> Done:
        done = subprocess.run(staal_command(*args), cwd=self.root, env=self.env(env),
                              capture_output=True, text=True, timeout=TIMEOUT, check=False)
        return Done(done.returncode, done.stdout, done.stderr)

    def run(self, config: str | Path = "config.json", journal: str = "run.journal",
            env: dict[str, str] | None = None) -> Done:
        return self.staal("run", config, "--journal", journal, env=env)

    def resume(self, journal: str = "run.journal", env: dict[str, str] | None = None) -> Done:
        return self.staal("resume", "--journal", journal, env=env)

    def spawn_run(self, config: str = "config.json", journal: str = "run.journal",
                  env: dict[str, str] | None = None) -> subprocess.Popen:
        return subprocess.Popen(staal_command("run", config, "--journal", journal), cwd=self.root,
                                env=self.env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    def journal_lines(self, journal: str = "run.journal") -> list[dict[str, Any]]:
        path = self.root / journal
        return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]

    def records(self, kind: str, journal: str = "run.journal") -> list[dict[str, Any]]:
        return [r for r in self.journal_lines(journal) if r["type"] == kind]


KILL_AT_INTENT = {"STAAL_TEST_KILL_POINTS": "1", "STAAL_KILL_AT": "worker:intent"}
KILL_AT_OUTCOME = {"STAAL_TEST_KILL_POINTS": "1", "STAAL_KILL_AT": "worker:outcome"}
# `staal run` and `staal resume` exit with these, by the outcome they print.
EXIT_CODES = {"done": 0, "failed": 1, "error": 2, "stopped": 3}
