"""docs/architecture.md's claims about the code, checked against it (issue 25,
item 7): every file it names exists at the path it gives, every package of
the four folders is on its map, and every module it names by import name
imports. A newcomer who follows the tour never opens a file that moved."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOUR = ROOT / "docs" / "architecture.md"
FOLDERS = {"shared": "staal", "protocol": "staal.protocol", "supervisor": "staal.supervisor",
           "worker": "staal.worker"}
# `path/to/file.py`, optionally followed by `:line` or a symbol after a space.
NAMED_FILE = re.compile(r"`([\w./-]+\.(?:py|pyi|mjs|json|md|toml|yml))[`: ]")
NAMED_MODULE = re.compile(r"`(staal(?:\.\w+)+)`")


def tour() -> str:
    return TOUR.read_text()


def packages() -> list[str]:
    """Every package folder of the four, as the map names it (`supervisor/store/postgres/`)."""
    return sorted(str(init.parent.relative_to(ROOT)) + "/" for folder in FOLDERS
                  for init in (ROOT / folder).rglob("__init__.py"))


def test_every_file_the_tour_names_is_at_the_path_it_gives():
    named = set(NAMED_FILE.findall(tour()))
    missing = sorted(name for name in named if not (ROOT / name).exists()
                     and not name.startswith(("tests/js/node_modules",)))
    assert missing == []


def test_the_tour_names_files_by_their_path_from_the_root():
    bare = sorted({name for name in NAMED_FILE.findall(tour()) if "/" not in name}
                  - {"pyproject.toml", "README.md", "CHANGELOG.md", "BENCHMARKS.md", "DESIGN.md"})
    assert bare == []


def test_every_package_is_on_the_tours_map():
    text = tour()
    assert [p for p in packages() if f"`{p}`" not in text] == []


def test_every_module_the_tour_names_by_import_name_imports():
    wrong = []
    for name in sorted(set(NAMED_MODULE.findall(tour()))):
        module, attribute = name, None
        while True:
            try:
                imported = importlib.import_module(module)
                break
            except ModuleNotFoundError:
                module, _, attribute = module.rpartition(".")
                if not module:
                    imported = None
                    break
        if imported is None or (attribute and not hasattr(imported, name[len(module) + 1:]
                                                          .split(".")[0])):
            wrong.append(name)
    assert wrong == []


def test_the_check_catches_a_moved_file(tmp_path):
    assert NAMED_FILE.findall("see `supervisor/calls.py` and `x.py:12` and `a/b.py` here") == [
        "supervisor/calls.py", "x.py", "a/b.py"]
    assert not (ROOT / "supervisor/calls.py").exists()
