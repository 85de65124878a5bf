"""Streamable HTTP (issue 13, item 8): calls/s with 1 and 16 concurrent
clients, staal against the official SDK's own Streamable HTTP server, the
same no-op tool, in the same run.

- staal: `staal-supervisor serve MANIFEST --http 127.0.0.1:PORT` on
  `servers/staal_manifest.json` (the no-op tool only) in a fresh temporary
  directory (BENCH_DIR, or the system's): every call is a durable run in a
  forked worker, its reservation and journal fsync'd;
- the SDK: `MCPServer` served by `streamable_http_app(stateless_http=True,
  json_response=True)` under uvicorn (`servers/ref_mcpserver_http.py`): the
  tool in-process, no journal, no isolation.

The load is `http_load.py`, a process of its own: N keep-alive connections,
each calling in turn, every answer checked. Both revisions are measured:
2025-11-25 (no session: neither server mints one) and 2026-07-28 (the
`_meta` envelope and its mirrored headers). Per round, for each server in
turn (the order rotates): start it, a warm-up, then for each revision one
load of --calls calls with 1 client, one with 16, and --calls `tools/list`
requests with 16 (no run: the transport and protocol layers alone), the server tree's CPU (user +
system, `proctree.py`) measured around it; then SIGTERM. Reports medians
over rounds, the ratio staal / SDK, and the load average.

    python benchmarks/server_http.py [--rounds 3] [--calls 2000] [--warmup 200]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from proctree import tree_cpu
from server_contenders import NOOP, SERVERS, bench_dir, write_staal_manifest

HERE = Path(__file__).resolve().parent
LOAD = HERE / "http_load.py"
REVISIONS = ("2025-11-25", "2026-07-28")
# (clients, method): calls of the no-op tool, and tools/list (no run: what
# the transport and the protocol layer cost on their own).
PHASES = ((1, "tools/call"), (16, "tools/call"), (16, "tools/list"))
START_BOUND_S = 60.0


@dataclass
class Running:
    process: subprocess.Popen[bytes]
    port: int
    directory: Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_listening(process: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + START_BOUND_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited at start with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listened on {port} within {START_BOUND_S} s")


def start(server: str) -> Running:
    port = free_port()
    directory = Path(tempfile.mkdtemp(prefix="bench-http-", dir=bench_dir()))
    stderr = open(directory / "stderr", "wb")  # noqa: SIM115 (the server's for its life)
    if server == "staal":
        write_staal_manifest(directory, NOOP, None)
        command = [str(Path(sys.executable).parent / "staal-supervisor"), "serve",
                   str(directory / "manifest.json"), "--http", f"127.0.0.1:{port}"]
        cwd = directory
    else:
        command = [sys.executable, str(SERVERS / "ref_mcpserver_http.py"), str(port)]
        cwd = SERVERS
    process = subprocess.Popen(command, cwd=cwd, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=stderr)
    stderr.close()
    wait_listening(process, port)
    return Running(process, port, directory)


def stop(running: Running) -> None:
    running.process.send_signal(signal.SIGTERM)
    try:
        running.process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        running.process.kill()
        running.process.wait()
    shutil.rmtree(running.directory, ignore_errors=True)


def load(port: int, clients: int, calls: int, revision: str,
         method: str = "tools/call") -> dict[str, object]:
    out = subprocess.run([sys.executable, str(LOAD), "--port", str(port), "--clients", str(clients),
                          "--calls", str(calls), "--revision", revision, "--method", method],
                         capture_output=True, text=True, check=True, timeout=1800)
    return json.loads(out.stdout)


@dataclass
class Cell:
    rates: list[float] = field(default_factory=list)
    cpu_per_call: list[float] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)


def measure(server: str, args: argparse.Namespace, cells: dict[tuple[str, str, str, int], Cell]) -> None:
    running = start(server)
    try:
        for revision in REVISIONS:
            load(running.port, 16, args.warmup, revision)
            for clients, method in PHASES:
                before = tree_cpu(running.process.pid)
                result = load(running.port, clients, args.calls, revision, method)
                used = tree_cpu(running.process.pid) - before
                cell = cells.setdefault((server, revision, method, clients), Cell())
                cell.rates.append(result["calls"] / result["seconds"])
                cell.cpu_per_call.append(used / result["calls"])
                for message, count in result["failures"].items():
                    cell.failures[message] = cell.failures.get(message, 0) + count
    finally:
        stop(running)


def report(cells: dict[tuple[str, str, str, int], Cell], args: argparse.Namespace,
           load_before: tuple[float, ...]) -> None:
    from importlib.metadata import version

    print(f"rounds {args.rounds}, {args.calls} calls per cell, warm-up {args.warmup}; "
          f"{os.cpu_count()} cores; load average before {load_before[0]:.2f}, after "
          f"{os.getloadavg()[0]:.2f}; Python {sys.version.split()[0]}, mcp {version('mcp')}, "
          f"uvicorn {version('uvicorn')}, uvloop {version('uvloop')}\n")
    print("| revision | request | clients | staal per s | SDK per s | staal / SDK | "
          "staal CPU ms each | SDK CPU ms each |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for revision in REVISIONS:
        for clients, method in PHASES:
            staal = cells[("staal", revision, method, clients)]
            sdk = cells[("sdk", revision, method, clients)]
            s_rate, r_rate = statistics.median(staal.rates), statistics.median(sdk.rates)
            print(f"| {revision} | {method} | {clients} | {s_rate:.0f} | {r_rate:.0f} | "
                  f"{s_rate / r_rate:.2f} | "
                  f"{statistics.median(staal.cpu_per_call) * 1e3:.2f} | "
                  f"{statistics.median(sdk.cpu_per_call) * 1e3:.2f} |")
    failed = {key: cell.failures for key, cell in cells.items() if cell.failures}
    print(f"\nfailed calls: {failed or 'none'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    args = parser.parse_args()
    load_before = os.getloadavg()
    cells: dict[tuple[str, str, str, int], Cell] = {}
    order = ["staal", "sdk"]
    for round_ in range(args.rounds):
        for server in order[round_ % 2:] + order[:round_ % 2]:
            measure(server, args, cells)
    report(cells, args, load_before)


if __name__ == "__main__":
    main()
