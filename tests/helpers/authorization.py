"""A real OAuth 2 authorization server for the tests: oauth2-mock-server
(tests/js/authorization_server.mjs) on Node 22, issuing RS256 access tokens
by client credentials, authorization code + PKCE and refresh (the RFC 8707
`resource` as `aud`, dynamic registration at /register), and the staal
server in front of it (`serve --http` with an `auth` section naming it as
the issuer)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import queue
import secrets
import subprocess
import threading
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from tests.clients.test_client_typescript import node, require_node_modules
from tests.helpers.servers import WAIT

SCRIPT = Path(__file__).resolve().parents[1] / "js" / "authorization_server.mjs"
AUDIENCE = "https://staal.test/mcp"


class AuthorizationServer:
    """The authorization server process; its first line says its issuer."""

    def __init__(self, token_ttl: int | None = None) -> None:
        """`token_ttl`: every access token's lifetime in seconds (else an hour)."""
        require_node_modules()
        ttl = [] if token_ttl is None else ["--token-ttl", str(token_ttl)]
        self.process = subprocess.Popen(
            [node(), str(SCRIPT), *ttl], cwd=SCRIPT.parent, stdin=subprocess.PIPE,
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

    def authorized(self, client: str, scope: str, resource: str,
                   redirect_uri: str = "http://127.0.0.1/callback") -> dict[str, Any]:
        """The token response of an authorization code + PKCE flow for
        `client` (its person consenting at once: the 302 read, not followed)."""
        verifier = secrets.token_urlsafe(48)
        challenge = _b64(hashlib.sha256(verifier.encode()).digest())
        query = {"response_type": "code", "client_id": client, "redirect_uri": redirect_uri,
                 "scope": scope, "resource": resource, "state": "s",
                 "code_challenge": challenge, "code_challenge_method": "S256"}
        redirect = self.client.get(f"{self.issuer}/authorize", params=query)
        assert redirect.status_code == 302, redirect.text
        code = parse_qs(urlsplit(redirect.headers["location"]).query)["code"][0]
        answer = self.client.post(f"{self.issuer}/token", data={
            "grant_type": "authorization_code", "code": code, "client_id": client,
            "redirect_uri": redirect_uri, "code_verifier": verifier, "resource": resource})
        answer.raise_for_status()
        return answer.json()

    def issued(self) -> list[dict[str, Any]]:
        """Every access token issued so far: grant_type, client_id, scope, aud."""
        return self._command({"issued": True})["issued"]

    def expire_next(self, client: str, grant_type: str, by: int) -> None:
        """The next access token `grant_type` gives `client` is one that
        expired `by` seconds ago (its `exp` and its `expires_in`)."""
        self._command({"expire": {"client_id": client, "grant_type": grant_type, "by": by}})

    def register(self, **metadata: Any) -> dict[str, Any]:
        """The RFC 7591 registration of a client with `metadata`: its id and secret."""
        answer = self.client.post(f"{self.issuer}/register", json=metadata)
        assert answer.status_code == 201, answer.text
        return answer.json()

    def _command(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        return self.next_line()

    def rotate(self) -> str:
        """A new signing key (the old stays in the JWKS); its kid."""
        self.kid = self._command({"rotate": True})["kid"]
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
