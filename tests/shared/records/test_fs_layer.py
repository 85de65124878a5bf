"""staal.records.fsio's file-system layer: every change to the journal directory
goes through it, and its recorder writes down each one in order."""

from __future__ import annotations

import ast
import base64
import json
import os
from pathlib import Path

from staal.records.fsio import FS, OsSync, RecordingFileSystem

ROOT = Path(__file__).resolve().parents[3]
SCANNED = ("shared", "supervisor", "worker")
# Calls that change a file or a directory entry.
OS_CALLS = {"write", "pwrite", "fsync", "fdatasync", "rename", "replace", "unlink", "remove",
            "rmdir", "mkdir", "makedirs", "ftruncate", "truncate", "open", "link", "symlink"}
PATH_CALLS = {"unlink", "write_bytes", "write_text", "rename", "mkdir", "touch", "rmdir",
              "symlink_to", "hardlink_to"}
# The only ones allowed outside the layer, each on something that is not
# in the journal directory.
ALLOWED = {
    ("shared/runtime/killpoints.py", "os.open"): "a crash test's kill-once marker, beside the journals",
    ("supervisor/transport/stdio.py", "os.open"): "/dev/null for standard input",
    ("worker/confinement/inherited.py", "os.open"): "/dev/null for standard input",
    ("worker/processes/serve.py", "os.open"): "/dev/null for the warm-up journal",
    ("worker/processes/verifier.py", "os.open"): "/dev/null for the verifier's standard output and error",
    ("worker/processes/zygote.py", "os.write"): "the report and wake-up pipes",
    ("supervisor/transport/stdio.py", "write_all"): "standard output",
    ("supervisor/telemetry/log.py", "write_all"): "standard error",
    ("worker/commands/cli.py", "write_all"): "standard output",
}


def file_changes(path: Path) -> list[tuple[int, str]]:
    """Each call in `path` that could change a file: (line, what)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute):
            if isinstance(func.value, ast.Name) and func.value.id == "os":
                if func.attr in OS_CALLS:
                    found.append((node.lineno, f"os.{func.attr}"))
            elif func.attr in PATH_CALLS and not (
                    isinstance(func.value, ast.Name) and func.value.id == "FS"):
                found.append((node.lineno, f".{func.attr}"))
        elif isinstance(func, ast.Name) and func.id == "write_all":
            found.append((node.lineno, "write_all"))
        elif isinstance(func, ast.Name) and func.id == "open" and _opens_for_writing(node):
            found.append((node.lineno, "open"))
    return found


def _opens_for_writing(node: ast.Call) -> bool:
    mode = node.args[1] if len(node.args) > 1 else next(
        (k.value for k in node.keywords if k.arg == "mode"), None)
    if mode is None:
        return False
    return not isinstance(mode, ast.Constant) or bool(set(str(mode.value)) & set("wax+"))


def test_no_file_is_changed_outside_the_file_system_layer() -> None:
    strays = []
    for directory in SCANNED:
        for path in sorted((ROOT / directory).glob("*.py")):
            name = str(path.relative_to(ROOT))
            if name == "shared/records/fsio.py":
                continue
            strays += [f"{name}:{line}: {what}" for line, what in file_changes(path)
                       if (name, what) not in ALLOWED]
    assert not strays, ("these change files without going through staal.records.fsio.FS, so a "
                        "power-loss test cannot see them: " + ", ".join(strays))


def test_the_scan_finds_a_direct_change(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import os\nos.unlink('x')\nopen('y', 'ab')\nopen('z', 'rb')\n"
                      "p.write_bytes(b'')\nFS.unlink('w')\n")
    assert file_changes(sample) == [(2, "os.unlink"), (3, "open"), (5, ".write_bytes")]


def test_the_layer_is_the_plain_os_calls_unless_a_recording_is_named() -> None:
    assert "STAAL_TEST_FS_RECORD" not in os.environ
    assert type(FS) is OsSync


def read_recording(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_recorder_does_each_operation_and_writes_it_down_in_order(tmp_path: Path) -> None:
    recording = tmp_path / "recording.jsonl"
    fs = RecordingFileSystem(str(recording))
    folder = tmp_path / "journals"
    fs.mkdir(folder)
    fd = fs.open(folder / "a.tmp", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND)
    fs.write(fd, b"one\n")
    fs.write(fd, b"two\n")
    fs.sync_file(fd)
    fs.truncate(fd, 4)
    os.close(fd)
    fs.replace(folder / "a.tmp", folder / "a")
    fs.sync_dir(folder)
    fs.unlink(folder / "a")

    assert not (folder / "a").exists() and folder.is_dir()
    ops = read_recording(recording)
    assert [op["op"] for op in ops] == ["mkdir", "open", "write", "write", "fsync", "truncate",
                                        "rename", "dirsync", "unlink"]
    assert {op["pid"] for op in ops} == {os.getpid()}
    opened, first, second = ops[1], ops[2], ops[3]
    assert opened["created"] and opened["append"] and opened["path"] == str(folder / "a.tmp")
    assert (first["offset"], base64.b64decode(first["data"])) == (0, b"one\n")
    assert (second["offset"], base64.b64decode(second["data"])) == (4, b"two\n")
    assert ops[4]["path"] == str(folder / "a.tmp") and ops[5]["size"] == 4
    assert (ops[6]["source"], ops[6]["path"]) == (str(folder / "a.tmp"), str(folder / "a"))


def test_the_recorder_writes_at_the_offset_asked_and_knows_a_file_it_did_not_create(
        tmp_path: Path) -> None:
    target = tmp_path / "lock"
    target.write_bytes(b"12345\n")
    recording = tmp_path / "recording.jsonl"
    fs = RecordingFileSystem(str(recording))
    fd = fs.open(target, os.O_RDWR | os.O_CREAT)
    fs.write(fd, b"9\n", 0)
    os.close(fd)
    assert target.read_bytes() == b"9\n345\n"
    opened, wrote = read_recording(recording)
    assert not opened["created"] and not opened["append"]
    assert wrote["offset"] == 0
