"""A process's first environment block, which `/proc/<pid>/environ` shows
to other processes of its user even when it is not dumpable, is forgotten
by the supervisor at start; its variables stay where code reads them."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers.verifiers import new_key

CHILD = """
import ctypes, json, os, subprocess
from staal.runtime.private_memory import forget_first_environment

libc = ctypes.CDLL(None)
libc.getenv.restype = ctypes.c_char_p
forgot = forget_first_environment()
with open("/proc/self/environ", "rb") as block:
    shown = block.read()
print(json.dumps({
    "forgot": forgot,
    "shown": os.environ["MARK_SECRET"].encode() in shown,
    "os_environ": os.environ["MARK_SECRET"],
    "getenv": libc.getenv(b"MARK_SECRET").decode(),
    "child": subprocess.run(["sh", "-c", "printf %s \\"$MARK_SECRET\\""], capture_output=True,
                            text=True, check=True).stdout,
}))
"""


def test_the_first_environment_block_is_zeroed_and_every_variable_still_read_by_code():
    value = "mark-" + new_key()
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60,
                          check=True, env={"MARK_SECRET": value, "PATH": "/usr/bin:/bin"})
    assert json.loads(done.stdout) == {"forgot": True, "shown": False, "os_environ": value,
                                       "getenv": value, "child": value}
