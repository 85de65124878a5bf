"""The README opens with the two commands CI runs, and what it shows is true."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.manifests import seed_example, write_manifest, write_programs

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def sh_blocks() -> list[str]:
    return re.findall(r"^```sh\n(.*?)\n```", README, flags=re.S | re.M)


def test_the_readme_opens_with_the_install_and_test_commands():
    install, tests = sh_blocks()[:2]
    assert README.index("```sh") < README.index("staal is a Python server")
    assert "pip install -e '.[test]'" in install and "staal-supervisor serve" in install
    assert "examples/manifest.json" in install
    assert "pytest" in tests


def test_ci_runs_the_readmes_commands():
    done = subprocess.run(
        ["bash", "-c", "source <(sed -n '/^readme_block()/,/^}/p' .ci/run); readme_block 1; readme_block 2"],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == sh_blocks()[:2]


def test_the_readmes_sample_check_output_is_what_check_prints(tmp_path):
    shown = re.search(r"```\nmanifest.json: 2 problems\n(.*?)\n```", README, flags=re.S)
    assert shown is not None
    write_programs(tmp_path)
    data = seed_example()
    data["tools"][0]["grants"]["pay"]["each"]["amount"] = "5O.00"
    del data["tools"][0]["net"]["connect_timeout_ms"]
    done = subprocess.run(
        [sys.executable, "-m", "staal.supervisor.cli", "check", str(write_manifest(tmp_path, data))],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2
    printed = [line.strip() for line in done.stderr.splitlines()[1:]]
    assert printed == [line.strip() for line in shown.group(1).splitlines()]
