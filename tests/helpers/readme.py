"""Reading README.md's walk-throughs, so the tests that run them and the
README cannot drift: a section's fenced blocks (any page's, each with what
its info string says it is), what stays the same from machine to machine in
what a command prints, and a copy of examples/ pointed at a fake payment
service on a free port."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.runs import TIMEOUT, Workspace

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
README = (ROOT / "README.md").read_text()
BASE = "http://127.0.0.1:8765"  # where the examples expect the fake payment service
ENV = "STRIPE_SECRET_KEY"


@dataclass
class Block:
    lang: str
    body: str
    # The info string's words after the language (```python program): what
    # a page's test does with the block.
    role: str = ""


@dataclass
class Step:
    command: str
    shown: str | None  # the output block that follows it, if any


def section(title: str) -> str:
    """The README's `## title` section, up to the next `## ` heading."""
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 3 + len(title))
    return README[start:] if end < 0 else README[start:end]


def blocks(text: str) -> list[Block]:
    found = re.findall(r"^```(\w*)([^\n`]*)\n(.*?)\n?```$", text, flags=re.DOTALL | re.MULTILINE)
    return [Block(lang, body, role.strip()) for lang, role, body in found]


def steps(found: list[Block]) -> list[Step]:
    """```sh blocks, each with the output block right after it."""
    out: list[Step] = []
    for block in found:
        if block.lang == "sh":
            out.append(Step(block.body, None))
        else:
            assert out and out[-1].shown is None, f"an output block follows no command:\n{block.body}"
            out[-1].shown = block.body
    return out


@dataclass
class Ran:
    step: Step
    out: str
    err: str
    code: int


def run_steps(steps: list[Step], local: Callable[[str], str], cwd: Path,
              env: dict[str, str], outs: Path) -> list[Ran]:
    """The steps in one shell, as an operator types them one after another
    (what one defines is there for the next), each command as `local` has
    this machine run it; what each printed and its exit code."""
    outs.mkdir()
    script = [f'{{\n{local(step.command)}\n}} >"{outs}/{i}.out" 2>"{outs}/{i}.err"\n'
              f'echo $? >"{outs}/{i}.rc"\n' for i, step in enumerate(steps)]
    done = subprocess.run(["bash", "--noprofile", "--norc", "-c", "".join(script)], cwd=cwd,
                          env=env, capture_output=True, text=True,
                          timeout=TIMEOUT * len(steps), check=False)
    assert done.returncode == 0, done.stderr
    return [Ran(step, (outs / f"{i}.out").read_text(), (outs / f"{i}.err").read_text(),
                int((outs / f"{i}.rc").read_text())) for i, step in enumerate(steps)]


def normalized(text: str) -> list[str]:
    """What stays the same from run to run and machine to machine: run ids,
    the fake's random object ids, times, hashes, paths and the version go."""
    text = re.sub(r"[0-9a-f]{32}", "<run>", text)
    text = re.sub(r"/<run>/", "/<id>/", text)  # a run's folder in a journal path
    text = re.sub(r"/[0-9a-f]{2}/<run>\.", "/<id>/<run>.", text)
    text = re.sub(r"\b(re|ch|txn)_[A-Za-z0-9]+", r"\1_<id>", text)
    text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC", "<time>", text)
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "<time>", text)
    text = re.sub(r'"created": \d+', '"created": <time>', text)
    text = re.sub(r"[0-9a-f]{16}\.\.\.", "<sha>...", text)
    text = re.sub(r"\S*/examples/", "examples/", text)
    text = re.sub(r"staal \d+\.\d+\.\d+\S*", "staal <version>", text)
    return [line.rstrip() for line in text.strip().splitlines()]


def copy_examples(root: Path, base: str) -> Path:
    """examples/ under `root`, its configs pointing at the fake at `base`."""
    copy = root / "examples"
    shutil.copytree(EXAMPLES, copy, ignore=shutil.ignore_patterns(
        "journals", "__pycache__", "*.journal"))
    for path in copy.glob("*.json"):
        text = path.read_text()
        path.write_text(text.replace(BASE, base))
    return copy


def shell_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = Workspace(Path(".")).env(extra)
    env.pop(ENV, None)  # the README's commands provide it
    # `staal` and `staal-supervisor` are this interpreter's: the venv the tests run in.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def ci_commands(root: Path = ROOT) -> tuple[str, str]:
    """The README's install and test commands in the checkout at `root`, read
    out of its README.md by .ci/run's own `readme_block`, as CI reads them."""
    done = subprocess.run(
        ["bash", "-c", ("source <(sed -n '/^readme_block()/,/^}/p' .ci/run); "
                        "readme_block 1; readme_block 2")],
        cwd=root, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    install, test = done.stdout.splitlines()
    return install, test
