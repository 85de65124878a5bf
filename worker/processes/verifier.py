"""The verifier process (`auth.credential.presence` "provider"; issue 14,
item 3): one long-lived, confined process that runs the operator's verifier
program for every HTTP request, so operator code never runs in the
supervisor (supervisor/auth/verifier.py starts, bounds and replaces it).

It is confined as a worker is, and holds less: started with an environment
that holds no secret (the zygote's: PATH, PYTHONPATH), its environment
scrubbed, standard input refused, the tripwire installed with no grant (no
network, no processes, no file writes, no native code, no other process's
environment or memory), not dumpable, its memory bounded, and killed with
its parent. A verifier has no capabilities: it may read files (a list of
key hashes, say) and compute. Requests arrive over a ZeroMQ DEALER, one at
a time: operator code need not be thread-safe, and a check of a head is
local work that a second thread would not speed up on the GIL. What a
verify prints is sent back with its answer (the supervisor logs it with the
credential values cut out); descriptors 1 and 2 point at /dev/null once the
program is loaded, so nothing reaches the server's log any other way.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import os
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType

import orjson
import zmq

from staal.manifest.check import load_manifest
from staal.manifest.model import CredentialConfig
from staal.records.messages import Verified, VerifierReady, Verify, pack, unpack
from staal.records.outcomes import Failure
from staal.runtime.private_memory import keep_memory_private
from staal.verifier import Refusal, VerifierRequest
from staal.worker.confinement import confine
from staal.worker.confinement.limits import memory_limit
from staal.worker.processes.zygote import die_with_parent, ignore_stop_signals
from staal.worker.runs.program import load_module

VERIFIER_MEMORY_MIB = 256
MAX_PRINTED = 16 * 1024  # characters kept of what one verify prints
LOAD_FAILED = 3

Entry = Callable[[VerifierRequest], object]  # whatever the operator's code returns
_violations: list[str] = []


def load_verifier(credential: CredentialConfig) -> tuple[Entry | None, tuple[str, ...]]:
    """The entry function, or the problems that stop the server's start,
    each naming its manifest key."""
    path = credential.program
    assert path is not None  # presence "provider" has a program (manifest_auth)
    where = "auth.credential"
    try:
        module = load_module(path)
    except SyntaxError as exc:
        return None, (f"{where}.program: {path}: line {exc.lineno}: {exc.msg}",)
    except BaseException as exc:  # noqa: BLE001 - the operator's import-time code failed
        return None, (f"{where}.program: {path}: importing it failed: {type(exc).__name__}: {exc}",)
    entry = getattr(module, credential.entry, None)
    if entry is None or not callable(entry):
        return None, (f"{where}.entry: {path} has no function '{credential.entry}'",)
    try:
        inspect.signature(entry).bind(None)
    except TypeError:
        return None, (f"{where}.entry: '{credential.entry}' must take one parameter, the request",)
    except ValueError:
        pass  # a callable without a signature (a builtin): its call will say
    return entry, ()


class _Printed(io.StringIO):
    """What one verify writes to sys.stdout or sys.stderr, bounded."""

    def write(self, text: str) -> int:
        room = MAX_PRINTED - self.tell()
        if room > 0:
            super().write(text[:room])
        return len(text)

    def lines(self) -> tuple[str, ...]:
        return tuple(line for line in self.getvalue().splitlines() if line.strip())


def answer(entry: Entry, message: Verify) -> Verified:
    """Run the verifier on one head; its return value as data."""
    request = VerifierRequest(message.method, message.path, MappingProxyType(dict(message.headers)))
    printed = _Printed()
    _violations.clear()
    failure: Failure | None = None
    returned: object = None
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            returned = entry(request)
    except MemoryError:
        failure = Failure("budget", f"the verifier ran out of its {VERIFIER_MEMORY_MIB} MiB of memory")
    except BaseException as exc:  # noqa: BLE001 - the operator's code failed: an answer, as data
        failure = Failure("value", f"the verifier raised {type(exc).__name__}: {exc}")
    if _violations:  # refused by the tripwire, even if the verifier caught it
        failure = Failure("capability", _violations[0])
    if failure is not None:
        return Verified(id=message.id, failure=failure, printed=printed.lines())
    return shaped(message.id, returned, printed.lines())


def shaped(id_: int, returned: object, printed: tuple[str, ...]) -> Verified:
    """A `Refusal` as its fields; anything else that is JSON as it is, for
    the supervisor to judge (supervisor/auth/verdict.py)."""
    if isinstance(returned, Refusal):
        return Verified(id=id_, refusal={"status": returned.status, "description": returned.description},
                        printed=printed)
    if returned is None:
        return Verified(id=id_, failure=Failure("value", "the verifier returned None, not a dict "
                                                "of the principal or a Refusal"), printed=printed)
    try:
        orjson.dumps(returned)
    except TypeError:
        return Verified(id=id_, failure=Failure("value", f"the verifier returned a value of type "
                                                f"'{type(returned).__name__}', which is not JSON"),
                        printed=printed)
    return Verified(id=id_, principal=returned, printed=printed)


def quiet_descriptors() -> None:
    """Descriptors 1 and 2 to /dev/null: only what `answer` captures leaves."""
    with confine.broker_section():
        null = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(null, fd)
    os.close(null)


def serve(socket: zmq.Socket[bytes], entry: Entry) -> None:
    while True:
        message = unpack(socket.recv())
        if isinstance(message, Verify):
            socket.send(pack(answer(entry, message)))


def main(argv: list[str] | None = None) -> int:
    ignore_stop_signals()  # the supervisor's: it kills this process when it closes
    parser = argparse.ArgumentParser(prog="staal-verifier")
    parser.add_argument("--manifest", required=True, type=Path)
    parser.add_argument("--endpoint", required=True)
    args = parser.parse_args(argv)
    die_with_parent()
    keep_memory_private()  # it holds each request's credential while it judges it
    auth = load_manifest(args.manifest).auth
    assert auth is not None and auth.credential.presence == "provider"
    confine.scrub_environment(())
    confine.refuse_stdin()
    context = zmq.Context()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.IDENTITY, f"v{os.getpid()}".encode())
    socket.setsockopt(zmq.LINGER, 2_000)
    socket.connect(args.endpoint)
    confine.install_tripwire(allow_ffi=False, on_violation=_violations.append)
    entry, problems = load_verifier(auth.credential)
    if entry is None:
        socket.send(pack(VerifierReady(pid=os.getpid(), problems=problems)))
        socket.close()  # lingers until the message is out
        context.term()
        return LOAD_FAILED
    memory_limit(VERIFIER_MEMORY_MIB)
    quiet_descriptors()
    socket.send(pack(VerifierReady(pid=os.getpid())))
    serve(socket, entry)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
