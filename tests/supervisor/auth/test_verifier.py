"""The operator's verifier (auth.credential presence "provider"; issue 14,
item 3), driven directly: `ProviderAuthenticator` with its real verifier
process over real ZeroMQ, no server around it. Every wait is bounded."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from staal.manifest.check import load_manifest
from staal.protocol.http.messages import Head
from staal.records.messages import Verify
from staal.supervisor.auth.principal import AuthRefusal, Principal
from staal.supervisor.auth.verdict import VERIFIER_ISSUER
from staal.supervisor.auth.verifier import ProviderAuthenticator, VerifierRefused
from staal.supervisor.telemetry.log import StderrLog
from staal.verifier import VerifierRequest
from tests.helpers.servers import WAIT, Site
from tests.helpers.verifiers import new_key, verifier_site

KEY = new_key()


def head(key: str | None = None, mode: str | None = None, **more: str) -> Head:
    pairs = [("content-type", "application/json"), *more.items()]
    pairs += [("X-Api-Key", key)] if key is not None else []
    pairs += [("x-verifier-mode", mode)] if mode is not None else []
    return Head.of("POST", "/mcp", pairs)


class Logged:
    """The server's real Log, writing to a file the test reads back."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.log = StderrLog(fd=self.fd)

    def events(self, event: str) -> list[dict[str, Any]]:
        lines = self.path.read_text().splitlines()
        return [r for r in map(orjson.loads, lines) if r["event"] == event]


def with_authenticator(site: Site, scenario: Callable[[ProviderAuthenticator], Awaitable[Any]],
                       logged: Logged | None = None) -> Any:
    manifest = load_manifest(site.manifest)
    logged = logged or Logged(site.root / "log.jsonl")

    async def run() -> Any:
        authenticator = ProviderAuthenticator(manifest, logged.log)
        await asyncio.wait_for(authenticator.start(), WAIT * 2)
        try:
            return await asyncio.wait_for(scenario(authenticator), WAIT * 2)
        finally:
            await authenticator.close()

    try:
        return asyncio.run(run())
    finally:
        os.close(logged.fd)


def test_the_verifier_admits_its_key_refuses_any_other_and_sees_only_the_named_headers(tmp_path):
    site = verifier_site(Site(tmp_path), KEY)
    logged = Logged(tmp_path / "log.jsonl")

    async def scenario(auth: ProviderAuthenticator) -> list:
        return [await auth.authenticate(head(KEY, cookie="sid=1", authorization="Bearer other")),
                await auth.authenticate(head("sk-vrf-wrong-0123456789")),
                await auth.authenticate(head())]

    admitted, wrong, none = with_authenticator(site, scenario, logged)
    assert admitted == Principal(VERIFIER_ISSUER, "ops-team", "cli", frozenset({"tools"}))
    assert wrong == AuthRefusal(401, "invalid_token", "unknown API key [redacted]")
    assert none == AuthRefusal(401, None, "no API key")
    # What the verifier was shown: the method, the path and the two named headers,
    # not the content type, the cookie or the Authorization it was not told to read.
    saw = [e["text"] for e in logged.events("verifier_print")]
    assert saw[0] == "saw POST /mcp x-api-key headers,method,path"
    assert saw[2] == "saw POST /mcp  headers,method,path"
    assert KEY not in logged.path.read_text()


def test_a_verify_message_carries_no_body_and_a_verifier_request_shows_no_credential():
    assert [f.name for f in dataclasses.fields(Verify)] == ["id", "method", "path", "headers"]
    assert [f.name for f in dataclasses.fields(VerifierRequest)] == ["method", "path", "headers"]
    request = VerifierRequest("POST", "/mcp", {"x-api-key": (KEY,)})
    assert request.header("X-API-KEY") == KEY
    assert KEY not in repr(request) and KEY not in repr(Verify(id=1, method="POST", path="/mcp",
                                                              headers={"x-api-key": (KEY,)}))


def test_requests_in_flight_together_each_get_their_own_answer(tmp_path):
    site = verifier_site(Site(tmp_path), KEY)

    async def scenario(auth: ProviderAuthenticator) -> list:
        keys = [KEY if n % 3 == 0 else f"sk-vrf-other-{n:04d}" for n in range(30)]
        return list(zip(keys, await asyncio.gather(*(auth.authenticate(head(k)) for k in keys)),
                        strict=True))

    for key, verdict in with_authenticator(site, scenario):
        assert isinstance(verdict, Principal) == (key == KEY), (key, verdict)


def test_a_raise_garbage_or_a_refused_action_refuses_with_503_and_the_next_request_is_served(tmp_path):
    site = verifier_site(Site(tmp_path), KEY)
    logged = Logged(tmp_path / "log.jsonl")

    async def scenario(auth: ProviderAuthenticator) -> list:
        pid = auth.current.process.pid
        verdicts = [await auth.authenticate(head(KEY, mode)) for mode in
                    ("mode-raise", "mode-garbage", "mode-object", "mode-environ", "mode-hog", None)]
        return [*verdicts, auth.current.process.pid == pid]

    *failed, served, same = with_authenticator(site, scenario, logged)
    assert [(v.status, v.error) for v in failed] == [(503, "temporarily_unavailable")] * 5
    assert isinstance(served, Principal)
    assert same  # an answer that failed is the verifier's, not its process's: it carries on
    messages = [(e["kind"], e["message"]) for e in logged.events("verifier_failed")]
    assert messages == [
        ("value", "the verifier raised ValueError: cannot check [redacted]"),
        ("value", "the verifier returned a principal whose subject is not a non-empty string "
                  "of at most 1024 characters"),
        ("value", "the verifier returned a value of type 'object', which is not JSON"),
        ("capability", "a tool may not read a process's environment (open of '/proc/self/environ'); "
                       "secrets reach a tool only through its capabilities"),
        ("budget", "the verifier ran out of its 256 MiB of memory"),
    ]
    assert KEY not in logged.path.read_text()


def test_a_hung_or_killed_verifier_refuses_with_503_is_replaced_and_the_next_request_is_served(
        tmp_path):
    site = verifier_site(Site(tmp_path), KEY, timeout_ms=1000)
    logged = Logged(tmp_path / "log.jsonl")
    gate = tmp_path / "gate"
    os.mkfifo(gate)

    async def killed_while_verifying(auth: ProviderAuthenticator) -> AuthRefusal | Principal:
        pending = asyncio.ensure_future(auth.authenticate(head(KEY, f"mode-gate:{gate}")))
        # Opening the FIFO for writing returns once the verifier opened it to read.
        writer = await asyncio.wait_for(asyncio.to_thread(os.open, gate, os.O_WRONLY), WAIT)
        try:
            os.kill(auth.current.process.pid, 9)
            return await pending
        finally:
            os.close(writer)

    async def scenario(auth: ProviderAuthenticator) -> list:
        pids = [auth.current.process.pid]
        hung = await auth.authenticate(head(KEY, "mode-hang"))
        after_hang = await auth.authenticate(head(KEY))
        pids.append(auth.current.process.pid)
        killed = await killed_while_verifying(auth)
        after_kill = await auth.authenticate(head(KEY))
        pids.append(auth.current.process.pid)
        return [hung, after_hang, killed, after_kill, pids]

    hung, after_hang, killed, after_kill, pids = with_authenticator(site, scenario, logged)
    assert (hung.status, killed.status) == (503, 503)
    assert isinstance(after_hang, Principal) and isinstance(after_kill, Principal)
    assert len(set(pids)) == 3  # each time a new process
    assert [e["why"] for e in logged.events("verifier_killed")] == ["it did not answer within 1000 ms"]
    assert [e["how"] for e in logged.events("verifier_exited")] == ["was killed by SIGKILL"] * 2
    assert [(e["kind"], e["message"]) for e in logged.events("verifier_failed")] == [
        ("deadline", "the verifier did not answer within 1000 ms"),
        ("internal", "the verifier process was killed by SIGKILL"),
    ]


def test_past_64_requests_in_flight_a_request_is_refused_at_once_never_queued(tmp_path):
    site = verifier_site(Site(tmp_path), KEY)
    logged = Logged(tmp_path / "log.jsonl")
    gate = tmp_path / "gate"
    os.mkfifo(gate)

    async def scenario(auth: ProviderAuthenticator) -> tuple:
        held = asyncio.ensure_future(auth.authenticate(head(KEY, f"mode-gate:{gate}")))
        writer = await asyncio.wait_for(asyncio.to_thread(os.open, gate, os.O_WRONLY), WAIT)
        # Tasks run in the order they were made, each counting itself in flight
        # before it first waits: 63 more fill the bound, the 64th finds it full.
        queued = [asyncio.ensure_future(auth.authenticate(head(KEY))) for _ in range(63)]
        over = await asyncio.ensure_future(auth.authenticate(head(KEY)))
        os.close(writer)  # the held one is answered, then the rest in turn
        return over, await held, await asyncio.gather(*queued)

    over, held, queued = with_authenticator(site, scenario, logged)
    assert over.status == 503
    assert isinstance(held, Principal) and all(isinstance(v, Principal) for v in queued)
    (failed,) = logged.events("verifier_failed")
    assert failed["message"] == "64 requests are already waiting for the verifier"


PROBLEMS = [
    ("def verify(request)\n    return {}\n", "auth.credential.program: {program}: line 1: expected ':'"),
    ("raise RuntimeError('no keys file')\n",
     "auth.credential.program: {program}: importing it failed: RuntimeError: no keys file"),
    ("def check(request):\n    return {}\n", "auth.credential.entry: {program} has no function 'verify'"),
    ("def verify():\n    return {}\n",
     "auth.credential.entry: 'verify' must take one parameter, the request"),
    ("import socket\nsocket.create_connection(('127.0.0.1', 9))\n",
     "auth.credential.program: {program}: importing it failed: CapabilityRefused"),
]


@pytest.mark.parametrize("source, problem", PROBLEMS)
def test_a_verifier_program_that_does_not_load_refuses_the_start_naming_its_key(tmp_path, source, problem):
    site = verifier_site(Site(tmp_path), KEY, source=source)

    async def nothing(auth: ProviderAuthenticator) -> None:
        raise AssertionError("the verifier started")

    with pytest.raises(VerifierRefused) as refused:
        with_authenticator(site, nothing)
    assert refused.value.message.startswith(problem.format(program=tmp_path / "verify.py"))
