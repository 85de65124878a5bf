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
"""

from __future__ import annotations

import contextvars
import io
import os
import re
import sys
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, NoReturn

from staal.program import CapabilityRefused

__all__ = [
    "ALWAYS_KEPT",
    "broker_section",
    "in_broker_section",
    "install_tripwire",
    "refuse_stdin",
    "scrub_environment",
    "take_secrets",
    "tripwire_installed",
]

# Environment variables `scrub_environment` always keeps: the tools' search
# path, and the crash-kill harness's switches (DESIGN.md section 7).
ALWAYS_KEPT = frozenset({"PATH", "STAAL_TEST_KILL_POINTS", "STAAL_KILL_AT", "STAAL_KILL_ONCE",
                         "STAAL_TEST_FS_RECORD"})

_OUT = "; the broker is the only way out"

# ---------------------------------------------------------------- broker sections

# A context variable rather than a thread-local: each thread starts with an
# empty context (so a section covers only the thread that entered it), and an
# asyncio task started inside a section inherits it while one started outside
# does not.
_IN_BROKER: contextvars.ContextVar[bool] = contextvars.ContextVar("staal_in_broker", default=False)


class _BrokerSection:
    __slots__ = ("_token",)

    def __enter__(self) -> None:
        self._token = _IN_BROKER.set(True)

    def __exit__(self, *exc_info: object) -> None:
        _IN_BROKER.reset(self._token)


def broker_section() -> _BrokerSection:
    """A context manager: while it is active in the current thread (and
    context), the tripwire allows everything. The broker wraps its own work
    (HTTP connections, journal writes) in it. Sections nest."""
    return _BrokerSection()


def in_broker_section() -> bool:
    return _IN_BROKER.get()


# ---------------------------------------------------------------- refusing


class _State:
    installed = False
    allow_ffi = False
    on_violation: Callable[[str], None] | None = None
    checks: ClassVar[dict[str, Callable[[tuple[Any, ...]], str | None]]] = {}


def tripwire_installed() -> bool:
    return _State.installed


def _refuse(message: str) -> NoReturn:
    """Report `message` to the installed `on_violation` (inside a broker
    section, so the callback may write the journal) and raise."""
    callback = _State.on_violation
    if callback is not None:
        try:
            with broker_section():
                callback(message)
        except BaseException as error:  # a broken callback must not unblock the action
            raise CapabilityRefused(message) from error
    raise CapabilityRefused(message)


def _show(value: object, limit: int = 120) -> str:
    """A short repr of what was refused, for a message."""
    if isinstance(value, bytes):
        value = os.fsdecode(value)
    elif isinstance(value, os.PathLike):
        value = os.fspath(value)
        if isinstance(value, bytes):
            value = os.fsdecode(value)
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _program_of(args: object) -> object:
    """The program an argv names: its first element, or the string itself."""
    if isinstance(args, (str, bytes, os.PathLike)):
        return args
    try:
        return next(iter(args))  # type: ignore[call-overload]
    except (TypeError, StopIteration):
        return args


# ---------------------------------------------------------------- the checks
# Each check takes the audit event's arguments and returns the refusal
# message, or None to allow. They run only outside broker sections.

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_WRITE_FLAGS |= getattr(os, "O_TMPFILE", 0)
_WRITE_MODE = frozenset("wax+")
_PROC_ENVIRON = re.compile(r"/proc/(?:\d+|self|thread-self)(?:/task/\d+)?/environ")


def _as_str_path(path: object) -> str | None:
    if isinstance(path, int):
        return None
    try:
        value = os.fspath(path)  # type: ignore[arg-type]
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
        what = f"descriptor {path}" if text is None else _show(text)
        return f"a tool may not write to files (open of {what} for writing){_OUT}"
    if text is not None and _reads_an_environment(text):
        return (
            f"a tool may not read a process's environment (open of {_show(text)}); "
            "secrets reach a tool only through its capabilities"
        )
    if text is not None and _opens_a_memory(text):
        return (
            f"a tool may not read a process's memory (open of {_show(text)}); "
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
    what = _show(args[0] if args else None)
    if event in _TWO_PATHS and len(args) > 1:
        what = f"{what} to {_show(args[1])}"
    return f"a tool may not change files ({event} of {what}){_OUT}"


def _process(event: str, what: object) -> str:
    return f"a tool may not start processes ({event} of {_show(what)}){_OUT}"


def _check_popen(args: tuple[Any, ...]) -> str:
    executable, argv = args[0], args[1]
    return _process("subprocess.Popen", executable if executable is not None else _program_of(argv))


def _check_connect(args: tuple[Any, ...]) -> str:
    return f"a tool may not open network connections (socket.connect to {_show(args[1])}){_OUT}"


def _check_bind(args: tuple[Any, ...]) -> str:
    return (
        f"a tool may not bind sockets or listen for connections "
        f"(socket.bind to {_show(args[1])}){_OUT}"
    )


def _check_sendto(args: tuple[Any, ...]) -> str:
    return f"a tool may not send network datagrams (socket.sendto to {_show(args[1])}){_OUT}"


def _check_sendmsg(args: tuple[Any, ...]) -> str | None:
    if args[1] is None:  # a connected socket: its connect was checked
        return None
    return f"a tool may not send network datagrams (socket.sendmsg to {_show(args[1])}){_OUT}"


def _lookup(event: str) -> Callable[[tuple[Any, ...]], str]:
    def check(args: tuple[Any, ...]) -> str:
        return f"a tool may not look up host names ({event} of {_show(args[0])}){_OUT}"

    return check


def _check_sqlite(args: tuple[Any, ...]) -> str | None:
    database = _as_str_path(args[0]) if args else None
    if database in (":memory:", ""):
        return None
    return (
        f"a tool may not open databases directly (sqlite3.connect of {_show(args[0])}); "
        "a db.sqlite capability is the way to a database"
    )


def _native(event: str) -> Callable[[tuple[Any, ...]], str | None]:
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
            f"a tool may not load native code ({event} of {_show(what)}) "
            "unless its manifest grants ffi.c"
        )

    return check


def _build_checks(allow_ffi: bool) -> dict[str, Callable[[tuple[Any, ...]], str | None]]:
    checks: dict[str, Callable[[tuple[Any, ...]], str | None]] = {
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
        "os.system": lambda a: _process("os.system", a[0]),
        "os.exec": lambda a: _process("os.exec", a[0]),
        "os.posix_spawn": lambda a: _process("os.posix_spawn", a[0]),
        "os.spawn": lambda a: _process("os.spawn", a[1]),
        "os.fork": lambda a: _process("os.fork", "a copy of this process"),
        "os.forkpty": lambda a: _process("os.forkpty", "a copy of this process"),
        "pty.spawn": lambda a: _process("pty.spawn", _program_of(a[0])),
        "os.startfile": lambda a: _process("os.startfile", a[0]),
        "webbrowser.open": lambda a: _process("webbrowser.open", a[0]),
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
        checks[event] = lambda a, _event=event: _file_change(a, _event)
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


# ---------------------------------------------------------------- installing


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
    _State.checks = _build_checks(allow_ffi)
    _guard_fork_exec()
    _guard_listen()
    _State.on_violation = on_violation
    _State.allow_ffi = allow_ffi
    _State.installed = True

    state = _State
    in_broker = _IN_BROKER.get
    refuse = _refuse

    def tripwire(event: str, args: tuple[Any, ...]) -> None:
        check = state.checks.get(event)
        if check is None or in_broker():
            return
        message = check(args)
        if message is not None:
            refuse(message)

    sys.addaudithook(tripwire)


def narrow_tripwire(allow_ffi: bool, on_violation: Callable[[str], None]) -> None:
    """In a process forked from one with the tripwire installed (the zygote
    allows what any of its tools may do): tighten it to one run's tool and
    report to that run. Native code refused stays refused."""
    if not _State.installed:
        raise RuntimeError("no tripwire to narrow in this process")
    if _State.allow_ffi and not allow_ffi:
        _State.checks = _build_checks(False)
        _State.allow_ffi = False
    _State.on_violation = on_violation


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
        if not _IN_BROKER.get():
            argv = args[0] if args else kwargs.get("args")
            _refuse(_process("_posixsubprocess.fork_exec", _program_of(argv)))
        return original(*args, **kwargs)

    _posixsubprocess.fork_exec = fork_exec


def _guard_listen() -> None:
    """`listen()` on an unbound socket binds it to a free port without a
    `socket.bind` event, and 3.11 has no `socket.listen` event."""
    import socket

    original = socket.socket.listen

    def listen(self: socket.socket, *args: Any) -> None:
        if not _IN_BROKER.get():
            where = _show(self.getsockname())
            _refuse(f"a tool may not listen for connections (socket.listen on {where}){_OUT}")
        original(self, *args)

    socket.socket.listen = listen  # type: ignore[method-assign]


# ---------------------------------------------------------------- standard input

_STDIN_MESSAGE = "a tool may not read standard input (sys.stdin.{}); its inputs are its parameters"
# The objects sys.stdin held before refuse_stdin. Kept alive on purpose: their
# FileIO owns descriptor 0 and would close it (now /dev/null) when collected.
_replaced_stdin: list[object] = []


class _RefusedStdinBuffer(io.BufferedIOBase):
    """`sys.stdin.buffer` of a tool: every read is refused."""

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return 0

    def isatty(self) -> bool:
        return False

    def read(self, size: int | None = -1) -> bytes:
        _refuse(_STDIN_MESSAGE.format("buffer.read"))

    def read1(self, size: int = -1) -> bytes:
        _refuse(_STDIN_MESSAGE.format("buffer.read1"))

    def readinto(self, buffer: Any) -> int:
        _refuse(_STDIN_MESSAGE.format("buffer.readinto"))

    def readinto1(self, buffer: Any) -> int:
        _refuse(_STDIN_MESSAGE.format("buffer.readinto1"))

    def readline(self, size: int | None = -1) -> bytes:
        _refuse(_STDIN_MESSAGE.format("buffer.readline"))

    def readlines(self, hint: int | None = -1) -> list[bytes]:
        _refuse(_STDIN_MESSAGE.format("buffer.readlines"))

    def peek(self, size: int = 0) -> bytes:
        _refuse(_STDIN_MESSAGE.format("buffer.peek"))


class _RefusedStdin(io.TextIOBase):
    """`sys.stdin` of a tool: every read is refused. `fileno()` is 0, which
    is /dev/null by then."""

    def __init__(self) -> None:
        super().__init__()
        self._buffer = _RefusedStdinBuffer()

    @property
    def buffer(self) -> _RefusedStdinBuffer:
        return self._buffer

    @property
    def encoding(self) -> str:
        return "utf-8"

    @property
    def errors(self) -> str:
        return "strict"

    @property
    def name(self) -> str:
        return "<stdin>"

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return 0

    def isatty(self) -> bool:
        return False

    def read(self, size: int | None = -1) -> str:
        _refuse(_STDIN_MESSAGE.format("read"))

    def readline(self, size: int | None = -1) -> str:  # type: ignore[override]
        _refuse(_STDIN_MESSAGE.format("readline"))

    def readlines(self, hint: int | None = -1) -> list[str]:  # type: ignore[override]
        _refuse(_STDIN_MESSAGE.format("readlines"))

    def __next__(self) -> str:
        _refuse(_STDIN_MESSAGE.format("__next__"))


def refuse_stdin() -> None:
    """Point descriptor 0 at /dev/null and make `sys.stdin` (and
    `sys.__stdin__`) refuse every read with `CapabilityRefused`. A refused
    read also calls the tripwire's `on_violation` if a tripwire is installed
    when it happens. Refused even inside a broker section: there is no
    standard input left to read."""
    fd = os.open(os.devnull, os.O_RDONLY)
    if fd != 0:
        os.dup2(fd, 0)
        os.close(fd)
    _replaced_stdin.extend(s for s in (sys.stdin, sys.__stdin__) if s is not None)
    sys.stdin = sys.__stdin__ = _RefusedStdin()


# ---------------------------------------------------------------- environment


def scrub_environment(keep: Iterable[str]) -> None:
    """Remove every environment variable except those in `keep` and
    `ALWAYS_KEPT`, from `os.environ` and (through `unsetenv`) from the
    process environment C code and child processes see.

    The memory the process started with is not rewritten, so
    `/proc/self/environ` still shows the initial environment; the tripwire
    refuses reading it."""
    allowed = ALWAYS_KEPT.union(keep)
    for name in [name for name in os.environ if name not in allowed]:
        del os.environ[name]  # calls unsetenv


def take_secrets(names: Iterable[str]) -> dict[str, str]:
    """Read the variables `names` and remove them from the environment (as
    `scrub_environment` does), so that program code can never read them from
    `os.environ`, C's `getenv` or a child's environment. Returns the values of
    those that were set; a name that is not set is left out, and the caller
    decides whether that is an error."""
    secrets: dict[str, str] = {}
    for name in names:
        value = os.environ.pop(name, None)  # pop calls unsetenv
        if value is not None:
            secrets[name] = value
    return secrets
