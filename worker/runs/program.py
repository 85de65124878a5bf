"""Loading a program and reading its entry function (DESIGN.md section 3).

The entry function's parameters are the tool's inputs and its capabilities:
a parameter annotated with a `staal.caps` class is a capability and needs a
grant of the same name and capability; every other parameter is an input,
described as data (`staal.inputs.types`) so the supervisor can check arguments
without importing the program. Every problem is reported at once.

A program is read once: the bytes that are hashed (the journal's
program_sha256) are the bytes compiled, and that code object is what every
run executes. `fresh_entry` executes it again into a new module, so a run
can start from the program's module body rather than from what an earlier
run left in its globals; the libraries and sibling modules it imports stay
loaded (they are in sys.modules already).
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any

from staal.caps import Capability
from staal.inputs.types import Description
from staal.manifest.model import Grant
from staal.worker.runs.annotations import (
    BadDefault,
    UnsupportedType,
    describe,
    describe_default,
    type_name,
)


@dataclass(frozen=True)
class LoadedProgram:
    """A program file, read once: its module, the code compiled from the
    bytes read, their SHA-256, and the spec a fresh module is made from."""

    module: ModuleType
    code: CodeType
    sha256: str
    spec: ModuleSpec

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class ProgramInfo:
    path: Path
    entry: str
    # The inputs description (`staal.inputs.types`): {"inputs": [...]}.
    inputs: Description
    # Capability parameters: name -> capability name.
    capabilities: dict[str, str]
    problems: tuple[str, ...] = ()
    function: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    # What a fresh run needs (`fresh_entry`), and the hash of what runs.
    loaded: LoadedProgram | None = field(default=None, compare=False, repr=False)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def sha256(self) -> str:
        return self.loaded.sha256 if self.loaded is not None else ""


def program_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def module_name(path: Path) -> str:
    """The program's module name: one per file, whatever its stem."""
    return "staal_program_" + hashlib.sha256(str(path).encode()).hexdigest()[:16]


# Each program loaded in this process, by module name.
_loaded: dict[str, LoadedProgram] = {}


def load_program(path: Path) -> LoadedProgram:
    """Import the program file as a module of its own, with its folder on
    the path so it can import modules beside it. Its bytes are read once:
    the hash is of the code that runs."""
    path = Path(path).resolve()
    name = module_name(path)
    known, current = _loaded.get(name), sys.modules.get(name)
    if known is not None and current is not None and getattr(current, "__file__", None) == str(path):
        return replace(known, module=current)  # preloaded by the zygote, or inspected before this run
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be loaded as a Python module")
    data = path.read_bytes()
    # As the import system compiles a source file (without writing a .pyc).
    code = compile(data, str(path), "exec", dont_inherit=True)
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    loaded = LoadedProgram(_new_module(spec, code), code, hashlib.sha256(data).hexdigest(), spec)
    _loaded[name] = loaded
    return loaded


def load_module(path: Path) -> ModuleType:
    """The program's module (`load_program`)."""
    return load_program(path).module


def fresh_entry(info: ProgramInfo) -> Callable[..., Any]:
    """The entry function of a new module of the program: its module body
    executed again, from the code loaded first (never the file read again,
    so it is the code the journal's program_sha256 names). Only the program
    module is new: what it imports is in sys.modules and stays."""
    if info.loaded is None:  # inspect_program loads it whenever it finds no problem
        raise RuntimeError(f"{info.path} was not loaded")
    module = _new_module(info.loaded.spec, info.loaded.code)
    entry = getattr(module, info.entry, None)
    if entry is None or not callable(entry):
        raise TypeError(f"{info.path}: its module body defined no function '{info.entry}'")
    return entry  # type: ignore[no-any-return]


def _new_module(spec: ModuleSpec, code: CodeType) -> ModuleType:
    """A new module from `spec`, with `code` executed into it. It is in
    sys.modules before its body runs (as an import does: dataclasses and
    string annotations look it up there); if the body raises, whatever was
    there before is put back."""
    module = importlib.util.module_from_spec(spec)
    previous = sys.modules.get(spec.name)
    sys.modules[spec.name] = module
    try:
        exec(code, module.__dict__)
    except BaseException:
        if previous is None:
            sys.modules.pop(spec.name, None)
        else:
            sys.modules[spec.name] = previous
        raise
    return module


def inspect_program(path: Path, entry: str, grants: Mapping[str, Grant] | None = None) -> ProgramInfo:
    """Import the program and read its entry function; with `grants`, also
    check each capability parameter against its grant and each grant
    against a parameter."""
    problems: list[str] = []
    empty = ProgramInfo(path, entry, {"inputs": []}, {}, ())
    try:
        loaded = load_program(path)
    except SyntaxError as exc:
        return _failed(empty, f"program: line {exc.lineno}: {exc.msg}")
    except BaseException as exc:  # noqa: BLE001 - the program's own import-time code failed
        return _failed(empty, f"program: importing it failed: {type(exc).__name__}: {exc}")
    function = getattr(loaded.module, entry, None)
    if function is None or not callable(function):
        return _failed(empty, f"entry: the program has no function '{entry}'")
    inputs, capabilities = _parameters(function, problems)
    if grants is not None:
        problems.extend(_grant_problems(entry, inputs, capabilities, grants))
    return ProgramInfo(path, entry, {"inputs": inputs}, capabilities, tuple(problems), function,
                       loaded)


def _failed(info: ProgramInfo, problem: str) -> ProgramInfo:
    return ProgramInfo(info.path, info.entry, info.inputs, {}, (problem,))


def _hints(function: Callable[..., Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The function's annotations, evaluated, and a problem for each one
    that cannot be (a name that is not defined, say): the problem of its
    own parameter, while the others are still read, so every problem is
    reported at once."""
    try:
        return typing.get_type_hints(function, include_extras=True), {}
    except Exception:  # noqa: BLE001 - find which annotation, below
        pass
    hints: dict[str, Any] = {}
    problems: dict[str, str] = {}
    for name, raw in getattr(function, "__annotations__", {}).items():
        def probe() -> None: ...
        probe.__annotations__ = {name: raw}
        try:
            hints.update(typing.get_type_hints(probe, globalns=function.__globals__,
                                               include_extras=True))
        except Exception as exc:  # noqa: BLE001 - whatever evaluating it raised
            shown = raw if isinstance(raw, str) else type_name(raw)
            problems[name] = (f"{name}: its annotation {shown!r} cannot be evaluated: "
                              f"{type(exc).__name__}: {exc}")
    return hints, problems


def _parameters(function: Callable[..., Any], problems: list[str],
                ) -> tuple[list[dict[str, Any]], dict[str, str]]:
    hints, unreadable = _hints(function)
    inputs: list[dict[str, Any]] = []
    capabilities: dict[str, str] = {}
    for param in inspect.signature(function).parameters.values():
        name = param.name
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            problems.append(f"{name}: *args and **kwargs cannot be inputs; name each one")
            continue
        if param.kind is param.POSITIONAL_ONLY:
            problems.append(f"{name}: a positional-only parameter cannot be an input")
            continue
        if name in unreadable:
            problems.append(unreadable.pop(name))
            continue
        annotation = hints.get(name, inspect.Parameter.empty)
        if isinstance(annotation, type) and issubclass(annotation, Capability):
            _capability(name, annotation, param, capabilities, problems)
            continue
        _input(name, annotation, param, inputs, problems)
    problems.extend(unreadable.values())  # the return annotation's
    return inputs, capabilities


def _capability(name: str, annotation: type[Capability], param: inspect.Parameter,
                capabilities: dict[str, str], problems: list[str]) -> None:
    if not annotation.CAP:
        problems.append(f"{name}: annotate it with a capability class, e.g. staal.caps.HttpGet")
        return
    if param.default is not inspect.Parameter.empty:
        problems.append(f"{name}: a capability parameter has no default; the grant provides it")
        return
    capabilities[name] = annotation.CAP


def _input(name: str, annotation: Any, param: inspect.Parameter, inputs: list[dict[str, Any]],
           problems: list[str]) -> None:
    if annotation is inspect.Parameter.empty:
        problems.append(f"{name}: has no type annotation (use staal.Json for any JSON value)")
        return
    try:
        desc = describe(annotation)
    except UnsupportedType as exc:
        problems.append(f"{name}: {exc}")
        return
    item: dict[str, Any] = {"name": name, "type": desc}
    if param.default is not inspect.Parameter.empty:
        try:
            item["default"] = describe_default(desc, param.default)
        except BadDefault as exc:
            problems.append(f"{name}: {exc.message}")
            return
    inputs.append(item)


def _grant_problems(entry: str, inputs: list[dict[str, Any]], capabilities: dict[str, str],
                    grants: Mapping[str, Grant]) -> list[str]:
    from staal.manifest.catalogue import CATALOGUE

    problems = []
    for name, cap in capabilities.items():
        grant = grants.get(name)
        class_name = CATALOGUE[cap].class_name
        if grant is None:
            problems.append(f"{name}: a {class_name} parameter needs a grant named '{name}' "
                            f"of '{cap}'")
        elif grant.cap != cap:
            problems.append(f"grants.{name}: is '{grant.cap}', but parameter '{name}' is a "
                            f"{class_name} ('{cap}')")
    input_names = {item["name"] for item in inputs}
    for name in grants:
        if name in capabilities:
            continue
        if name in input_names:
            problems.append(f"grants.{name}: '{name}' is an input of {entry}(), not a capability")
        else:
            problems.append(f"grants.{name}: names no parameter of {entry}()")
    return problems
