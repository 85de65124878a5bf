"""`ffi.c`: a granted C library, and the refusal without the grant."""

from __future__ import annotations

import json

from tests.helpers.runs import Workspace

PRINTF = """
from staal.caps import Ffi

def main(libc: Ffi) -> dict:
    written = libc.printf(b"hello from C\\n")
    return {"written": written}
"""


def test_a_granted_library_is_called_and_what_it_prints_never_reaches_stdout(tmp_path):
    ws = Workspace(tmp_path)
    ws.program(PRINTF)
    ws.config(grants={"libc": {"cap": "ffi.c", "library": "libc.so.6"}})
    done = ws.run()
    assert done.code == 0, done.stderr
    assert done.stdout.count("\n") == 1
    assert json.loads(done.stdout)["result"] == {"written": 13}
    assert "hello from C" in done.stderr


def test_without_the_grant_loading_a_library_is_refused(tmp_path):
    ws = Workspace(tmp_path)
    ws.program("""
import ctypes

def main() -> dict:
    ctypes.CDLL("libc.so.6").printf(b"must not print\\n")
    return {}
""")
    ws.config()
    done = ws.run()
    assert done.code == 1
    assert done.outcome["failure"]["kind"] == "capability"
    # The C function never ran: no line it printed (the traceback on stderr
    # quotes the program's source line, which holds the text).
    printed = [line.strip() for line in (done.stderr + done.stdout).splitlines()]
    assert "must not print" not in printed and "must not print" not in done.stdout


def test_a_library_that_cannot_be_loaded_is_a_capability_failure(tmp_path):
    ws = Workspace(tmp_path)
    ws.program(PRINTF)
    ws.config(grants={"libc": {"cap": "ffi.c", "library": "libstaal-no-such-library.so.9"}})
    done = ws.run()
    assert done.outcome["failure"]["kind"] == "capability"
    assert "libstaal-no-such-library.so.9" in done.outcome["failure"]["message"]
