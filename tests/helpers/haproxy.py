"""HAProxy in front of staal instances, as the deployment tests run it:
Debian's package (installed by the test run itself when it is missing,
`tests/helpers/apt.py`), a config generated per balancer, in the foreground.

- HTTP mode, round robin, no stickiness: every request may go to any
  instance, which staal's Streamable HTTP allows (it mints no session).
- Health checks: `GET /ready` on each instance every `CHECK_MS` (no
  credential: the instances have `auth`, and the check answers without
  one); an instance that does not answer 200 within the check's timeout
  twice in a row (SIGKILLed or draining: refused; SIGSTOPped: no answer;
  fenced or its store out of reach: 503) leaves the rotation, and one good
  answer brings it back.
- Streaming: `option http-no-delay` and no compression, so an event-stream
  answer's progress events pass as they are written; the server timeout is
  longer than staal's 15 s keep-alive comments.
- Proof of where each request went: the response header `x-staal-instance`
  names the instance that served it, and every request is logged to the
  balancer's stderr as `served <instance> <status>` (by one thread: with
  several, HAProxy drops a line that collides with another thread's, and
  `wait_served` would wait for it in vain); server state changes
  (`Server staal/i1 is DOWN`) are logged there too, so a test waits for them
  as events, with a bound.

The front socket is bound and listening before HAProxy starts (it gets the
descriptor, `bind fd@N`): its port is known in advance, so the instances'
manifests can name the balancer's URL as their `public_url` (the `Host`
clients send is the balancer's), and the kernel queues connections until
HAProxy accepts them, so there is no start-up race to wait out.
"""

from __future__ import annotations

import fcntl
import re
import signal
import socket
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.apt import ensure, exists
from tests.helpers.servers import WAIT, Stderr

HAPROXY = Path("/usr/sbin/haproxy")
CHECK_MS = 300
CHECK_TIMEOUT_MS = 2000
INSTANCE_HEADER = "x-staal-instance"
SERVED = re.compile(r"^served (\S+) (-?\d+)")
# The balancer's stderr pipe: as large as any process may make one.
PIPE_MAX_SIZE = Path("/proc/sys/fs/pipe-max-size")


def haproxy() -> Path:
    """HAProxy's binary, installed from Debian first if it is missing."""
    return ensure("haproxy", exists(HAPROXY))


@dataclass(frozen=True, slots=True)
class Backend:
    """One instance as the balancer knows it."""

    name: str
    port: int


def listening_socket() -> socket.socket:
    """A loopback socket bound to a free port and listening, inheritable, for
    HAProxy to take over."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


def config(front_fd: int, host: str, backends: list[Backend], check_ms: int = CHECK_MS) -> str:
    """The balancer's config: `host` is the Host header the health checks
    send (the balancer's own, which the instances answer for)."""
    check = (f"    http-check send meth GET uri /ready ver HTTP/1.1 hdr host {host}\n"
             "    http-check expect status 200\n")
    servers = "".join(f"    server {b.name} 127.0.0.1:{b.port} check inter {check_ms} "
                      "fall 2 rise 1\n" for b in backends)
    return (
        "global\n"
        "    log stderr format raw local0 info\n"
        # One thread: HAProxy drops a log line rather than wait when another
        # of its threads is writing the log fd (a thread preempted mid-write
        # on a loaded machine), and the tests count requests by these lines.
        "    nbthread 1\n"
        "    maxconn 4096\n"
        "defaults\n"
        "    mode http\n"
        "    log global\n"
        "    option http-no-delay\n"
        # A connection refused by an instance that just died is tried on
        # another: the request was never sent, so nothing can run twice.
        "    option redispatch\n"
        "    retries 2\n"
        "    timeout connect 2s\n"
        "    timeout client 120s\n"
        "    timeout server 120s\n"
        # Generous: a healthy instance on a loaded machine must not flap.
        f"    timeout check {max(check_ms, CHECK_TIMEOUT_MS)}ms\n"
        "    timeout http-request 30s\n"
        "    timeout http-keep-alive 60s\n"
        "frontend mcp\n"
        f"    bind fd@{front_fd}\n"
        '    log-format "served %s %ST %HM %HU"\n'
        "    default_backend staal\n"
        "backend staal\n"
        "    balance roundrobin\n"
        "    option httpchk\n"
        f"{check}"
        f"    http-response set-header {INSTANCE_HEADER} %s\n"
        f"{servers}"
    )


class Balancer:
    """HAProxy in the foreground on a front socket of its own; `url` is the
    MCP endpoint through it."""

    def __init__(self, directory: Path, front: socket.socket, backends: list[Backend],
                 check_ms: int = CHECK_MS) -> None:
        self.directory = directory
        self.front = front
        self.port = front.getsockname()[1]
        self.host = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.host}/mcp"
        self.backends = backends
        self.config_path = directory / "haproxy.cfg"
        self.config_path.write_text(config(front.fileno(), self.host, backends, check_ms))
        binary = haproxy()
        checked = subprocess.run([str(binary), "-c", "-q", "-f", str(self.config_path)],
                                 capture_output=True, text=True, timeout=WAIT, check=False,
                                 pass_fds=(front.fileno(),))
        assert checked.returncode == 0, f"haproxy refused its config:\n{checked.stderr}"
        self.stderr = Stderr(directory / "haproxy.log")
        # HAProxy makes its log fd non-blocking and drops a line the pipe has
        # no room for: room for every line of a flood, should the reading
        # thread fall behind on a loaded machine.
        fcntl.fcntl(self.stderr.fd, fcntl.F_SETPIPE_SZ, int(PIPE_MAX_SIZE.read_text()))
        self.process = subprocess.Popen([str(binary), "-db", "-f", str(self.config_path)],
                                        stdin=subprocess.DEVNULL, stdout=self.stderr.fd,
                                        stderr=self.stderr.fd, pass_fds=(front.fileno(),))
        self.stderr.spawned()

    # -- what it logged

    def served(self) -> Counter[str]:
        """How many requests each instance served, by the balancer's log."""
        return Counter(m[1] for line in self.stderr.lines if (m := SERVED.match(line)))

    def wait_served(self, count: int, timeout: float = WAIT) -> Counter[str]:
        """Once `count` requests are logged (a log line follows its answer)."""
        self.stderr.wait_for(lambda _: sum(self.served().values()) >= count, timeout,
                             f"{count} requests logged")
        return self.served()

    def wait_state(self, instance: str, state: str, timeout: float = WAIT) -> str:
        """The log line saying `instance` went `state` (UP or DOWN)."""
        pattern = re.compile(rf"Server staal/{re.escape(instance)} is {state}\b")
        return self.stderr.wait_for(lambda line: bool(pattern.search(line)), timeout,
                                    f"'{instance} is {state}'")

    def state_changes(self, instance: str) -> list[str]:
        """UP and DOWN, in order, by the log's lines (HAProxy says each
        change twice on its stderr: once as a [WARNING], once logged)."""
        pattern = re.compile(rf"^Server staal/{re.escape(instance)} is (UP|DOWN)\b")
        return [m[1] for line in self.stderr.lines if (m := pattern.search(line))]

    # -- the end

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # hard stop: close every connection now
            try:
                self.process.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(WAIT)
        self.front.close()
        self.stderr.wait_closed()
