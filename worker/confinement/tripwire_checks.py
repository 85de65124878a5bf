"""What the tripwire refuses, event by event: each check takes an audit
event's arguments and returns the refusal message, or None to allow.

`build_checks(allow_ffi)` is the table `worker/confinement/confine.py`'s audit hook
looks events up in; the hook runs a check only outside broker sections
(`worker/runs/refusal.py`). Each message names what was refused (shortened by `show`) and, where
there is one, the way that is allowed instead.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from functools import partial
from typing import Any

__all__ = ["OUT", "Check", "build_checks", "process_refusal", "program_of", "show"]

OUT = "; the broker is the only way out"

# An audit event's arguments to the refusal message, or None to allow.
Check = Callable[[tuple[Any, ...]], str | None]


def show(value: object, limit: int = 120) -> str:
    """A short repr of what was refused, for a message."""
    if isinstance(value, bytes):
        value = os.fsdecode(value)
    elif isinstance(value, os.PathLike):
        value = os.fspath(value)
        if isinstance(value, bytes):
            value = os.fsdecode(value)
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def program_of(args: object) -> object:
    """The program an argv names: its first element, or the string itself."""
    if isinstance(args, (str, bytes, os.PathLike)):
        return args
    try:
        return next(iter(args))  # type: ignore[call-overload]
    except (TypeError, StopIteration):
        return args


# Each check takes the audit event's arguments and returns the refusal
# message, or None to allow. They run only outside broker sections.

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_WRITE_FLAGS |= getattr(os, "O_TMPFILE", 0)
_WRITE_MODE = frozenset("wax+")
_PROC_ENVIRON = re.compile(r"/proc/(?:\d+|self|thread-self)(?:/task/\d+)?/environ")


def _as_str_path(path: object) -> str | None:
    if not isinstance(path, (str, bytes, os.PathLike)):
        return None  # a descriptor, or not a path at all
    try:
        value = os.fspath(path)
    except TypeError:
        return None
    return os.fsdecode(value)


def _reads_an_environment(path: str) -> bool:
    if "environ" not in path:
        return False
    resolved = os.path.realpath(path)
    if _PROC_ENVIRON.fullmatch(resolved):
        return True
    # A relative "environ" that does not exist here was most likely opened
    # against a directory descriptor (os.open(..., dir_fd=)), which the audit
    # event does not carry: refuse rather than guess.
    return (
        not os.path.isabs(path)
        and os.path.basename(path) == "environ"
        and not os.path.exists(resolved)
    )


def _check_open(args: tuple[Any, ...]) -> str | None:
    path, mode, flags = args[0], args[1], args[2]
    text = _as_str_path(path)
    writes = bool(flags & _WRITE_FLAGS) if isinstance(flags, int) else False
    if isinstance(mode, str) and not _WRITE_MODE.isdisjoint(mode):
        writes = True
    if writes:
        if text == os.devnull:
            return None
        what = f"descriptor {path}" if text is None else show(text)
        return f"a tool may not write to files (open of {what} for writing){OUT}"
    if text is not None and _reads_an_environment(text):
        return (
            f"a tool may not read a process's environment (open of {show(text)}); "
            "secrets reach a tool only through its capabilities"
        )
    if text is not None and _opens_a_memory(text):
        return (
            f"a tool may not read a process's memory (open of {show(text)}); "
            "secrets reach a tool only through its capabilities"
        )
    return None


# -- /proc/<pid>/mem: a process's memory, its run's secrets included.

_PROC_MEM = re.compile(r"/proc/(?:\d+|self|thread-self)(?:/task/\d+)?/mem")


def _opens_a_memory(path: str) -> bool:
    """As `_reads_an_environment`, for `mem`: a relative "mem" that does not
    exist here was most likely opened against a /proc directory descriptor."""
    if "mem" not in path:
        return False
    if _PROC_MEM.fullmatch(os.path.realpath(path)):
        return True
    return not os.path.isabs(path) and os.path.basename(path) == "mem" and not os.path.exists(path)


# Events whose first two arguments are a source and a destination.
_TWO_PATHS = frozenset(
    {
        "os.rename",
        "os.link",
        "os.symlink",
        "shutil.copyfile",
        "shutil.copymode",
        "shutil.copystat",
        "shutil.copytree",
        "shutil.move",
    }
)


def _file_change(args: tuple[Any, ...], event: str) -> str:
    what = show(args[0] if args else None)
    if event in _TWO_PATHS and len(args) > 1:
        what = f"{what} to {show(args[1])}"
    return f"a tool may not change files ({event} of {what}){OUT}"


def process_refusal(event: str, what: object) -> str:
    return f"a tool may not start processes ({event} of {show(what)}){OUT}"


def _check_popen(args: tuple[Any, ...]) -> str:
    executable, argv = args[0], args[1]
    return process_refusal("subprocess.Popen", executable if executable is not None else program_of(argv))


def _check_connect(args: tuple[Any, ...]) -> str:
    return f"a tool may not open network connections (socket.connect to {show(args[1])}){OUT}"


def _check_bind(args: tuple[Any, ...]) -> str:
    return (
        f"a tool may not bind sockets or listen for connections "
        f"(socket.bind to {show(args[1])}){OUT}"
    )


def _check_sendto(args: tuple[Any, ...]) -> str:
    return f"a tool may not send network datagrams (socket.sendto to {show(args[1])}){OUT}"


def _check_sendmsg(args: tuple[Any, ...]) -> str | None:
    if args[1] is None:  # a connected socket: its connect was checked
        return None
    return f"a tool may not send network datagrams (socket.sendmsg to {show(args[1])}){OUT}"


def _lookup(event: str) -> Callable[[tuple[Any, ...]], str]:
    def check(args: tuple[Any, ...]) -> str:
        return f"a tool may not look up host names ({event} of {show(args[0])}){OUT}"

    return check


def _check_sqlite(args: tuple[Any, ...]) -> str | None:
    database = _as_str_path(args[0]) if args else None
    if database in (":memory:", ""):
        return None
    return (
        f"a tool may not open databases directly (sqlite3.connect of {show(args[0])}); "
        "a db.sqlite capability is the way to a database"
    )


def _native(event: str) -> Check:
    def check(args: tuple[Any, ...]) -> str | None:
        if event == "ctypes.dlopen" and args[0] is None:
            # The process's own image: `import ctypes` opens it for
            # `ctypes.pythonapi`. It loads nothing new, and looking a symbol
            # up in it (ctypes.dlsym) is refused.
            return None
        if event == "sqlite3.enable_load_extension" and not args[1]:
            return None  # turning loading off
        # dlsym: (library, name); dlsym/handle: (handle, name);
        # load_extension: (connection, path); dlopen: (name,)
        what = args[0] if event == "ctypes.dlopen" else args[-1]
        if event == "sqlite3.enable_load_extension":
            what = "a connection"
        return (
            f"a tool may not load native code ({event} of {show(what)}) "
            "unless its manifest grants ffi.c"
        )

    return check


def build_checks(allow_ffi: bool) -> dict[str, Check]:
    checks: dict[str, Check] = {
        "open": _check_open,
        # network
        "socket.connect": _check_connect,
        "socket.bind": _check_bind,
        "socket.sendto": _check_sendto,
        "socket.sendmsg": _check_sendmsg,
        "socket.getaddrinfo": _lookup("socket.getaddrinfo"),
        "socket.gethostbyname": _lookup("socket.gethostbyname"),
        "socket.gethostbyaddr": _lookup("socket.gethostbyaddr"),
        "socket.getnameinfo": _lookup("socket.getnameinfo"),
        # processes
        "subprocess.Popen": _check_popen,
        "os.system": lambda a: process_refusal("os.system", a[0]),
        "os.exec": lambda a: process_refusal("os.exec", a[0]),
        "os.posix_spawn": lambda a: process_refusal("os.posix_spawn", a[0]),
        "os.spawn": lambda a: process_refusal("os.spawn", a[1]),
        "os.fork": lambda a: process_refusal("os.fork", "a copy of this process"),
        "os.forkpty": lambda a: process_refusal("os.forkpty", "a copy of this process"),
        "pty.spawn": lambda a: process_refusal("pty.spawn", program_of(a[0])),
        "os.startfile": lambda a: process_refusal("os.startfile", a[0]),
        "webbrowser.open": lambda a: process_refusal("webbrowser.open", a[0]),
        # standard input
        "builtins.input": lambda a: (
            "a tool may not read standard input (input()); its inputs are its parameters"
        ),
        # databases write files through C code the "open" event never sees
        "sqlite3.connect": _check_sqlite,
    }
    for event in (
        "os.remove",  # also os.unlink
        "os.rename",  # also os.replace
        "os.rmdir",
        "os.mkdir",  # also os.makedirs
        "os.truncate",  # also os.ftruncate
        "os.chmod",  # also os.fchmod, os.lchmod
        "os.chown",  # also os.fchown, os.lchown
        "os.chflags",
        "os.link",
        "os.symlink",
        "os.utime",
        "os.setxattr",
        "os.removexattr",
        "shutil.chown",
        "shutil.copyfile",
        "shutil.copymode",
        "shutil.copystat",
        "shutil.copytree",
        "shutil.make_archive",
        "shutil.move",
        "shutil.rmtree",
        "shutil.unpack_archive",
        # ("tempfile.mkstemp" and "tempfile.mkdtemp" are raised only after
        # the file or directory exists; the "open" and "os.mkdir" under them
        # are refused first.)
    ):
        checks[event] = partial(_file_change, event=event)
    if not allow_ffi:
        for event in (
            "ctypes.dlopen",
            "ctypes.dlsym",
            "ctypes.dlsym/handle",
            "sqlite3.enable_load_extension",
            "sqlite3.load_extension",
        ):
            checks[event] = _native(event)
    return checks
