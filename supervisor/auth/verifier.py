"""The provider Authenticator (`auth.credential.presence` "provider";
seed 002, "A provider that does not use bearer tokens"; issue 14, item 3):
every request's head goes to the operator's verifier program, which runs
in its own long-lived, confined process (worker/processes/verifier.py), never here.

The process is started with the HTTP server (supervisor/auth/guard.py's
`authenticator_for` makes it; the server starts and closes it as a
`Lifecycle`), from an environment that holds no secret (the zygote's), and
reached over a ZeroMQ ROUTER in a 0700 runtime directory of its own. A
program that does not load stops the start, naming its manifest key. Its
lifecycle is the zygote's: both are long-lived children restarted by
`Restarting` (supervisor/workers/restarting.py): new, up, replacing after a
death (with `Backoff`: none, then 0.5 s doubling to 5 s), booting, failed
(the first never came up), closed.

Each request is bounded: it waits at most WAIT_S for a verifier that is up,
then `auth.credential.timeout_ms` for its answer. Requests are pipelined
(several in flight on the channel, MAX_IN_FLIGHT at most; past it, refused
at once, never queued) and answered one at a time by the process. A
verifier that raises, returns what is not a principal or a refusal, does
what a verifier may not, or whose process dies refuses the request with 503
(supervisor/auth/verdict.py says why 503); one that does not answer in time is
killed, and so replaced. Nothing is logged of a request but what failed,
with its credential values cut out.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import zmq
import zmq.asyncio

from staal.errors import StaalError
from staal.manifest.model import CredentialConfig, Manifest
from staal.protocol.http.credentials import credential_values, only_credentials
from staal.protocol.http.messages import Head
from staal.records.messages import Verified, VerifierReady, Verify, pack, unpack
from staal.records.outcomes import Failure
from staal.runtime.backoff import Backoff
from staal.runtime.redaction import redact
from staal.supervisor.auth.principal import AuthRefusal, Principal
from staal.supervisor.auth.verdict import judge, unavailable
from staal.supervisor.errors import SupervisorError
from staal.supervisor.telemetry.log import Log
from staal.supervisor.workers.exits import describe_exit, wait_status
from staal.supervisor.workers.restarting import ChildState, Restarting
from staal.supervisor.workers.zygote import runtime_dir, stop_signals_blocked, worker_environment

START_WAIT_S = 60.0  # the first process's start, on a loaded machine
WAIT_S = 10.0        # a request's wait for a verifier that is up (a replacement starting)
MAX_IN_FLIGHT = 64
# How long a process that exited before it was ready is given for its word
# to arrive: sent before its exit, it is in flight on the socket already.
LAST_WORD_S = 5.0

__all__ = ["ProviderAuthenticator", "VerifierRefused"]


class VerifierRefused(SupervisorError):
    """The verifier program did not load: the server does not start."""

    kind = "verifier"


class VerifierLost(SupervisorError):
    kind = "verifier_lost"


@dataclass(eq=False)
class VerifierProcess:
    process: subprocess.Popen[bytes]
    pidfd: int
    pending: dict[int, asyncio.Future[Verified]] = field(default_factory=dict)
    ready: asyncio.Future[tuple[str, ...]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    # What its ready message said, whenever it came: a program that does not
    # load is reported and the process exits, and its exit may be seen
    # before the message that says why is read.
    said: asyncio.Event = field(default_factory=asyncio.Event)
    problems: tuple[str, ...] = ()
    how: str = ""
    # Killed by the authenticator and not yet reaped: no request goes to it.
    killed: bool = False

    @property
    def identity(self) -> bytes:
        return f"v{self.process.pid}".encode()


class ProviderAuthenticator:
    """An `Authenticator` (supervisor/auth/principal.py) backed by the verifier process."""

    def __init__(self, manifest: Manifest, log: Log) -> None:
        assert manifest.auth is not None and manifest.auth.credential.presence == "provider"
        self.manifest_path = manifest.path
        self.credential: CredentialConfig = manifest.auth.credential
        # The zygote's environment: no secret in it.
        self.env = worker_environment(manifest)
        self.log = log
        self.life = Restarting(start=self._respawn, lost=self._unstartable, moved=self._moved,
                               backoff=Backoff(first=0.5, cap=5.0, quiet=60.0))
        # Made by `start` (in the server's event loop): its own 0700 runtime directory.
        self.directory: Path | None = None
        self.endpoint = ""
        self.context: zmq.asyncio.Context | None = None
        self.router: zmq.asyncio.Socket | None = None
        self.current: VerifierProcess | None = None
        self.up = asyncio.Event()
        self.ids = itertools.count(1)
        self.in_flight = 0
        self.receiving: asyncio.Task[None] | None = None

    # -- the process's life -------------------------------------------------

    def _moved(self, state: ChildState) -> None:
        if state is ChildState.UP:
            self.up.set()
        else:
            self.up.clear()

    async def start(self) -> None:
        """Start the verifier and wait until it has loaded its program;
        `VerifierRefused` naming the manifest key if it could not."""
        self.directory = runtime_dir()
        self.endpoint = f"ipc://{self.directory / 'verifier'}"
        self.context = zmq.asyncio.Context()
        self.router = self.context.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.router.bind(self.endpoint)
        self.receiving = asyncio.ensure_future(self._receive(self.router))
        proc = self._spawn()
        try:
            problems = await asyncio.wait_for(asyncio.shield(proc.ready), START_WAIT_S)
        except TimeoutError:
            self._kill(proc, f"was not ready within {START_WAIT_S:.0f} s")
            problems = (f"auth.credential.program: {self.credential.program}: the verifier "
                        f"was not ready within {START_WAIT_S:.0f} s",)
        except VerifierLost as lost:
            problems = await self._last_word(proc) or (
                f"auth.credential.program: {self.credential.program}: the verifier "
                f"process {lost.message} before it was ready",)
        if problems:
            await self.close()
            raise VerifierRefused("; ".join(problems))
        self.log("verifier_started", pid=proc.process.pid, program=str(self.credential.program))

    async def _last_word(self, proc: VerifierProcess) -> tuple[str, ...]:
        """The problems a process that exited before it was ready said it
        had, if its word is still on its way (sent before it exited, so it
        arrives at once, or never: a crash)."""
        try:
            await asyncio.wait_for(proc.said.wait(), LAST_WORD_S)
        except TimeoutError:
            return ()
        return proc.problems

    def _spawn(self) -> VerifierProcess:
        # The stop signals are the supervisor's: it ignores them from its
        # first instant (as the zygote does) and is killed by `close`.
        with stop_signals_blocked():
            process = subprocess.Popen(
                [sys.executable, "-m", "staal.worker.processes.verifier", "--manifest",
                 str(self.manifest_path), "--endpoint", self.endpoint],
                stdin=subprocess.DEVNULL, stdout=sys.stderr.fileno(), env=self.env, close_fds=True,
                process_group=0,  # its own group, so one that hangs is killed whole
            )
        proc = VerifierProcess(process, os.pidfd_open(process.pid))
        asyncio.get_running_loop().add_reader(proc.pidfd, self._exited, proc)
        self.current = proc
        return proc

    def _respawn(self) -> None:
        proc = self._spawn()
        self.log("verifier_replacing", pid=proc.process.pid)

    def _unstartable(self, how: str) -> None:
        self.log("verifier_exited", level="error", how=how)
        self.life.died()

    def _exited(self, proc: VerifierProcess) -> None:
        """Its pidfd is readable: the process ended. Whoever waits on it is
        told, and unless the server is closing it is replaced."""
        asyncio.get_running_loop().remove_reader(proc.pidfd)
        os.close(proc.pidfd)
        proc.how = describe_exit(wait_status(proc.process.wait()))
        lost = VerifierLost(proc.how)
        for waiter in proc.pending.values():
            if not waiter.done():
                waiter.set_exception(lost)
        proc.pending.clear()
        if not proc.ready.done():
            proc.ready.set_exception(lost)
            proc.ready.exception()  # retrieved here: only the first start awaits it
        proc.exited.set()
        if proc is not self.current:
            return
        if self.life.died() is not None:
            self.log("verifier_exited", level="error", pid=proc.process.pid, how=proc.how)

    def _kill(self, proc: VerifierProcess, why: str) -> None:
        self.log("verifier_killed", level="error", pid=proc.process.pid, why=why)
        proc.killed = True
        if proc is self.current:
            self.up.clear()  # until its replacement is up: its exit moves the state
        _kill_group(proc)

    async def close(self) -> None:
        """Stop the verifier with the server, once no request waits on it:
        killed (it ignores SIGTERM, which is the supervisor's; it holds
        nothing that must outlive it: each answer was sent whole)."""
        self.life.close()
        self.up.set()  # whoever still waits for a verifier wakes to learn there is none
        proc = self.current
        if proc is not None and not proc.exited.is_set():
            _kill_group(proc)
            await proc.exited.wait()
        if self.receiving is not None:
            self.receiving.cancel()
        if self.router is not None and self.context is not None:
            self.router.close()
            self.context.term()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)

    # -- what arrives -------------------------------------------------------

    async def _receive(self, router: zmq.asyncio.Socket) -> None:
        while True:
            identity, frame = await router.recv_multipart()
            proc = self.current
            if proc is None or identity != proc.identity:
                continue  # a replaced process's late word
            try:
                message = unpack(frame)
            except StaalError as exc:
                self.log("bad_verifier_message", level="error", error=exc.message)
                continue
            if isinstance(message, VerifierReady):
                self._ready(proc, message)
            elif isinstance(message, Verified):
                waiter = proc.pending.pop(message.id, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(message)

    def _ready(self, proc: VerifierProcess, message: VerifierReady) -> None:
        proc.problems = message.problems
        proc.said.set()
        if not proc.ready.done():
            proc.ready.set_result(message.problems)
        if message.problems:
            if self.life.state is not ChildState.NEW:  # a replacement's program no longer loads
                self.log("verifier_refused", level="error", problems=list(message.problems))
            return  # it exits, and its exit moves the state
        if self.life.move("up") is ChildState.UP and self.life.backoff.strikes:
            self.log("verifier_ready", pid=proc.process.pid)

    # -- a request ----------------------------------------------------------

    async def authenticate(self, head: Head) -> Principal | AuthRefusal:
        names = self.credential.headers
        credentials = credential_values(head, names)
        if self.in_flight >= MAX_IN_FLIGHT:
            answer: Verified | Failure = Failure(
                "internal", f"{MAX_IN_FLIGHT} requests are already waiting for the verifier")
        else:
            self.in_flight += 1
            try:
                answer = await self._verify(head, names)
            finally:
                self.in_flight -= 1
        verdict: Principal | AuthRefusal | Failure
        if isinstance(answer, Verified):
            for line in answer.printed:
                self.log("verifier_print", text=redact(line, credentials))
            verdict = judge(answer, credentials)
        else:
            verdict = answer
        if isinstance(verdict, Failure):
            self.log("verifier_failed", level="error", kind=verdict.kind,
                     message=redact(verdict.message, credentials))
            return unavailable()
        return verdict

    async def _verify(self, head: Head, names: tuple[str, ...]) -> Verified | Failure:
        try:
            await asyncio.wait_for(self._serving(), WAIT_S)
        except TimeoutError:
            return Failure("internal", f"no verifier was ready within {WAIT_S:.0f} s")
        except VerifierLost as lost:
            return Failure("internal", lost.message)
        proc = self.current
        assert proc is not None and self.router is not None  # _serving: it is up
        number = next(self.ids)
        waiter: asyncio.Future[Verified] = asyncio.get_running_loop().create_future()
        proc.pending[number] = waiter
        message = Verify(id=number, method=head.method, path=head.path,
                         headers=only_credentials(head, names))
        await self.router.send_multipart([proc.identity, pack(message)])
        timeout = self.credential.timeout_ms
        try:
            return await asyncio.wait_for(waiter, timeout / 1000)
        except TimeoutError:
            proc.pending.pop(number, None)
            self._kill(proc, f"it did not answer within {timeout} ms")
            return Failure("deadline", f"the verifier did not answer within {timeout} ms")
        except VerifierLost as lost:
            return Failure("internal", f"the verifier process {lost.message}")

    async def _serving(self) -> None:
        while self.life.state is not ChildState.UP or self.current is None or self.current.killed:
            if self.life.state in (ChildState.FAILED, ChildState.CLOSED):
                raise VerifierLost("is not running: the server is closing")
            await self.up.wait()


def _kill_group(proc: VerifierProcess) -> None:
    try:
        os.killpg(proc.process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # already gone: its pidfd says so
