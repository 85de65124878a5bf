"""staal.worker.confinement.confine: the confinement tripwire, standard input and the
scrubbed environment (DESIGN.md sections 4 and 9).

An audit hook cannot be removed, so every scenario runs in a fresh Python
process: the test writes a small script, runs it, and reads one JSON line of
results back. Effects the script must not have had are checked from outside
(a listener that saw no connection, a directory that did not change).
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from staal.program import CapabilityRefused, RunEnded

BOUND = 60.0  # seconds a scenario's process may take before the test fails

PRELUDE = """
import json, os, sys
from staal.program import CapabilityRefused
from staal.worker.confinement import confine
violations = []

def attempt(action):
    try:
        value = action()
    except CapabilityRefused as refused:
        return {"refused": refused.message, "kind": refused.kind}
    except BaseException as error:
        return {"error": f"{type(error).__name__}: {error}"}
    return {"ok": value if isinstance(value, (str, int, bool, type(None))) else repr(value)}

def report(**values):
    print(json.dumps(dict(values, violations=violations)), flush=True)
"""


def run_scenario(
    body: str,
    *args: object,
    tripwire: bool = True,
    allow_ffi: bool = False,
    stdin: bytes | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> dict[str, Any]:
    """Run PRELUDE, then (unless `tripwire` is false) install the tripwire
    with `violations.append` as its callback, then `body`; `args` become
    sys.argv[1:]. Returns the last line the script printed, parsed."""
    install = f"confine.install_tripwire({allow_ffi!r}, violations.append)\n" if tripwire else ""
    script = PRELUDE + install + textwrap.dedent(body)
    proc = subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        check=False,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        timeout=BOUND,
        env=env,
        cwd=cwd,
    )
    stderr = proc.stderr.decode(errors="replace")
    assert proc.returncode == 0, stderr
    lines = proc.stdout.decode().strip().splitlines()
    assert lines, stderr
    return json.loads(lines[-1])


def refused(outcome: dict[str, Any]) -> str:
    assert set(outcome) == {"refused", "kind"}, outcome
    assert outcome["kind"] == "capability"
    return outcome["refused"]


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        yield server
    finally:
        server.close()


def pending_connections(server: socket.socket) -> bool:
    """Whether a connection waits in the listener's backlog. The kernel
    completes a local connect before connect() returns, so once the scenario
    has exited, any connection it made is already there."""
    readable, _, _ = select.select([server], [], [], 0)
    return bool(readable)


# ---------------------------------------------------------------- network


def test_a_connect_to_a_listening_socket_is_refused_and_the_listener_sees_no_connection(
    listener,
):
    port = listener.getsockname()[1]
    result = run_scenario(
        """
        import socket
        port = int(sys.argv[1])
        report(
            connect=attempt(lambda: socket.socket().connect(("127.0.0.1", port))),
            connect_ex=attempt(lambda: socket.socket().connect_ex(("127.0.0.1", port))),
        )
        """,
        port,
    )
    message = refused(result["connect"])
    assert message.startswith("a tool may not open network connections (socket.connect to")
    assert str(port) in message
    assert message.endswith("the broker is the only way out")
    assert "socket.connect" in refused(result["connect_ex"])
    assert len(result["violations"]) == 2
    assert not pending_connections(listener)


def test_binding_a_socket_and_listening_are_refused():
    result = run_scenario(
        """
        import socket
        tcp, udp, unbound = socket.socket(), socket.socket(type=socket.SOCK_DGRAM), socket.socket()
        report(
            bind=attempt(lambda: tcp.bind(("127.0.0.1", 0))),
            bind_udp=attempt(lambda: udp.bind(("127.0.0.1", 0))),
            listen=attempt(lambda: unbound.listen()),
            ports=[s.getsockname()[1] for s in (tcp, udp, unbound)],
        )
        """
    )
    assert "a tool may not bind sockets or listen" in refused(result["bind"])
    assert "socket.bind" in refused(result["bind_udp"])
    assert refused(result["listen"]).startswith("a tool may not listen for connections")
    assert result["ports"] == [0, 0, 0]  # nothing got an address, so nothing listens
    assert len(result["violations"]) == 3


def test_sending_a_datagram_to_an_address_is_refused_and_nothing_arrives():
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.setblocking(False)
    try:
        port = receiver.getsockname()[1]
        result = run_scenario(
            """
            import socket
            address = ("127.0.0.1", int(sys.argv[1]))
            sender = socket.socket(type=socket.SOCK_DGRAM)
            report(
                sendto=attempt(lambda: sender.sendto(b"leak", address)),
                sendmsg=attempt(lambda: sender.sendmsg([b"leak"], [], 0, address)),
            )
            """,
            port,
        )
        assert "a tool may not send network datagrams (socket.sendto to" in refused(
            result["sendto"]
        )
        assert "socket.sendmsg" in refused(result["sendmsg"])
        with pytest.raises(BlockingIOError):
            receiver.recv(64)
    finally:
        receiver.close()


def test_host_name_look_ups_are_refused(listener):
    port = listener.getsockname()[1]
    result = run_scenario(
        """
        import socket
        port = int(sys.argv[1])
        report(
            getaddrinfo=attempt(lambda: socket.getaddrinfo("localhost", 80)),
            gethostbyname=attempt(lambda: socket.gethostbyname("localhost")),
            create_connection=attempt(lambda: socket.create_connection(("localhost", port))),
        )
        """,
        port,
    )
    assert refused(result["getaddrinfo"]).startswith(
        "a tool may not look up host names (socket.getaddrinfo of 'localhost')"
    )
    assert "socket.gethostbyname of 'localhost'" in refused(result["gethostbyname"])
    assert "look up host names" in refused(result["create_connection"])
    assert not pending_connections(listener)


# ---------------------------------------------------------------- processes

PROCESS_CASES = {
    "subprocess_run": ('subprocess.run(["/bin/sh", "-c", TOUCH])', "subprocess.Popen of '/bin/sh'"),
    "subprocess_shell": ("subprocess.run(TOUCH, shell=True)", "subprocess.Popen of '/bin/sh'"),
    "os_popen": ("os.popen(TOUCH).read()", "subprocess.Popen of '/bin/sh'"),
    "os_system": ("os.system(TOUCH)", "os.system of 'touch "),
    "os_execv": ('os.execv("/bin/sh", ["sh", "-c", TOUCH])', "os.exec of '/bin/sh'"),
    "posix_spawn": (
        'os.waitpid(os.posix_spawn("/bin/sh", ["sh", "-c", TOUCH], dict(os.environ)), 0)',
        "os.posix_spawn of '/bin/sh'",
    ),
    "posix_spawnp": (
        'os.waitpid(os.posix_spawnp("sh", ["sh", "-c", TOUCH], dict(os.environ)), 0)',
        "os.posix_spawn of 'sh'",
    ),
    "os_spawnv": ('os.spawnv(os.P_WAIT, "/bin/sh", ["sh", "-c", TOUCH])', "os.fork"),
    "os_fork": ("os.fork() or os._exit(0)", "os.fork"),
    "pty_spawn": ('pty.spawn(["/bin/sh", "-c", TOUCH])', "pty.spawn of '/bin/sh'"),
    "multiprocessing_fork": (
        'multiprocessing.get_context("fork").Process(target=os.getpid).start()',
        "os.fork",
    ),
    "multiprocessing_spawn": (
        'multiprocessing.get_context("spawn").Process(target=os.getpid).start()',
        "_posixsubprocess.fork_exec of ",
    ),
}


@pytest.mark.parametrize("case", sorted(PROCESS_CASES))
def test_starting_a_process_is_refused_and_the_process_never_runs(case, tmp_path):
    action, named = PROCESS_CASES[case]
    marker = tmp_path / "ran"
    result = run_scenario(
        f"""
        import multiprocessing, pty, subprocess
        TOUCH = "touch " + sys.argv[1]
        outcome = attempt(lambda: {action})
        report(outcome=outcome, children=len(multiprocessing.active_children()))
        """,
        marker,
        cwd=tmp_path,
    )
    message = refused(result["outcome"])
    assert message.startswith("a tool may not start processes (")
    assert named in message
    assert message.endswith("the broker is the only way out")
    assert result["violations"] == [message]
    assert result["children"] == 0
    assert not marker.exists()


# ---------------------------------------------------------------- files


def snapshot(root: Path) -> dict[str, tuple[object, ...]]:
    """Everything about a tree a write could change."""
    state: dict[str, tuple[object, ...]] = {}
    for path in sorted([root, *root.rglob("*")]):
        info = path.lstat()
        content = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        state[str(path.relative_to(root))] = (
            info.st_mode,
            info.st_size,
            info.st_mtime_ns,
            info.st_nlink,
            content,
        )
    return state


FILE_CASES = {
    "open_w_new": ('open(D / "new.txt", "w")', "write to files (open of", "new.txt"),
    "open_w_existing": ('open(D / "data.txt", "w")', "write to files (open of", "data.txt"),
    "open_a": ('open(D / "data.txt", "a")', "write to files (open of", "data.txt"),
    "open_r_plus": ('open(D / "data.txt", "r+")', "write to files (open of", "data.txt"),
    "open_x": ('open(D / "new.txt", "x")', "write to files (open of", "new.txt"),
    "open_descriptor": ("open(os.dup(1), 'w')", "write to files (open of descriptor", ""),
    "write_text": ('(D / "data.txt").write_text("changed")', "write to files", "data.txt"),
    "os_open_create": (
        'os.open(D / "new.txt", os.O_WRONLY | os.O_CREAT)',
        "write to files",
        "new.txt",
    ),
    "os_open_truncate": (
        'os.open(D / "data.txt", os.O_RDONLY | os.O_TRUNC)',
        "write to files",
        "data.txt",
    ),
    "remove": ('os.remove(D / "data.txt")', "change files (os.remove of", "data.txt"),
    "unlink": ('os.unlink(D / "data.txt")', "change files (os.remove of", "data.txt"),
    "rename": ('os.rename(D / "data.txt", D / "new.txt")', "change files (os.rename of", "new.txt"),
    "replace": ('os.replace(D / "data.txt", D / "new.txt")', "change files (os.rename", "data.txt"),
    "mkdir": ('os.mkdir(D / "newdir")', "change files (os.mkdir of", "newdir"),
    "makedirs": ('os.makedirs(D / "a" / "b")', "change files (os.mkdir of", "a"),
    "rmdir": ('os.rmdir(D / "empty")', "change files (os.rmdir of", "empty"),
    "truncate": ('os.truncate(D / "data.txt", 0)', "change files (os.truncate of", "data.txt"),
    "chmod": ('os.chmod(D / "data.txt", 0o777)', "change files (os.chmod of", "data.txt"),
    "utime": ('os.utime(D / "data.txt", (0, 0))', "change files (os.utime of", "data.txt"),
    "symlink": ('os.symlink(D / "data.txt", D / "link")', "change files (os.symlink of", "link"),
    "link": ('os.link(D / "data.txt", D / "hard")', "change files (os.link of", "hard"),
    "copyfile": (
        'shutil.copyfile(D / "data.txt", D / "copy.txt")',
        "change files (shutil.copyfile of",
        "copy.txt",
    ),
    "move": ('shutil.move(D / "data.txt", D / "moved.txt")', "change files (shutil.move", "moved"),
    "rmtree": ('shutil.rmtree(D / "sub")', "change files (shutil.rmtree of", "sub"),
    "mkstemp": ("tempfile.mkstemp(dir=D)", "write to files (open of", "tmp"),
    "mkdtemp": ("tempfile.mkdtemp(dir=D)", "change files (os.mkdir of", "tmp"),
    "temporary_file": ("tempfile.TemporaryFile(dir=D)", "write to files", ""),
    "sqlite_file": (
        'sqlite3.connect(D / "db.sqlite")',
        "open databases directly (sqlite3.connect",
        "db.sqlite",
    ),
}


@pytest.mark.parametrize("case", sorted(FILE_CASES))
def test_changing_the_file_system_is_refused_and_leaves_it_unchanged(case, tmp_path):
    action, category, named = FILE_CASES[case]
    root = tmp_path / "tree"
    (root / "sub").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "data.txt").write_text("original")
    (root / "sub" / "inner.txt").write_text("inner")
    before = snapshot(root)
    result = run_scenario(
        f"""
        import shutil, sqlite3, tempfile
        from pathlib import Path
        D = Path(sys.argv[1])
        report(outcome=attempt(lambda: {action}))
        """,
        root,
        cwd=tmp_path,
    )
    message = refused(result["outcome"])
    assert message.startswith(f"a tool may not {category}")
    assert named in message
    assert result["violations"] == [message]
    assert snapshot(root) == before


def test_reading_files_and_importing_modules_still_work_and_write_no_bytecode(tmp_path):
    package = tmp_path / "lib"
    package.mkdir()
    (package / "helper_module.py").write_text("VALUE = 41 + 1\n")
    (tmp_path / "data.txt").write_text("some data")
    result = run_scenario(
        """
        from pathlib import Path
        root = Path(sys.argv[1])
        sys.path.insert(0, str(root / "lib"))
        import helper_module, wave
        report(
            value=helper_module.VALUE,
            data=(root / "data.txt").read_text(),
            status=attempt(lambda: open("/proc/self/status").read().startswith("Name:")),
            stdlib=wave.__name__,
            dont_write_bytecode=sys.dont_write_bytecode,
        )
        """,
        tmp_path,
    )
    assert result["value"] == 42
    assert result["data"] == "some data"
    assert result["status"] == {"ok": True}
    assert result["stdlib"] == "wave"
    assert result["dont_write_bytecode"] is True
    assert result["violations"] == []
    assert not (package / "__pycache__").exists()


# ---------------------------------------------------------------- native code


def test_loading_a_c_library_is_refused_unless_ffi_is_allowed():
    body = """
    import ctypes  # importing ctypes alone is fine
    report(
        cdll=attempt(lambda: ctypes.CDLL("libc.so.6").getpid() == os.getpid()),
        own_image=attempt(lambda: ctypes.CDLL(None).system),
        pythonapi=attempt(lambda: ctypes.pythonapi.Py_IsInitialized()),
    )
    """
    without = run_scenario(body, allow_ffi=False)
    message = refused(without["cdll"])
    assert message == (
        "a tool may not load native code (ctypes.dlopen of 'libc.so.6') "
        "unless its manifest grants ffi.c"
    )
    assert "ctypes.dlsym of 'system'" in refused(without["own_image"])
    assert "ctypes.dlsym of 'Py_IsInitialized'" in refused(without["pythonapi"])
    assert len(without["violations"]) == 3

    granted = run_scenario(body, allow_ffi=True)
    assert granted["cdll"] == {"ok": True}
    assert granted["pythonapi"] == {"ok": 1}
    assert granted["violations"] == []


# ---------------------------------------------------------------- environments of processes


def test_reading_a_process_environment_through_proc_is_refused():
    result = run_scenario(
        """
        from pathlib import Path
        def relative():
            here = os.getcwd()
            os.chdir("/proc/self")
            try:
                return open("environ", "rb").read()
            finally:
                os.chdir(here)
        def through_a_directory_descriptor():
            proc = os.open("/proc/self", os.O_RDONLY)
            return os.read(os.open("environ", os.O_RDONLY, dir_fd=proc), 100)
        report(
            self_=attempt(lambda: open("/proc/self/environ", "rb").read()),
            pid=attempt(lambda: open(f"/proc/{os.getpid()}/environ", "rb").read()),
            parent=attempt(lambda: Path(f"/proc/{os.getppid()}/environ").read_bytes()),
            thread=attempt(lambda: open("/proc/thread-self/environ", "rb").read()),
            relative=attempt(relative),
            dir_fd=attempt(through_a_directory_descriptor),
        )
        """
    )
    for key in ("self_", "pid", "parent", "thread", "relative", "dir_fd"):
        message = refused(result[key])
        assert message.startswith("a tool may not read a process's environment (open of "), key
    assert "'/proc/self/environ'" in refused(result["self_"])
    assert len(result["violations"]) == 6


def test_opening_a_process_memory_through_proc_is_refused_before_anything_is_read():
    result = run_scenario(
        """
        from pathlib import Path
        read = []
        def peek(path, dir_fd=None):
            # Read 16 bytes of the first mapping: what a scan would begin with.
            start = int(open("/proc/self/maps").readline().split("-")[0], 16)
            fd = os.open(path, os.O_RDONLY, dir_fd=dir_fd)
            read.append(len(os.pread(fd, 16, start)))
        def relative():
            here = os.getcwd()
            os.chdir("/proc/self")
            try:
                with open("mem", "rb") as memory:
                    read.append(len(memory.read(1)))
            finally:
                os.chdir(here)
        task = f"/proc/self/task/{os.getpid()}/mem"
        report(
            self_=attempt(lambda: peek("/proc/self/mem")),
            pid=attempt(lambda: peek(f"/proc/{os.getpid()}/mem")),
            parent=attempt(lambda: Path(f"/proc/{os.getppid()}/mem").open("rb")),
            thread=attempt(lambda: peek("/proc/thread-self/mem")),
            task=attempt(lambda: peek(task)),
            relative=attempt(relative),
            dir_fd=attempt(lambda: peek("mem", dir_fd=os.open("/proc/self", os.O_RDONLY))),
            maps=attempt(lambda: len(open("/proc/self/maps").read()) > 0),
            read=read,
        )
        """
    )
    for key in ("self_", "pid", "parent", "thread", "task", "relative", "dir_fd"):
        message = refused(result[key])
        assert message.startswith("a tool may not read a process's memory (open of "), key
    assert "'/proc/self/mem'" in refused(result["self_"])
    assert result["read"] == []  # every refusal came before the open
    assert result["maps"] == {"ok": True}  # what is mapped where is no secret
    assert len(result["violations"]) == 7


# ---------------------------------------------------------------- refusals and the callback


def test_a_refusal_the_program_catches_is_still_reported_to_on_violation(tmp_path):
    assert issubclass(CapabilityRefused, RunEnded)
    assert not issubclass(CapabilityRefused, Exception)
    result = run_scenario(
        """
        from pathlib import Path
        caught = []
        try:
            open(Path(sys.argv[1]) / "out.txt", "w")
        except Exception:
            caught.append("exception")  # never: a refusal is not an Exception
        except BaseException as error:
            caught.append(type(error).__name__)
        report(caught=caught)
        """,
        tmp_path,
    )
    assert result["caught"] == ["CapabilityRefused"]
    assert len(result["violations"]) == 1
    assert "out.txt" in result["violations"][0]
    assert not (tmp_path / "out.txt").exists()


def test_on_violation_runs_inside_a_broker_section_so_it_may_write(tmp_path):
    result = run_scenario(
        """
        from pathlib import Path
        log = Path(sys.argv[1]) / "violations.log"
        def on_violation(message):
            with open(log, "a") as out:  # would be refused outside a section
                out.write(message + "\\n")
        confine.install_tripwire(False, on_violation)
        report(outcome=attempt(lambda: os.mkdir(Path(sys.argv[1]) / "new")))
        """,
        tmp_path,
        tripwire=False,
    )
    message = refused(result["outcome"])
    assert (tmp_path / "violations.log").read_text() == message + "\n"
    assert not (tmp_path / "new").exists()


def test_installing_the_tripwire_a_second_time_is_an_error():
    result = run_scenario(
        "report(again=attempt(lambda: confine.install_tripwire(True, print)))",
    )
    assert result["again"] == {
        "error": "RuntimeError: the confinement tripwire is already installed in this process"
    }


# ---------------------------------------------------------------- broker sections


def test_a_broker_section_allows_everything_but_only_in_its_own_thread(listener, tmp_path):
    port = listener.getsockname()[1]
    result = run_scenario(
        """
        import ctypes, socket, threading
        from pathlib import Path
        port, root = int(sys.argv[1]), Path(sys.argv[2])
        inside, other_thread = {}, {}
        def from_another_thread():
            other_thread["write"] = attempt(lambda: (root / "thread.txt").write_text("x"))
        with confine.broker_section():
            inside["in_section"] = confine.in_broker_section()
            connection = socket.create_connection(("127.0.0.1", port), timeout=30)
            inside["connect"] = attempt(lambda: connection.sendall(b"hello"))
            inside["write"] = attempt(lambda: (root / "journal.txt").write_text("entry"))
            inside["ctypes"] = attempt(lambda: ctypes.CDLL("libc.so.6").getpid() == os.getpid())
            worker = threading.Thread(target=from_another_thread)
            worker.start()
            worker.join(30)
        after = attempt(lambda: (root / "after.txt").write_text("x"))
        report(inside=inside, other_thread=other_thread, after=after,
               in_section=confine.in_broker_section())
        """,
        port,
        tmp_path,
    )
    assert result["inside"] == {
        "in_section": True,
        "connect": {"ok": None},
        "write": {"ok": 5},
        "ctypes": {"ok": True},
    }
    assert (tmp_path / "journal.txt").read_text() == "entry"
    connection, _ = listener.accept()
    with connection:
        connection.settimeout(BOUND)
        received = b""
        while chunk := connection.recv(64):  # the scenario has exited: ends at EOF
            received += chunk
    assert received == b"hello"
    assert "thread.txt" in refused(result["other_thread"]["write"])
    assert "after.txt" in refused(result["after"])
    assert result["in_section"] is False
    assert len(result["violations"]) == 2
    assert not (tmp_path / "thread.txt").exists()
    assert not (tmp_path / "after.txt").exists()


# ---------------------------------------------------------------- standard input


@pytest.mark.parametrize("tripwire", [True, False], ids=["with_tripwire", "without_tripwire"])
def test_reading_standard_input_is_refused_and_descriptor_0_is_dev_null(tripwire):
    result = run_scenario(
        """
        confine.refuse_stdin()
        reads = {
            "read": attempt(lambda: sys.stdin.read()),
            "readline": attempt(lambda: sys.stdin.readline()),
            "iterate": attempt(lambda: next(iter(sys.stdin))),
            "input": attempt(lambda: input()),
            "buffer": attempt(lambda: sys.stdin.buffer.read()),
            "original": attempt(lambda: sys.__stdin__.read()),
        }
        report(
            reads=reads,
            fd0=os.readlink("/proc/self/fd/0"),
            raw=os.read(0, 100).decode(),
            fileno=sys.stdin.fileno(),
        )
        """,
        tripwire=tripwire,
        stdin=b"a line the tool must never see\n",
    )
    for name, outcome in result["reads"].items():
        assert refused(outcome).startswith("a tool may not read standard input ("), name
    assert result["fd0"] == "/dev/null"
    assert result["raw"] == ""
    assert result["fileno"] == 0
    reported = result["violations"]
    assert len(reported) == (6 if tripwire else 0)


# ---------------------------------------------------------------- the environment

ENVIRONMENT_SCENARIO = """
import ctypes, subprocess
secrets = confine.take_secrets(["STRIPE_KEY", "NOT_SET"])
confine.scrub_environment(["ALLOWED_VAR"])
libc = ctypes.CDLL(None)
libc.getenv.restype = ctypes.c_char_p
child = subprocess.run(
    [sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"],
    capture_output=True, text=True, check=True,
)
confine.install_tripwire(False, violations.append)
report(
    secrets=secrets,
    environ=dict(os.environ),
    c_getenv={name: (libc.getenv(name.encode()) or b"").decode() or None
              for name in ("STRIPE_KEY", "OTHER_VAR", "ALLOWED_VAR", "PATH")},
    child=json.loads(child.stdout),
)
"""


def test_take_secrets_and_scrub_environment_leave_only_what_is_allowed():
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "STRIPE_KEY": "sk_test_not_for_program_code",
        "OTHER_VAR": "other",
        "ALLOWED_VAR": "allowed",
        "HOME": "/nonexistent",
        "STAAL_KILL_AT": "before-action",
        "STAAL_TEST_KILL_POINTS": "1",
    }
    result = run_scenario(ENVIRONMENT_SCENARIO, tripwire=False, env=env)
    assert result["secrets"] == {"STRIPE_KEY": "sk_test_not_for_program_code"}
    allowed = {
        "PATH": env["PATH"],
        "ALLOWED_VAR": "allowed",
        "STAAL_KILL_AT": "before-action",
        "STAAL_TEST_KILL_POINTS": "1",
    }
    assert result["environ"] == allowed
    assert result["c_getenv"] == {
        "STRIPE_KEY": None,
        "OTHER_VAR": None,
        "ALLOWED_VAR": "allowed",
        "PATH": env["PATH"],
    }
    # A child started from here sees what C sees (Python may add its own
    # locale variable at start-up, as for any process).
    child = {k: v for k, v in result["child"].items() if k != "LC_CTYPE"}
    assert child == allowed
    assert result["violations"] == []
