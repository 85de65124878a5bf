"""The top-level folders are the architecture (DESIGN.md section 2): each
may import only what its row of the layout table allows, whether it names a
module absolutely or relatively (`from . import x`, `from .. import worker`:
resolved to the module they name, then checked the same way).

`protocol/` is sans-I/O: bytes and dicts in, dicts out. Of the standard
library it may not import what does I/O, waits or runs concurrently
(`SANS_IO_DENIED`), nor name the built-ins that do I/O (`open`, `print`,
`input`) or import by name (`__import__`); the supervisor owns all of that.

And the dependencies pyproject.toml declares are the ones the code imports:
none declared that nothing imports, none imported that is not declared.
"""

from __future__ import annotations

import ast
import builtins
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STDLIB = set(sys.stdlib_module_names) | {"__future__"}
OWN = {"staal", "staal.protocol", "staal.supervisor", "staal.worker"}
THIRD_PARTY = {"orjson", "zmq", "psutil", "typer", "httpx", "httpcore", "h11", "click", "psycopg",
               "uvicorn", "uvloop", "jwt", "prometheus_client"}
# folder -> its import name (pyproject.toml, [tool.setuptools] package-dir)
PACKAGES = {"shared": "staal", "protocol": "staal.protocol", "supervisor": "staal.supervisor",
            "worker": "staal.worker"}

# Standard modules a sans-I/O layer has no use for, by what they do.
SANS_IO_DENIED = {
    # event loops, threads, processes and what waits on them
    "asyncio": "event loop", "threading": "threads", "_thread": "threads",
    "multiprocessing": "processes", "concurrent": "executors", "queue": "blocking queues",
    "subprocess": "processes", "signal": "signal handlers", "sched": "sleeps",
    "time": "sleeps and clock reads (a time is an input the caller passes in)",
    # descriptors, files and the operating system
    "os": "descriptors, files, processes", "posix": "os under its own name",
    "io": "file and stream objects", "sys": "stdin, stdout, exit", "select": "waiting on descriptors",
    "selectors": "waiting on descriptors", "fcntl": "descriptors", "mmap": "mapped files",
    "pathlib": "files", "shutil": "files", "tempfile": "files", "glob": "files",
    "fileinput": "files", "sqlite3": "files", "dbm": "files", "shelve": "files",
    "logging": "log handlers write", "pty": "terminals", "termios": "terminals",
    "resource": "process limits", "ctypes": "native code",
    # the network
    "socket": "sockets", "ssl": "sockets", "socketserver": "servers", "http": "HTTP",
    "urllib": "HTTP", "ftplib": "network", "smtplib": "network", "poplib": "network",
    "imaplib": "network", "xmlrpc": "network", "wsgiref": "servers", "webbrowser": "processes",
    # importing by name at run time, around every rule here
    "importlib": "imports by name", "runpy": "runs modules",
}
SANS_IO_DENIED_BUILTINS = {"open", "print", "input", "__import__", "breakpoint"}

# folder -> (staal packages it may import, third-party packages it may import,
#            standard modules it may not import)
ALLOWED = {
    "shared": ({"staal"}, {"orjson"}, set()),
    "protocol": ({"staal", "staal.protocol"}, {"orjson"}, set(SANS_IO_DENIED)),
    # OpenTelemetry is the supervisor's alone: a worker hands its spans over
    # as data and never imports it (supervisor/telemetry/tracing.py, worker/runs/spans.py).
    "supervisor": ({"staal", "staal.protocol", "staal.supervisor"}, THIRD_PARTY | {"opentelemetry"},
                   set()),
    "worker": ({"staal", "staal.worker"}, THIRD_PARTY, set()),
}


def module_name(path: Path) -> str:
    """The import name of a source file under one of the top-level folders."""
    folder, *parts = path.relative_to(ROOT).with_suffix("").parts
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((PACKAGES[folder], *parts))


def resolve(module: str | None, level: int, importer: str, is_package: bool) -> str:
    """The absolute module a `from` import names, relative ones resolved as
    the interpreter does (importlib.util.resolve_name)."""
    if level == 0:
        return module or ""
    package = importer if is_package else importer.rpartition(".")[0]
    parts = package.split(".")
    if level > len(parts):
        raise ValueError(f"{importer}: a relative import beyond the top-level package")
    base = ".".join(parts[:len(parts) - level + 1])
    return f"{base}.{module}" if module else base


def imports_of(path: Path, importer: str = "", is_package: bool = False) -> set[str]:
    """Every module the file imports. `from X import a` counts as X.a too,
    since `a` may be a submodule (`from staal import worker`)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = resolve(node.module, node.level, importer, is_package)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return names


def builtins_named(path: Path) -> set[str]:
    """The built-ins of SANS_IO_DENIED_BUILTINS a file reads by name."""
    return {node.id for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.Name) and node.id in SANS_IO_DENIED_BUILTINS}


def owner(module: str) -> str | None:
    """The staal package a module belongs to, or None if it is not staal's."""
    parts = module.split(".")
    if parts[0] != "staal":
        return None
    if len(parts) > 1 and f"staal.{parts[1]}" in OWN:
        return f"staal.{parts[1]}"
    return "staal"


def refused(module: str, folder: str) -> bool:
    own_allowed, third_allowed, std_denied = ALLOWED[folder]
    top = module.split(".")[0]
    package = owner(module)
    if package is not None:
        return package not in own_allowed
    if top in STDLIB:
        return top in std_denied
    return top not in third_allowed


def sources(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_each_folder_imports_only_what_the_layout_allows(folder):
    wrong = []
    for path in sources(folder):
        found = imports_of(path, module_name(path), path.name == "__init__.py")
        wrong += [f"{path.relative_to(ROOT)} imports {m}" for m in sorted(found)
                  if refused(m, folder)]
    assert wrong == []


def test_the_protocol_names_no_builtin_that_does_io():
    wrong = [f"{path.relative_to(ROOT)} uses {name}" for path in sources("protocol")
             for name in sorted(builtins_named(path))]
    assert wrong == []


def test_the_import_check_catches_a_forbidden_import(tmp_path):
    module = tmp_path / "x.py"
    module.write_text("import staal.worker.commands.cli\nfrom httpx import Client\n")
    assert imports_of(module) == {"staal.worker.commands.cli", "httpx", "httpx.Client"}
    assert owner("staal.worker.commands.cli") == "staal.worker"
    assert owner("staal.money") == "staal"
    assert refused("staal.worker.commands.cli", "supervisor") and refused("httpx", "shared")
    assert not refused("httpx.Client", "worker")


def test_a_relative_import_is_checked_as_the_module_it_names(tmp_path):
    module = tmp_path / "x.py"
    module.write_text("from . import framing\nfrom .. import worker\nfrom ..worker.cli import app\n")
    found = imports_of(module, "staal.protocol.connection")
    assert found == {"staal.protocol", "staal.protocol.framing", "staal", "staal.worker",
                     "staal.worker.cli", "staal.worker.cli.app"}
    assert [m for m in sorted(found) if refused(m, "protocol")] == [
        "staal.worker", "staal.worker.cli", "staal.worker.cli.app"]
    # In a package's __init__, `.` is the package itself.
    assert resolve("tools", 1, "staal.protocol", is_package=True) == "staal.protocol.tools"
    with pytest.raises(ValueError, match="beyond the top-level package"):
        resolve(None, 3, "staal.protocol.connection", is_package=False)


def test_the_protocol_may_not_import_io_or_concurrency_modules(tmp_path):
    module = tmp_path / "x.py"
    module.write_text("import asyncio\nfrom os import path\nimport socket, threading\n"
                      "import selectors as s\nfrom subprocess import run\nimport re, json\n")
    found = imports_of(module, "staal.protocol.x")
    assert sorted(m for m in found if refused(m, "protocol")) == [
        "asyncio", "os", "os.path", "selectors", "socket", "subprocess", "subprocess.run",
        "threading"]
    assert not [m for m in found if refused(m, "supervisor")]
    module.write_text("def f(line):\n    print(line)\n    return open\n")
    assert builtins_named(module) == {"print", "open"}


def test_every_denied_name_is_a_standard_module_or_builtin():
    assert set(SANS_IO_DENIED) <= STDLIB
    assert set(dir(builtins)) >= SANS_IO_DENIED_BUILTINS


def declared_dependencies() -> set[str]:
    """pyproject.toml's runtime dependencies, as normalized distribution names."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {normalized(re.match(r"[A-Za-z0-9._-]+", spec).group(0))
            for spec in project["dependencies"]}


def normalized(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def third_party_imports() -> dict[str, set[str]]:
    """Top-level module -> the files of the four packages importing it, for
    every module neither staal's nor the standard library's."""
    found: dict[str, set[str]] = {}
    for folder in PACKAGES:
        for path in sources(folder):
            for module in imports_of(path, module_name(path), path.name == "__init__.py"):
                top = module.split(".")[0]
                if owner(module) is None and top not in STDLIB:
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_declared_dependency_is_imported_by_the_code():
    distributions = packages_distributions()
    imported = {normalized(d) for top in third_party_imports() for d in distributions.get(top, ())}
    assert declared_dependencies() - imported == set()


def test_every_third_party_module_the_code_imports_is_a_declared_dependency():
    distributions = packages_distributions()
    declared = declared_dependencies()
    undeclared = {top: sorted(files) for top, files in third_party_imports().items()
                  if not {normalized(d) for d in distributions.get(top, ())} & declared}
    assert undeclared == {}


def test_a_worker_may_not_import_opentelemetry(tmp_path):
    program = tmp_path / "spans.py"
    program.write_text("from opentelemetry import trace\n")
    found = imports_of(program, "staal.worker.runs.spans", False)
    assert {m.split(".")[0] for m in found if refused(m, "worker")} == {"opentelemetry"}
    assert not [m for m in found if refused(m, "supervisor")]


# The rules inside the packages (issue 25): which sub-package may import
# which, so the folders keep meaning what docs/architecture.md says.


def staal_modules() -> dict[str, Path]:
    """Every module of the four packages, by import name."""
    return {module_name(path): path for folder in PACKAGES for path in sources(folder)}


def module_graph() -> dict[str, set[str]]:
    """Module -> the staal modules it imports anywhere in its text (at the
    top, in a function, under TYPE_CHECKING: each is a dependency a reader
    has to hold in mind)."""
    modules = staal_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = imports_of(path, name, path.name == "__init__.py")
        graph[name] = {m for m in found if m in modules and m != name
                       and not name.startswith(m + ".")}  # a package's own parent is not a choice
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            component.append(v)
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_two_modules_of_staal_import_each_other_even_inside_a_function():
    assert cycles(module_graph()) == []


def test_the_cycle_check_finds_a_cycle_through_three_modules():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


# importer prefix -> (module prefixes it may not import, why)
DENIED_INSIDE = {
    "staal.supervisor.transport": (
        ("staal.supervisor.store", "staal.supervisor.workers", "staal.supervisor.recovery"),
        "how a call arrives knows nothing of where runs are kept or who runs them"),
    "staal.supervisor.store": (
        ("staal.supervisor.app", "staal.supervisor.transport", "staal.supervisor.calls",
         "staal.supervisor.views", "staal.supervisor.auth", "staal.supervisor.workers",
         "staal.supervisor.telemetry"),
        "the store is below everything that uses it"),
    "staal.supervisor.views": (
        ("staal.supervisor.app", "staal.supervisor.transport", "staal.supervisor.calls",
         "staal.supervisor.workers"),
        "a view reads records; it does not reach into the serving parts"),
    "staal.supervisor.auth": (
        ("staal.supervisor.app", "staal.supervisor.calls", "staal.supervisor.views",
         "staal.supervisor.transport"),
        "who is asking is decided before, and apart from, what they ask"),
    "staal.worker.runs": (("staal.worker.commands", "staal.worker.processes"),
                          "a run does not know which process or command runs it"),
    "staal.worker.capabilities": (("staal.worker.commands", "staal.worker.processes"),
                                  "a capability does not know which process or command runs it"),
    "staal.worker.confinement": (("staal.worker.commands", "staal.worker.capabilities"),
                                 "confinement is beneath the capabilities it confines"),
}
# (importer, imported): the one crossing a rule above allows, and why.
CROSSINGS = {
    ("staal.supervisor.views.console", "staal.supervisor.transport.listeners"):
        "the console is a listener of its own, bound as the MCP endpoint is",
}
# Only these may import psycopg: the store's own package and the capability.
PSYCOPG_OWNERS = ("staal.supervisor.store.postgres", "staal.worker.capabilities.postgres",
                  "staal.worker.capabilities.sql")


def under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def sub_package_violations() -> list[str]:
    wrong = []
    for name, path in staal_modules().items():
        found = imports_of(path, name, path.name == "__init__.py")
        for importer, (denied, why) in DENIED_INSIDE.items():
            if under(name, importer):
                wrong += [f"{name} imports {m}: {why}" for m in sorted(found)
                          if any(under(m, d) for d in denied)
                          and not any(name == a and under(m, b) for a, b in CROSSINGS)]
        if any(m.split(".")[0] == "psycopg" for m in found) and not any(
                under(name, owner_) for owner_ in PSYCOPG_OWNERS):
            wrong.append(f"{name} imports psycopg: only {', '.join(PSYCOPG_OWNERS)} may")
    return wrong


def test_each_sub_package_imports_only_what_its_layer_allows():
    assert sub_package_violations() == []


def test_only_the_postgres_store_and_capability_import_psycopg(tmp_path):
    assert not [w for w in sub_package_violations() if "psycopg" in w]
    module = tmp_path / "x.py"
    module.write_text("import psycopg\n")
    assert imports_of(module, "staal.supervisor.recovery.x") == {"psycopg"}


def test_the_composition_root_is_imported_by_nothing_but_itself_and_the_entry_points():
    importers = {name for name, deps in module_graph().items()
                 if any(under(m, "staal.supervisor.app") for m in deps)}
    assert sorted(m for m in importers if not under(m, "staal.supervisor.app")) == []


MAX_MODULES = 12
MAX_LINES = 400


def test_no_package_holds_more_than_twelve_modules():
    crowded = {}
    for folder in PACKAGES:
        for package in sorted({p.parent for p in sources(folder)}):
            count = len([p for p in package.glob("*.py") if p.name != "__init__.py"])
            if (count > MAX_MODULES and folder != "shared") or count > MAX_MODULES + 2:
                crowded[str(package.relative_to(ROOT))] = count
    assert crowded == {}


def test_no_module_is_over_four_hundred_lines():
    long = {str(path.relative_to(ROOT)): n for folder in PACKAGES for path in sources(folder)
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}


# tests/ mirrors the packages: a module's unit tests sit in its package's folder.
TEST_ROOTS = {"shared": "shared", "protocol": "protocol", "supervisor": "supervisor",
              "worker": "worker"}
TEST_FOLDERS_OF_THEIR_OWN = {"processes", "clients", "conformance", "deployment", "docs",
                             "project", "helpers", "crash", "powerloss", "js",
                             "py1",  # the Python SDK 1.x client, pinned in a venv of its own
                             "lease_model"}  # the lease protocol's model: docs/lease-model.md


def test_every_unit_test_folder_mirrors_a_package_folder():
    tests = ROOT / "tests"
    strays = [str(d.relative_to(ROOT)) for top in TEST_ROOTS for d in (tests / top).rglob("*")
              if d.is_dir() and d.name != "__pycache__"
              and not (ROOT / TEST_ROOTS[top] / d.relative_to(tests / top)).is_dir()]
    assert strays == []
    folders = {d.name for d in tests.iterdir() if d.is_dir() and d.name != "__pycache__"}
    assert folders - set(TEST_ROOTS) - TEST_FOLDERS_OF_THEIR_OWN == set()


def test_helpers_live_in_one_place():
    tests = ROOT / "tests"
    loose = sorted(p.name for p in tests.glob("*.py")
                   if p.name not in {"__init__.py", "conftest.py", "requirements.py"})
    assert loose == []
