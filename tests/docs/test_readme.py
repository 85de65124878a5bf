"""The README opens with the two commands CI runs, and what it shows is true."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers.manifests import seed_example, write_manifest, write_programs
from tests.helpers.readme import ci_commands

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def sh_blocks() -> list[str]:
    return re.findall(r"^```sh\n(.*?)\n```", README, flags=re.S | re.M)


def test_the_readme_opens_with_the_install_and_test_commands():
    install, tests = sh_blocks()[:2]
    assert README.index("```sh") < README.index("staal is a Python server")
    assert "pip install -e '.[test]'" in install and "staal-supervisor serve" in install
    assert "npm ci --prefix tests/js/node && " in install  # Node 22 first, as locked
    assert 'PATH="$PWD/tests/js/node/node_modules/.bin:$PATH" npm ci --prefix tests/js ' in install
    assert "examples/manifest.json" in install
    # The Python SDK 1.x in a venv of its own, from its exact pins.
    assert ("python3 -m venv tests/py1/.venv && "
            "tests/py1/.venv/bin/pip install -r tests/py1/requirements.txt && ") in install
    assert "pytest" in tests


def test_ci_reads_the_readmes_first_two_commands():
    assert list(ci_commands()) == sh_blocks()[:2]


STUBBED = ("npm", "npx", "node", "pg_ctlcluster", "pg_isready", "pg_ctl", "psql", "systemctl",
           "service", "apt-get", "pip", "python", "python3", "pytest")


def test_ci_runs_the_readmes_two_commands_with_stdin_closed_and_nothing_else(tmp_path):
    """.ci/run in a checkout whose README's two commands only record that
    they ran, with every tool a set-up step could call shadowed by a stub
    that records its call and fails: only the two commands run."""
    checkout = tmp_path / "checkout"
    (checkout / ".ci").mkdir(parents=True)
    shutil.copy2(ROOT / ".ci" / "run", checkout / ".ci" / "run")
    calls = tmp_path / "calls"
    record = 'echo "{} $(readlink /proc/$$/fd/0)" >> "$CALLS"'
    (checkout / "README.md").write_text(
        f"# x\n\n```sh\n{record.format('install')}\n```\n\n"
        f"```sh\n{record.format('test')}; echo '1 passed in 0.01s'\n```\n")
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name in STUBBED:
        stub = stubs / name
        stub.write_text(f'#!/bin/sh\necho "stub {name} $*" >> "$CALLS"\nexit 1\n')
        stub.chmod(0o755)
    env = {"PATH": f"{stubs}:/usr/local/bin:/usr/bin:/bin", "CALLS": str(calls),
           "HOME": str(tmp_path)}
    done = subprocess.run(["bash", str(checkout / ".ci" / "run")], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert calls.read_text().splitlines() == ["install /dev/null", "test /dev/null"]
    assert "CI: pytest summary: 1 passed in 0.01s" in done.stdout


def test_ci_holds_no_set_up_step_of_its_own():
    """What the tests need comes from the README's commands, never from CI alone."""
    code = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
            if not line.lstrip().startswith("#")]
    for word in ("npm", "pg_ctlcluster", "pg_isready", "STAAL_TEST_POSTGRES_DSN", "pip"):
        found = [line for line in code if re.search(rf"\b{word}\b", line)]
        assert not found, f".ci/run runs {word} itself: {found}"


def test_the_readmes_sample_check_output_is_what_check_prints(tmp_path):
    shown = re.search(r"```\nmanifest.json: 2 problems\n(.*?)\n```", README, flags=re.S)
    assert shown is not None
    write_programs(tmp_path)
    data = seed_example()
    data["tools"][0]["grants"]["pay"]["each"]["amount"] = "5O.00"
    del data["tools"][0]["net"]["connect_timeout_ms"]
    done = subprocess.run(
        [sys.executable, "-m", "staal.supervisor.app.main", "check", str(write_manifest(tmp_path, data))],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    printed = [line.strip() for line in done.stderr.splitlines()[1:]]
    assert printed == [line.strip() for line in shown.group(1).splitlines()]
