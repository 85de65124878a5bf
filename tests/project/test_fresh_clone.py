"""A fresh clone works as a user's does (issue 10, item 5): the README's
first command alone installs everything its second command needs.

The repository's committed HEAD is cloned into a temporary folder (what is
not committed is not in the clone: commit, then run this test). The README's
two commands are read out of the clone's README.md as .ci/run reads them and
run there one after the other, each in its own shell with standard input at
/dev/null, as CI runs them: the first installs and then serves the example
tools, which exits as its input closes; the second runs with a selection of
the tests that need what only that set-up provides, appended to its text:
the pinned npm clients (the TypeScript SDK, the MCP Inspector, Claude Code),
the pinned Python SDK 1.x in its own venv (tests/py1), and PostgreSQL,
which the tests start themselves when it is not running.
The shell starts as a user's does before the first command: this test run's
virtual environment is off PATH and no pytest or Python path variable is
set.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.readme import ci_commands

ROOT = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT_S = 900
TESTS_TIMEOUT_S = 900
# One test for each thing only the README's first command (or the tests
# themselves) set up; none of them is this module, so the run cannot recurse.
NEED_THE_SET_UP = (
    "tests/clients/test_client_typescript.py::test_the_npm_clients_are_pinned_exactly_and_installed_as_locked",
    "tests/clients/test_client_typescript.py::test_node_22_is_pinned_apart_and_is_the_node_the_clients_run_on",
    "tests/clients/test_client_typescript.py::test_the_sdk_lists_calls_and_reads_refusals[client2-default-legacy]",
    "tests/clients/test_client_inspector.py::test_tools_call[legacy]",
    "tests/docs/test_quickstart.py::test_claude_code_records_the_same_server_as_the_claude_desktop_snippet",
    "tests/processes/test_postgres.py::test_an_execute_commits_and_is_journaled_as_a_write",
    "tests/clients/test_tasks_python_sdk1.py::test_the_python_sdk1_is_pinned_exactly_in_its_own_venv_and_installed_as_pinned",
)


@dataclass
class Clone:
    root: Path
    install: str
    test: str
    home: Path
    install_printed: str = ""

    def shell(self, command: str, log: Path, timeout: float) -> tuple[int, str]:
        """`command` in a shell of its own in the clone, stdin at /dev/null."""
        with log.open("w") as out:
            done = subprocess.run(["bash", "--noprofile", "--norc", "-c", command],
                                  cwd=self.root, env=user_env(), stdin=subprocess.DEVNULL,
                                  stdout=out, stderr=subprocess.STDOUT, timeout=timeout,
                                  check=False)
        return done.returncode, log.read_text()


def user_env() -> dict[str, str]:
    """This environment as a user's shell has it before the README's first
    command: no virtual environment active, nothing pytest or Python set."""
    venv_bin = str(Path(sys.prefix) / "bin")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYTEST_") and k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and p != venv_bin)
    return env


def git(*args: str | Path, cwd: Path = ROOT) -> str:
    done = subprocess.run(["git", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, f"git {args}: {done.stderr}"
    return done.stdout.strip()


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Iterator[Clone]:
    assert (ROOT / ".git").exists(), f"{ROOT} is not a git checkout: nothing to clone"
    where = tmp_path_factory.mktemp("fresh-clone")
    root = where / "staal"
    head = git("rev-parse", "HEAD")
    git("clone", "--quiet", "--no-checkout", ROOT, root)
    git("checkout", "--quiet", "--detach", head, cwd=root)
    install, test = ci_commands(root)
    try:
        yield Clone(root, install, test, where)
    finally:
        shutil.rmtree(where, ignore_errors=True)  # a venv and 500 MB of node_modules


@pytest.fixture(scope="module")
def installed(clone: Clone) -> Clone:
    code, printed = clone.shell(clone.install, clone.home / "install.log", INSTALL_TIMEOUT_S)
    assert code == 0, f"{clone.install}\nexited {code}:\n{printed[-6000:]}"
    clone.install_printed = printed
    return clone


def test_in_a_fresh_clone_the_readmes_first_command_installs_and_serves_the_examples(installed):
    root = installed.root
    assert (root / ".venv" / "bin" / "staal-supervisor").is_file()
    for package in ("@modelcontextprotocol/client", "@modelcontextprotocol/sdk",
                    "@modelcontextprotocol/inspector", "@anthropic-ai/claude-code"):
        assert (root / "tests" / "js" / "node_modules" / package / "package.json").is_file()
    assert (root / "tests" / "py1" / ".venv" / "bin" / "python").is_file()  # the Python SDK 1.x's
    # The server it ends with served the example tools, then exited as its input closed.
    assert '"event":"serving","server":"staal-examples"' in installed.install_printed
    assert (root / "examples" / "journals" / "server.ledger").is_file()


def test_in_a_fresh_clone_the_npm_clients_install_on_the_node_they_need(installed):
    """The pinned Inspector, Claude Code and oauth2-mock-server need Node 22:
    installed on it, npm prints no engine warning."""
    assert (installed.root / "tests" / "js" / "node" / "node_modules" / ".bin" / "node").exists()
    assert "EBADENGINE" not in installed.install_printed, installed.install_printed[-6000:]


def test_in_a_fresh_clone_the_readmes_test_command_passes_what_needs_the_set_up(installed):
    command = f"{installed.test} {shlex.join(NEED_THE_SET_UP)}"
    code, printed = installed.shell(command, installed.home / "tests.log", TESTS_TIMEOUT_S)
    assert code == 0, f"{command}\nexited {code}:\n{printed[-6000:]}"
    summary = printed.strip().splitlines()[-1]
    assert re.fullmatch(rf"{len(NEED_THE_SET_UP)} passed in .*", summary), printed[-3000:]
