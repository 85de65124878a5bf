"""The lint gate: the whole tree is clean under the ruff rules chosen for it
in pyproject.toml (`[tool.ruff.lint]`), with the pinned ruff, so the README's
test command covers it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120, check=False)


def test_the_tree_is_clean_under_the_projects_ruff_rules():
    done = ruff("check", "--no-cache", ".")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "All checks passed!" in done.stdout


def test_the_rules_catch_what_they_were_chosen_for(tmp_path):
    (tmp_path / "bad.py").write_text(textwrap.dedent("""\
        import os
        import subprocess


        def f(x=[]):
            try:
                subprocess.run(["true"])
            except Exception:
                pass
            return x
        """))
    done = ruff("check", "--no-cache", "--config", str(ROOT / "pyproject.toml"),
                "--output-format", "concise", str(tmp_path / "bad.py"), cwd=tmp_path)
    assert done.returncode == 1
    found = {line.split(" ")[1] for line in done.stdout.splitlines() if ".py:" in line}
    assert {"F401", "B006", "PLW1510", "BLE001"} <= found, done.stdout
