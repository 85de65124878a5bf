"""The type gate: mypy, pinned and strict (pyproject.toml, `[tool.mypy]`),
runs clean over the whole package `staal` (shared/, protocol/, supervisor/,
worker/), so the README's test command enforces it.

setuptools' package-dir mapping (staal = shared/, staal.X = X/) hides the
package from mypy, which reads folders, not import hooks; so the test builds
the package as it is imported, as a tree of symlinks in a temporary folder,
and checks that tree. A second test proves the tree holds every module of the
four folders, so a new module cannot escape the check.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# The package mypy must find clean: all of it, with its sub-packages.
CHECKED = ("staal",)

ROOT = Path(__file__).resolve().parents[2]
# pyproject.toml's package-dir: shared/ is staal itself, these its sub-packages.
SUB_PACKAGES = ("protocol", "supervisor", "worker")
FOLDERS = ("shared", *SUB_PACKAGES)


def build_package_tree(where: Path) -> Path:
    """`where/staal` as Python imports it: shared/'s files at its top, the
    other folders as its sub-packages. Returns the folder holding `staal`."""
    package = where / "staal"
    package.mkdir(parents=True)
    for entry in sorted((ROOT / "shared").iterdir()):
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for folder in SUB_PACKAGES:
        (package / folder).symlink_to(ROOT / folder, target_is_directory=True)
    return where


def modules_under(top: Path) -> set[Path]:
    """Every Python source file below `top`, by its real path, following the
    tree's symlinked folders as mypy does."""
    return {(Path(folder) / name).resolve()
            for folder, _, names in os.walk(top, followlinks=True) if "__pycache__" not in folder
            for name in names if name.endswith(".py")}


def test_mypy_finds_the_checked_packages_clean_under_strict(tmp_path):
    tree = build_package_tree(tmp_path / "tree")
    packages = [arg for name in CHECKED for arg in ("-p", name)]
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(tmp_path / "cache"), *packages],
        cwd=tree, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_checked_tree_holds_every_module_of_the_four_folders(tmp_path):
    tree = build_package_tree(tmp_path / "tree")
    in_tree = modules_under(tree / "staal")
    in_folders = set().union(*(modules_under(ROOT / folder) for folder in FOLDERS))
    assert in_folders, "no modules found under the four folders"
    assert in_folders - in_tree == set(), "modules mypy would not see"
    assert in_tree - in_folders == set(), "modules the tree holds from outside the four folders"
