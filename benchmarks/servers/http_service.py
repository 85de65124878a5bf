"""The benchmarks' local HTTP service: a `ThreadingHTTPServer` on 127.0.0.1
(a thread per connection, HTTP/1.1 keep-alive) that answers every GET after
--delay-ms (default 0) with a small JSON body: `{"x": N}` for `/item/N`, else
`{"path": ...}`. Prints its port on stdout, then serves until killed.

    python benchmarks/servers/http_service.py [--delay-ms 2]
"""

from __future__ import annotations

import argparse
import json
import socket
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    delay = 0.0

    def setup(self) -> None:
        super().setup()
        # Headers and body go out as two writes; without this, delayed ACKs
        # add 40 ms to every answer.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.delay:
            time.sleep(self.delay)
        head, _, tail = self.path.rpartition("/")
        value = {"x": int(tail)} if head == "/item" and tail.isdigit() else {"path": self.path}
        body = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Service(ThreadingHTTPServer):
    # socketserver's default listen backlog is 5: with 16 runs each opening
    # a new connection at once, SYNs past the fifth are dropped and retried
    # by the kernel after a second, which a 1000 ms connect timeout reports
    # as the service's fault. Real servers listen with a deep backlog
    # (nginx 511, uvicorn 2048); so does this one.
    request_queue_size = 1024
    daemon_threads = True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--delay-ms", type=float, default=0.0)
    args = parser.parse_args()
    Handler.delay = args.delay_ms / 1000
    server = Service(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
