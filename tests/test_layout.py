"""The top-level folders are the architecture (DESIGN.md section 2): each
may import only what its row of the layout table allows."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STDLIB = set(sys.stdlib_module_names) | {"__future__"}
OWN = {"staal", "staal.protocol", "staal.supervisor", "staal.worker"}
THIRD_PARTY = {"orjson", "zmq", "psutil", "multiprocess", "typer", "httpx", "click", "psycopg"}

# folder -> (staal packages it may import, third-party packages it may import)
ALLOWED = {
    "shared": ({"staal"}, {"orjson"}),
    "protocol": ({"staal", "staal.protocol"}, {"orjson"}),
    "supervisor": ({"staal", "staal.protocol", "staal.supervisor"}, THIRD_PARTY),
    "worker": ({"staal", "staal.worker"}, THIRD_PARTY),
}


def imports_of(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def owner(module: str) -> str | None:
    """The staal package a module belongs to, or None if it is not staal's."""
    parts = module.split(".")
    if parts[0] != "staal":
        return None
    if len(parts) > 1 and f"staal.{parts[1]}" in OWN:
        return f"staal.{parts[1]}"
    return "staal"


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_each_folder_imports_only_what_the_layout_allows(folder):
    own_allowed, third_allowed = ALLOWED[folder]
    wrong = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for module in imports_of(path):
            top = module.split(".")[0]
            package = owner(module)
            if package is not None:
                ok = package in own_allowed
            else:
                ok = top in STDLIB or top in third_allowed
            if not ok:
                wrong.append(f"{path.relative_to(ROOT)} imports {module}")
    assert wrong == []


def test_the_import_check_catches_a_forbidden_import(tmp_path):
    module = tmp_path / "x.py"
    module.write_text("import staal.worker.cli\nfrom httpx import Client\n")
    assert imports_of(module) == {"staal.worker.cli", "httpx"}
    assert owner("staal.worker.cli") == "staal.worker"
    assert owner("staal.money") == "staal"
