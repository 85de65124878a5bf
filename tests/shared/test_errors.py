"""The exception tree: one base per package, each with a stable `kind`.

Walks every module of staal's four packages, so an exception class added
anywhere is checked the day it is written: it belongs to its package's base
(or is one of the program's own exceptions), and its `kind` is its own.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

from staal.errors import StaalError
from staal.program import ActionFailed, CapabilityRefused, RunEnded, RunFailed
from staal.protocol.errors import ProtocolError
from staal.records.outcomes import FAILURE_KINDS
from staal.supervisor.errors import SupervisorError
from staal.worker.errors import WorkerError
from staal.worker.runs.actions import RunStopped

PACKAGES = ("staal.protocol", "staal.supervisor", "staal.worker", "staal")
BASES: dict[str, type[StaalError]] = {
    "staal.protocol": ProtocolError,
    "staal.supervisor": SupervisorError,
    "staal.worker": WorkerError,
    "staal": StaalError,
}
# The program's own exceptions (staal.program): control flow that ends a run
# (a BaseException, so a program's `except Exception` cannot swallow it) and
# an action's failure a program may catch. Their kind is the run's failure
# kind, given per instance, and travels as a `Failure`, never as an object.
PROGRAM_EXCEPTIONS = {RunEnded, RunFailed, CapabilityRefused, ActionFailed, RunStopped}
# Kinds two classes share on purpose.
SHARED_KINDS = {
    # `resolve` refused, by `staal-supervisor resolve` or by `staal journal
    # resolve`: the same command's refusal, whichever process checked it.
    "resolve_refused": {"staal.supervisor.recovery.resolve.ResolveRefused",
                        "staal.worker.commands.resolve.ResolveRefused"},
}
# Classes that keep their parent's kind on purpose: to every caller, a lost
# connection to the store is the store failing.
INHERITED_KINDS = {"staal.supervisor.store.postgres.connection.ConnectionLost"}


def _modules() -> list[ModuleType]:
    modules = []
    for root in PACKAGES:
        package = importlib.import_module(root)
        modules.append(package)
        for info in pkgutil.walk_packages(package.__path__, root + "."):
            modules.append(importlib.import_module(info.name))
    return modules


def _exception_classes() -> list[type[BaseException]]:
    found: dict[type[BaseException], None] = {}
    for module in _modules():
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, BaseException) \
                    and value.__module__ == module.__name__:
                found[value] = None
    return list(found)


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _package(cls: type) -> str:
    return next(root for root in PACKAGES if cls.__module__.startswith(root + ".")
                or cls.__module__ == root)


CLASSES = _exception_classes()
ERRORS = [cls for cls in CLASSES if cls not in PROGRAM_EXCEPTIONS]


def test_the_walk_finds_the_exceptions_of_every_package():
    assert {_package(cls) for cls in ERRORS} == set(PACKAGES)


@pytest.mark.parametrize("cls", ERRORS, ids=_name)
def test_every_exception_is_in_its_packages_tree(cls):
    assert issubclass(cls, BASES[_package(cls)]), \
        f"{_name(cls)} is not a {BASES[_package(cls)].__name__}"


@pytest.mark.parametrize("cls", ERRORS, ids=_name)
def test_every_exception_names_a_kind_of_its_own(cls):
    assert issubclass(cls, StaalError)
    assert isinstance(cls.kind, str) and cls.kind
    if _name(cls) in INHERITED_KINDS:
        assert "kind" not in vars(cls)
    else:
        assert "kind" in vars(cls), f"{_name(cls)} inherits its parent's kind {cls.kind!r}"


def test_no_two_exceptions_share_a_kind_unless_it_is_documented():
    holders: dict[str, set[str]] = {}
    for cls in ERRORS:
        if "kind" in vars(cls):
            holders.setdefault(cls.kind, set()).add(_name(cls))
    shared = {kind: names for kind, names in holders.items() if len(names) > 1}
    assert shared == SHARED_KINDS


def test_the_program_exceptions_are_only_the_documented_ones():
    assert {cls for cls in CLASSES if cls not in ERRORS} == PROGRAM_EXCEPTIONS


def test_the_program_exceptions_carry_a_failure_kind():
    assert RunFailed("budget", "over").kind == "budget"
    assert CapabilityRefused("no such grant").kind == "capability"
    assert ActionFailed("refused").kind == "action"
    assert {RunFailed("deadline", "late").kind, ActionFailed("x", "provider").kind} <= \
        set(FAILURE_KINDS)


def test_an_exception_in_two_trees_keeps_the_builtin_a_caller_catches():
    from staal.protocol.errors import BadValue
    from staal.worker.runs.urls import UrlRefused

    assert issubclass(BadValue, ValueError) and issubclass(UrlRefused, ValueError)
    refused = UrlRefused("ftp://x", "only http and https")
    assert refused.to_data() == {"kind": "url_refused", "message": "URL 'ftp://x': only http and https"}


def test_a_program_cannot_fail_its_own_run_as_cancelled():
    from staal.program import fail

    with pytest.raises(ValueError, match="'cancelled' is not a failure kind"):
        fail("cancelled", "pretending the caller cancelled")
    with pytest.raises(RunFailed) as caught:
        fail("deadline", "late")
    assert caught.value.kind == "deadline"
