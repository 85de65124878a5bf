"""The confinement tripwire of the process that executes one run.

DESIGN.md section 4 ("Confinement") and section 9 ("Refused in a tool"). A
program is trusted operator code, but the broker's promises only hold if its
actions go through the broker. Before the program is imported, the worker
calls `install_tripwire`, which adds an audit hook (`sys.addaudithook`) that
refuses, outside a `broker_section`:

- network: socket connects, binds and listens, datagrams sent to an address,
  host-name look-ups;
- processes: `subprocess`, `os.system`, `os.exec*`, `os.posix_spawn*`,
  `os.spawn*`, `os.fork`, `os.forkpty`, `pty.spawn`, `webbrowser.open`, and
  the direct `_posixsubprocess.fork_exec` that multiprocessing's spawn and
  forkserver start methods use (it raises no audit event in 3.11);
- file changes: opening with any write, append, create or truncate flag,
  removing, renaming, creating directories, truncating, changing modes,
  owners, times or extended attributes, links, `shutil`'s copies, moves,
  removals and archives, and SQLite databases other than in-memory ones;
- native code: `ctypes` library loads and symbol look-ups, SQLite
  extensions, unless the tool is granted `ffi.c`;
- reading any process's environment through `/proc/<pid>/environ` (secrets
  may sit in the environment the process started with);
- opening any process's memory through `/proc/<pid>/mem` (a worker's holds
  its own run's secrets, for its capabilities);
- reading standard input (`input()`; see also `refuse_stdin`).

A refusal calls the `on_violation` callback with the message, inside a broker
section, and then raises `staal.program.CapabilityRefused`, a `RunEnded` that
`except Exception` does not catch. The callback lets the run fail with kind
`capability` even when the program catches the exception anyway.

This is a tripwire, not a sandbox: it catches a program that reaches past the
broker by mistake, not one determined to (it can enter a broker section
itself, write through `os.write` on a descriptor it already has, use
`_socket` directly, or poke memory with ctypes when ffi is granted). The
process boundary, the scrubbed environment (`scrub_environment`,
`take_secrets`), resource limits and a 0700 runtime directory are the walls.

Reading files stays allowed (imports, data files); `install_tripwire` sets
`sys.dont_write_bytecode` so an import never tries to write a `.pyc`.

This module installs the hook and the two guards over calls that raise no
audit event; the checks, event by event, are `worker/confinement/tripwire_checks.py`;
broker sections and the refusal are `worker/runs/refusal.py`; the environment and
standard input are `worker/confinement/inherited.py`. Their public names are all
importable from here, the worker's one place for confinement.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from staal.worker.confinement.inherited import ALWAYS_KEPT, refuse_stdin, scrub_environment, take_secrets
from staal.worker.confinement.tripwire_checks import (
    OUT,
    Check,
    build_checks,
    process_refusal,
    program_of,
    show,
)
from staal.worker.runs.refusal import (
    IN_BROKER,
    broker_section,
    in_broker_section,
    refuse,
    report_violations_to,
)

if TYPE_CHECKING:
    import _socket

__all__ = [
    "ALWAYS_KEPT",
    "broker_section",
    "in_broker_section",
    "install_tripwire",
    "narrow_tripwire",
    "refuse_stdin",
    "scrub_environment",
    "take_secrets",
    "tripwire_installed",
]


class _State:
    installed = False
    allow_ffi = False
    checks: ClassVar[dict[str, Check]] = {}


def tripwire_installed() -> bool:
    return _State.installed


def install_tripwire(allow_ffi: bool, on_violation: Callable[[str], None]) -> None:
    """Install the audit hook that refuses, outside broker sections, what a
    tool may not do (see the module's docstring). Once per process: an audit
    hook cannot be removed, so a second call is a bug and raises RuntimeError.

    `on_violation(message)` is called on every refusal, inside a broker
    section, before `CapabilityRefused(message)` is raised; the run must fail
    with kind `capability` once it has been called, whatever the program
    does with the exception. It must not raise.
    """
    if _State.installed:
        raise RuntimeError("the confinement tripwire is already installed in this process")
    sys.dont_write_bytecode = True  # an import must never try to write a .pyc
    _State.checks = build_checks(allow_ffi)
    _guard_fork_exec()
    _guard_listen()
    report_violations_to(on_violation)
    _State.allow_ffi = allow_ffi
    _State.installed = True

    state = _State
    in_broker = IN_BROKER.get
    report_and_raise = refuse

    def tripwire(event: str, args: tuple[Any, ...]) -> None:
        check = state.checks.get(event)
        if check is None or in_broker():
            return
        message = check(args)
        if message is not None:
            report_and_raise(message)

    sys.addaudithook(tripwire)


def narrow_tripwire(allow_ffi: bool, on_violation: Callable[[str], None]) -> None:
    """In a process forked from one with the tripwire installed (the zygote
    allows what any of its tools may do): tighten it to one run's tool and
    report to that run. Native code refused stays refused."""
    if not _State.installed:
        raise RuntimeError("no tripwire to narrow in this process")
    if _State.allow_ffi and not allow_ffi:
        _State.checks = build_checks(False)
        _State.allow_ffi = False
    report_violations_to(on_violation)


def _guard_fork_exec() -> None:
    """`_posixsubprocess.fork_exec` starts a process without an audit event in
    3.11; `subprocess` audits before calling it, but multiprocessing's spawn
    and forkserver start methods call it directly."""
    try:
        import _posixsubprocess
    except ImportError:  # not POSIX
        return
    original = _posixsubprocess.fork_exec

    def fork_exec(*args: Any, **kwargs: Any) -> Any:
        if not IN_BROKER.get():
            argv = args[0] if args else kwargs.get("args")
            refuse(process_refusal("_posixsubprocess.fork_exec", program_of(argv)))
        return original(*args, **kwargs)

    _posixsubprocess.fork_exec = fork_exec


def _guard_listen() -> None:
    """`listen()` on an unbound socket binds it to a free port without a
    `socket.bind` event, and 3.11 has no `socket.listen` event."""
    import socket

    original = socket.socket.listen

    def listen(self: _socket.socket, *args: Any) -> None:
        if not IN_BROKER.get():
            where = show(self.getsockname())
            refuse(f"a tool may not listen for connections (socket.listen on {where}){OUT}")
        original(self, *args)

    socket.socket.listen = listen  # type: ignore[method-assign]
