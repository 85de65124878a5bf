"""A verifier program for the tests (auth.credential presence "provider")
and sites that serve with it: it admits one distinctive API key, known to
it only by its SHA-256 (so the key is written in no file), and does what
the header `x-verifier-mode` asks: raise, return garbage, hang, wait on a
FIFO, print the key, or look past the tripwire for other processes'
environments and memory."""

from __future__ import annotations

import hashlib
import json
import secrets
from typing import Any

from tests.helpers.servers import Site

VERIFIER = '''
import hashlib
import json
import os
import time

from staal.verifier import Refusal

GOOD = "{good}"


def verify(request):
    mode = request.header("x-verifier-mode") or ""
    key = request.header("x-api-key")
    print("saw", request.method, request.path, ",".join(sorted(request.headers)),
          ",".join(sorted(f for f in request.__slots__)))
    if mode == "mode-raise":
        raise ValueError(f"cannot check {{key}}")
    if mode == "mode-garbage":
        return {{"subject": 5}}
    if mode == "mode-object":
        return object()
    if mode == "mode-hang":
        time.sleep(3600)
    if mode.startswith("mode-gate:"):
        with open(mode.removeprefix("mode-gate:"), "rb") as gate:
            gate.read()
    if mode == "mode-hog":
        hog = bytearray(1024 * 1024 * 1024)  # past the verifier's memory bound
    if mode == "mode-print":
        print("the key is", key)
    if mode == "mode-environ":
        with open("/proc/self/environ", "rb") as own:
            own.read()
    if mode.startswith("mode-peek:"):
        return Refusal(json.dumps(peek([int(p) for p in mode.removeprefix("mode-peek:").split(",")])))
    if key is None:
        return Refusal("no API key")
    if hashlib.sha256(key.encode()).hexdigest() == GOOD:
        return {{"subject": "ops-team", "client_id": "cli", "scopes": ["tools"]}}
    return Refusal(f"unknown API key {{key}}")


def peek(pids):
    """Past the tripwire on purpose (it is not a sandbox): what of a tool's
    secret this process can reach: its environment, its own first
    environment block, and other processes' environments and memory."""
    from staal.worker.confinement import confine
    seen = {{"environ": sorted(name for name in os.environ if "SECRET" in name)}}
    with confine.broker_section():
        with open("/proc/self/environ", "rb") as own:
            seen["own"] = sorted(entry.split(b"=")[0].decode() for entry in own.read().split(b"\\0")
                                 if b"SECRET" in entry)
        for pid in pids:
            for what in ("environ", "mem"):
                try:
                    with open(f"/proc/{{pid}}/{{what}}", "rb") as other:
                        held = b"SECRET" in other.read()
                    seen[f"{{pid}}/{{what}}"] = "read: a secret" if held else "read: no secret"
                except OSError as refused:
                    seen[f"{{pid}}/{{what}}"] = type(refused).__name__
    return seen
'''

ECHO = """
def main(text: str) -> dict:
    return {"echo": text}
"""

HEADERS = ["X-Api-Key", "X-Verifier-Mode"]


def new_key() -> str:
    """A distinctive credential: grepped for everywhere afterwards."""
    return "sk-vrf-" + secrets.token_hex(12)


def verifier_site(site: Site, good_key: str, tools: list[dict[str, Any]] | None = None,
                  source: str | None = None, **credential: Any) -> Site:
    """`site` serving `echo` (and `tools`) behind the test verifier."""
    good = hashlib.sha256(good_key.encode()).hexdigest()
    site.program("echo.py", ECHO)
    site.program("verify.py", source if source is not None else VERIFIER.format(good=good))
    site.write([{"name": "echo", "program": "echo.py"}, *(tools or [])])
    data = json.loads(site.manifest.read_text())
    data["auth"] = {"credential": {"presence": "provider", "program": "verify.py",
                                   "headers": HEADERS, "timeout_ms": 10_000, **credential}}
    site.manifest.write_text(json.dumps(data, indent=2))
    return site
