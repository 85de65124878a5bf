"""The folder-to-package mapping (DESIGN.md section 2) cannot silently break:
the wheel and an editable install each go into a fresh venv, and every module
(the C extension too) and both console scripts are imported and run from
there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"shared": "staal", "protocol": "staal.protocol", "supervisor": "staal.supervisor",
           "worker": "staal.worker"}
# C extensions (pyproject.toml, [tool.setuptools] ext-modules) -> their source.
# They are optional to build, so a wheel without them would still install;
# these tests make sure the builds here do produce them.
EXTENSIONS = {"staal.worker._steps": "worker/_steps.c", "staal.worker._guard": "worker/_guard.c"}
SKIP = shutil.ignore_patterns(".venv", ".git", "__pycache__", "build", "dist", "*.egg-info",
                              ".pytest_cache", ".hypothesis", "node_modules", "journals",
                              "*.so", "*.pyd")


def source_modules() -> set[str]:
    modules = set()
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules.add(".".join((package, *parts)))
    return modules


def run(args: list, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300,
                          check=False, **kwargs)
    assert done.returncode == 0, f"{args}\n{done.stdout}\n{done.stderr}"
    return done


def fresh_venv(path: Path, wheel: Path) -> Path:
    """A new venv holding only `wheel`; its dependencies are borrowed from
    this test's environment through a path file, so no network is needed."""
    venv.create(path, with_pip=False)
    python = path / "bin" / "python"
    run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
         "--quiet", wheel])
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(run([python, "-c", purelib]).stdout.strip())
    (site / "_staal_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


@pytest.fixture(scope="module")
def source_copy(tmp_path_factory) -> Path:
    copy = tmp_path_factory.mktemp("src") / "staal"
    shutil.copytree(ROOT, copy, ignore=SKIP)
    return copy


IMPORT_ALL = """
import importlib, json, sys
found = {}
for name in sys.argv[1:]:
    found[name] = importlib.import_module(name).__file__
print(json.dumps(found))
"""


def test_the_wheel_in_a_fresh_venv_holds_every_module_and_both_scripts(source_copy, tmp_path):
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
         "-w", tmp_path / "dist", source_copy])
    (wheel,) = (tmp_path / "dist").glob("staal-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        in_wheel = {n[:-3].replace("/", ".").removesuffix(".__init__")
                    for n in archive.namelist() if n.endswith(".py")}
        metadata = next(archive.read(n).decode() for n in archive.namelist() if n.endswith("METADATA"))
        extensions = {n.split(".")[0].replace("/", ".") for n in archive.namelist()
                      if n.endswith((".so", ".pyd"))}
    assert in_wheel == source_modules()
    assert extensions == set(EXTENSIONS)
    assert all((ROOT / source).is_file() for source in EXTENSIONS.values())
    for dependency in ("orjson", "pyzmq", "psutil", "typer", "httpx", "psycopg"):
        assert f"Requires-Dist: {dependency}" in metadata

    python = fresh_venv(tmp_path / "venv", wheel)
    site = tmp_path / "venv"
    modules = sorted(source_modules() | set(EXTENSIONS))
    import json

    files = json.loads(run([python, "-c", IMPORT_ALL, *modules], cwd=tmp_path).stdout)
    for name, file in files.items():
        assert Path(file).resolve().is_relative_to(site.resolve()), (name, file)
    for script in ("staal", "staal-supervisor"):
        done = run([site / "bin" / script, "--help"], cwd=tmp_path)
        assert "Usage" in done.stdout


def test_an_editable_install_maps_each_folder_to_its_package(source_copy, tmp_path):
    out = tmp_path / "editable"
    done = run([sys.executable, "-c",
                "import sys; from setuptools import build_meta as b; print(b.build_editable(sys.argv[1]))",
                out], cwd=source_copy)
    wheel = out / done.stdout.strip().splitlines()[-1]
    python = fresh_venv(tmp_path / "venv", wheel)
    import json

    files = json.loads(run([python, "-c", IMPORT_ALL, *FOLDERS.values(), *EXTENSIONS],
                           cwd=tmp_path).stdout)
    for folder, package in FOLDERS.items():
        assert Path(files[package]) == source_copy / folder / "__init__.py"
    for extension, source in EXTENSIONS.items():  # built beside its source
        assert Path(files[extension]).parent == (source_copy / source).parent
    # A module added after the install is found without reinstalling.
    (source_copy / "protocol" / "added_later.py").write_text("VALUE = 7\n")
    try:
        done = run([python, "-c", "import staal.protocol.added_later as m; print(m.VALUE)"], cwd=tmp_path)
    finally:
        (source_copy / "protocol" / "added_later.py").unlink()
    assert done.stdout.strip() == "7"
    assert os.access(tmp_path / "venv" / "bin" / "staal-supervisor", os.X_OK)
