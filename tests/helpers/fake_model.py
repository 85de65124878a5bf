"""A local fake of the Anthropic Messages API, run as its own process.

    python tests/helpers/fake_model.py --port 0 --key KEY

prints the port it listens on (127.0.0.1) as its first line, then serves
until killed. `POST /v1/messages` answers like Anthropic's API: it checks
`x-api-key` (401 `authentication_error`) and `anthropic-version` (400
`invalid_request_error`), checks the body's `model`, `max_tokens` and
`messages`, and answers a message object whose one text block is
`echo: <the prompt>` (cut to `max_tokens` words, then with `stop_reason`
`max_tokens`), with usage counted in words. Errors have Anthropic's shape:
`{"type": "error", "error": {"type", "message"}, "request_id"}`, and every
answer carries a `request-id` header.

Control endpoints script what comes next and show what came in:

- `POST /_control/script` `{"steps": [...]}` queues steps; each request to
  `/v1/messages` takes the next one, and with none left is answered
  normally. A step is one of
  `{"status": 529, "retry_after": "0", "type": ..., "message": ...}` (an
  error; type and message default to Anthropic's for the status),
  `{"hang": true, "seconds": 60}` (never answer, then close),
  `{"close": true}` (drop the connection without an answer),
  `{"drip": 0.2}` (a 200 whose body comes one byte every 0.2 s), or
  `{"content": [...blocks], "stop_reason": ...}` (a normal answer with these
  content blocks, after the usual checks).
- `POST /_control/release` lets every hanging request go (closed unanswered).
- `POST /_control/reset` forgets steps, requests and drips and releases hangs.
- `GET /_control/requests?at_least=N&timeout=S` lists every `/v1/` request
  received (headers lowercased, JSON body parsed, `at` = the fake's
  monotonic clock in seconds), first waiting up to S seconds (at most 30)
  until there are at least N.
- `GET /_control/drips?at_least=N&timeout=S` lists how each drip ended
  (`sent` bytes of `of`, `ended` one of "complete", "released", "hung_up"
  when the client closed its connection first), waiting the same way.

The second half of this module is the test side: `FakeModel` starts the
process on a free port (waiting a bounded time for its port line) and talks
to its control endpoints; `running_fake_model(key)` is the fixture helper
that kills it when the test is done.
"""

from __future__ import annotations

import argparse
import collections
import http.client
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

VERSIONS = ("2023-06-01", "2023-01-01")
ERROR_TYPES = {
    400: ("invalid_request_error", "There was an issue with the format or content of your request."),
    401: ("authentication_error", "invalid x-api-key"),
    403: ("permission_error", "Your API key does not have permission to use the specified resource."),
    404: ("not_found_error", "The requested resource could not be found."),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "Number of requests has exceeded your rate limit."),
    500: ("api_error", "Internal server error"),
    529: ("overloaded_error", "Overloaded"),
}
HANG_S = 60.0
MAX_WAIT_S = 30.0


# ---------------------------------------------------------------- the server


class State:
    def __init__(self, key: str) -> None:
        self.key = key
        self.lock = threading.Lock()
        self.arrived = threading.Condition(self.lock)
        self.requests: list[dict[str, Any]] = []
        self.drips: list[dict[str, Any]] = []
        self.steps: collections.deque[dict[str, Any]] = collections.deque()
        self.release = threading.Event()


def _handler(state: State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "fake-anthropic/1"

        def setup(self) -> None:
            super().setup()
            # Headers and body are two writes; without this a delayed ACK
            # adds 40 ms to an answer on a kept-alive connection.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, *args: Any) -> None:
            pass

        # -- plumbing ----------------------------------------------------

        def _body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def _error(self, status: int, request_id: str, kind: str | None = None,
                   message: str | None = None, retry_after: str | None = None) -> None:
            default_kind, default_message = ERROR_TYPES.get(status, ("api_error", "Internal server error"))
            headers = {"request-id": request_id}
            if retry_after is not None:
                headers["retry-after"] = str(retry_after)
            self._send(status, {
                "type": "error",
                "error": {"type": kind or default_kind, "message": message or default_message},
                "request_id": request_id,
            }, headers)

        def _drop(self) -> None:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

        # -- the API -----------------------------------------------------

        def do_POST(self) -> None:
            path = urlsplit(self.path).path
            if path.startswith("/_control/"):
                self._control_post(path)
                return
            raw = self._body()
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", errors="replace")
            with state.lock:
                n = len(state.requests) + 1
                state.requests.append({
                    "n": n, "at": time.monotonic(), "method": "POST", "path": self.path,
                    "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body,
                })
                state.arrived.notify_all()
                step = state.steps.popleft() if state.steps else {}
                release = state.release
            request_id = f"req_fake_{n:06d}"
            if path != "/v1/messages":
                self._error(404, request_id, message=f"Not found: {path}")
            elif step.get("hang"):
                release.wait(float(step.get("seconds", HANG_S)))
                self._drop()
            elif step.get("close"):
                self._drop()
            elif "drip" in step:
                self._drip(float(step["drip"]), release)
            elif "status" in step:
                self._error(int(step["status"]), request_id, step.get("type"), step.get("message"),
                            step.get("retry_after"))
            else:
                self._answer(raw, body, request_id, step)

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            if parts.path in ("/_control/requests", "/_control/drips"):
                name = parts.path.rsplit("/", 1)[1]
                query = parse_qs(parts.query)
                at_least = int(query.get("at_least", ["0"])[0])
                timeout = min(float(query.get("timeout", ["0"])[0]), MAX_WAIT_S)
                with state.lock:
                    listed: list[dict[str, Any]] = getattr(state, name)
                    state.arrived.wait_for(lambda: len(listed) >= at_least, timeout)
                    copied = list(listed)
                self._send(200, {name: copied})
                return
            self._error(404, "req_fake_get", message=f"Not found: {parts.path}")

        def _drip(self, every: float, release: threading.Event) -> None:
            """Headers at once, then the body one byte every `every` seconds;
            how it ended is kept for /_control/drips."""
            data = json.dumps({"type": "message", "content": [{"type": "text", "text": "x" * 200}]})
            sent, ended = 0, "complete"
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.flush()
                for byte in data.encode():
                    if release.wait(every):
                        ended = "released"
                        break
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    sent += 1
            except (BrokenPipeError, ConnectionResetError):
                ended = "hung_up"
            self._drop()
            with state.lock:
                state.drips.append({"sent": sent, "of": len(data), "ended": ended})
                state.arrived.notify_all()

        def _control_post(self, path: str) -> None:
            raw = self._body()
            data = json.loads(raw) if raw else {}
            with state.lock:
                if path == "/_control/script":
                    state.steps.extend(data.get("steps", []))
                    answer: dict[str, Any] = {"queued": len(state.steps)}
                elif path in ("/_control/release", "/_control/reset"):
                    state.release.set()
                    state.release = threading.Event()
                    if path == "/_control/reset":
                        state.steps.clear()
                        state.requests.clear()
                        state.drips.clear()
                    answer = {}
                else:
                    self._error(404, "req_fake_control", message=f"Not found: {path}")
                    return
            self._send(200, answer)

        def _answer(self, raw: bytes, body: Any, request_id: str, step: dict[str, Any]) -> None:
            if self.headers.get("x-api-key") != state.key:
                self._error(401, request_id)
                return
            version = self.headers.get("anthropic-version")
            if version is None:
                self._error(400, request_id, message="anthropic-version: header is required")
                return
            if version not in VERSIONS:
                self._error(400, request_id, message=f"anthropic-version: unknown version {version!r}")
                return
            problem = _problem(body)
            if problem is not None:
                self._error(400, request_id, message=problem)
                return
            prompt = _prompt(body["messages"])
            words = ("echo: " + prompt).split(" ")
            max_tokens = body["max_tokens"]
            stop_reason = "end_turn"
            if len(words) > max_tokens:
                words, stop_reason = words[:max_tokens], "max_tokens"
            text = " ".join(words)
            content = step.get("content", [{"type": "text", "text": text}])
            self._send(200, {
                "id": f"msg_fake_{request_id[-6:]}",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": content,
                "stop_reason": step.get("stop_reason", stop_reason),
                "stop_sequence": None,
                "usage": {"input_tokens": len(prompt.split()), "output_tokens": len(text.split())},
            }, {"request-id": request_id})

    return Handler


def _problem(body: Any) -> str | None:
    """What Anthropic's API would refuse in a Messages request body."""
    if not isinstance(body, dict):
        return "There was an issue with the format of your request: the body is not a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required"
    tokens = body.get("max_tokens")
    if isinstance(tokens, bool) or not isinstance(tokens, int):
        return "max_tokens: Field required"
    if tokens < 1:
        return "max_tokens: Input should be greater than or equal to 1"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        if not isinstance(message.get("content"), (str, list)):
            return f"messages.{i}.content: Field required"
    if messages[0]["role"] != "user":
        return "messages: first message must use the \"user\" role"
    return None


def _prompt(messages: list[dict[str, Any]]) -> str:
    content = messages[-1]["content"]
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")


def serve(port: int, key: str, host: str = "127.0.0.1") -> None:
    state = State(key)
    server = ThreadingHTTPServer((host, port), _handler(state))
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    finally:
        state.release.set()
        server.server_close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A local fake of Anthropic's Messages API.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--key", required=True, help="the x-api-key it accepts")
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    serve(args.port, args.key, args.host)


# ---------------------------------------------------------------- the test side

START_WAIT_S = 10.0
CONTROL_WAIT_S = 10.0


class FakeModel:
    """The fake running as its own process, and its control endpoints."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, wait: float = START_WAIT_S) -> FakeModel:
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--port", "0", "--key", self.key],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        line, deadline = b"", time.monotonic() + wait
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(left, 0))
            if not ready:
                self.stop()
                raise TimeoutError(f"the fake model printed no port within {wait} s")
            chunk = os.read(fd, 64)
            if not chunk:
                self.stop()
                raise RuntimeError("the fake model exited before printing its port")
            line += chunk
        self.port = int(line.split(b"\n", 1)[0])
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.kill()
        self.proc.wait(timeout=START_WAIT_S)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.proc = None

    def _call(self, method: str, path: str, body: Any = None, timeout: float = CONTROL_WAIT_S) -> Any:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = None if body is None else json.dumps(body).encode()
            headers = {} if data is None else {"Content-Type": "application/json"}
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            payload = json.loads(response.read())
            assert response.status == 200, payload
            return payload
        finally:
            conn.close()

    def script(self, *steps: dict[str, Any]) -> None:
        """Queue what the next requests to /v1/messages get, in order."""
        self._call("POST", "/_control/script", {"steps": list(steps)})

    def release(self) -> None:
        self._call("POST", "/_control/release", {})

    def reset(self) -> None:
        self._call("POST", "/_control/reset", {})

    def requests(self, at_least: int = 0, wait: float = CONTROL_WAIT_S) -> list[dict[str, Any]]:
        """Every request received, once there are `at_least` (or `wait` passed)."""
        path = f"/_control/requests?at_least={at_least}&timeout={wait}"
        return self._call("GET", path, timeout=wait + CONTROL_WAIT_S)["requests"]

    def drips(self, at_least: int = 0, wait: float = CONTROL_WAIT_S) -> list[dict[str, Any]]:
        """How each drip ended, once `at_least` have (or `wait` passed)."""
        path = f"/_control/drips?at_least={at_least}&timeout={wait}"
        return self._call("GET", path, timeout=wait + CONTROL_WAIT_S)["drips"]


@contextmanager
def running_fake_model(key: str) -> Iterator[FakeModel]:
    fake = FakeModel(key).start()
    try:
        yield fake
    finally:
        fake.stop()


if __name__ == "__main__":
    main()
