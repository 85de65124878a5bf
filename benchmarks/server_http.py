"""Streamable HTTP (issue 13 item 8, issue 26 item 6): calls/s with 1 and 16
concurrent clients, staal against the official SDK's own Streamable HTTP
server and FastMCP's HTTP app, the same tools, in the same run.

- staal: `staal-supervisor serve MANIFEST --http 127.0.0.1:PORT` on
  `servers/staal_manifest.json` (the scenario's tool only) in a fresh
  temporary directory (BENCH_DIR, or the system's): every call is a durable
  run in a worker, its reservation and journal fsync'd; with
  --runs-per-worker 1,100 a staal row per setting (`server.runs_per_worker`);
- the SDK: `MCPServer` served by `streamable_http_app(stateless_http=True,
  json_response=True)` under uvicorn (`servers/ref_mcpserver_http.py`): the
  tool in-process, no journal, no isolation;
- FastMCP: its `http_app(stateless_http=True, json_response=True)` under
  uvicorn (`servers/ref_fastmcp_http.py`; the `bench` extra), likewise.

Scenarios (--scenario, the no-op by default): `noop`, and `get`, one GET
to the local service (`servers/http_service.py`, answering after
--service-delay-ms), staal through its `net.http.get` grant, the references
through one shared httpx client.

The load is `http_load.py`, a process of its own: N keep-alive connections,
each calling in turn, every answer checked. Both revisions are measured
(--revision for one): 2025-11-25 (no session: no server mints one) and
2026-07-28 (the `_meta` envelope and its mirrored headers). Per round, for
each server in turn (the order rotates) and scenario: start it, a warm-up,
then for each revision one load of --calls calls with 1 client, one with
16, and --calls `tools/list` requests with 16 (no run: the transport and
protocol layers alone), the CPU (user + system, `proctree.py`) of the
server's whole tree and of its main process alone (staal's supervisor)
measured around each; then SIGTERM. Reports medians over rounds, each
server's ratio to the SDK's, and the load average.

    python benchmarks/server_http.py [--rounds 3] [--calls 2000] [--warmup 200]
        [--servers staal,sdk,fastmcp] [--scenario noop --scenario get]
        [--runs-per-worker 1,100] [--revision 2025-11-25]
"""

from __future__ import annotations

import argparse
import importlib.util
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

from proctree import root_cpu, tree_cpu
from server_contenders import (
    SCENARIOS,
    SERVERS,
    Scenario,
    Service,
    bench_dir,
    runs_per_worker_settings,
    staal_name,
    write_staal_manifest,
)

HERE = Path(__file__).resolve().parent
LOAD = HERE / "http_load.py"
REVISIONS = ("2025-11-25", "2026-07-28")
# (clients, method): calls of the tool, and tools/list (no run: what the
# transport and the protocol layer cost on their own).
PHASES = ((1, "tools/call"), (16, "tools/call"), (16, "tools/list"))
START_BOUND_S = 60.0
SDK = "SDK (MCPServer, stateless HTTP)"
FASTMCP = "FastMCP (http_app, stateless)"
REFERENCES = {"sdk": (SDK, "ref_mcpserver_http.py"), "fastmcp": (FASTMCP, "ref_fastmcp_http.py")}


@dataclass(frozen=True)
class HttpServer:
    key: str  # staal, staal:N, sdk, fastmcp
    name: str
    runs_per_worker: int | None = None


@dataclass
class Running:
    process: subprocess.Popen[bytes]
    port: int
    directory: Path


def servers(chosen: str, runs_per_worker: str | None) -> list[HttpServer]:
    keys = chosen.split(",")
    if "fastmcp" in keys and importlib.util.find_spec("fastmcp") is None:
        raise SystemExit("fastmcp not installed: pip install -e '.[bench]' "
                         "(or leave it out with --servers)")
    out: list[HttpServer] = []
    for key in keys:
        if key == "staal":
            out += [HttpServer("staal" if n is None else f"staal:{n}", staal_name(n), n)
                    for n in runs_per_worker_settings(runs_per_worker)]
        elif key in REFERENCES:
            out.append(HttpServer(key, REFERENCES[key][0]))
        else:
            raise SystemExit(f"--servers: unknown server {key!r} (staal, sdk, fastmcp)")
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_listening(process: subprocess.Popen[bytes], port: int, ready: bool) -> None:
    """Until the server listens on `port`; with `ready` (staal, which
    listens from its first moment and answers 503 until it serves), until
    its `GET /ready` answers 200."""
    deadline = time.monotonic() + START_BOUND_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited at start with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                if not ready:
                    return
                sock.sendall(b"GET /ready HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n")
                if sock.recv(64).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"the server on {port} was not ready within {START_BOUND_S} s")


def start(server: HttpServer, scenario: Scenario, service: str | None) -> Running:
    port = free_port()
    directory = Path(tempfile.mkdtemp(prefix="bench-http-", dir=bench_dir()))
    stderr = open(directory / "stderr", "wb")  # noqa: SIM115 (the server's for its life)
    if server.key.partition(":")[0] == "staal":
        write_staal_manifest(directory, scenario, service, runs_per_worker=server.runs_per_worker)
        command = [str(Path(sys.executable).parent / "staal-supervisor"), "serve",
                   str(directory / "manifest.json"), "--http", f"127.0.0.1:{port}"]
        cwd = directory
    else:
        command = [sys.executable, str(SERVERS / REFERENCES[server.key][1]), str(port)]
        cwd = SERVERS
    process = subprocess.Popen(command, cwd=cwd, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=stderr)
    stderr.close()
    wait_listening(process, port, ready=server.key.partition(":")[0] == "staal")
    return Running(process, port, directory)


def stop(running: Running) -> None:
    running.process.send_signal(signal.SIGTERM)
    try:
        running.process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        running.process.kill()
        running.process.wait()
    shutil.rmtree(running.directory, ignore_errors=True)


def load(port: int, clients: int, calls: int, revision: str, method: str = "tools/call",
         scenario: Scenario = SCENARIOS["noop"], service: str | None = None) -> dict[str, object]:
    command = [sys.executable, str(LOAD), "--port", str(port), "--clients", str(clients),
               "--calls", str(calls), "--revision", revision, "--method", method,
               "--tool", scenario.tool]
    if service is not None:
        command += ["--service", service]
    out = subprocess.run(command, capture_output=True, text=True, check=False, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"the load failed ({' '.join(command[1:])}):\n{out.stderr}")
    return json.loads(out.stdout)


@dataclass
class Cell:
    rates: list[float] = field(default_factory=list)
    p50: list[float] = field(default_factory=list)
    cpu_per_call: list[float] = field(default_factory=list)
    root_cpu_per_call: list[float] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)

    def rate(self) -> float:
        return statistics.median(self.rates)


# (server name, scenario key, revision, method, clients)
Cells = dict[tuple[str, str, str, str, int], Cell]


def measure(server: HttpServer, scenario: Scenario, revisions: tuple[str, ...],
            phases: tuple[tuple[int, str], ...], args: argparse.Namespace, cells: Cells,
            service: str | None) -> None:
    running = start(server, scenario, service)
    try:
        for revision in revisions:
            load(running.port, 16, args.warmup, revision, scenario=scenario, service=service)
            for clients, method in phases:
                pid = running.process.pid
                before, root_before = tree_cpu(pid), root_cpu(pid)
                result = load(running.port, clients, args.calls, revision, method, scenario, service)
                used, root_used = tree_cpu(pid) - before, root_cpu(pid) - root_before
                key = (server.name, scenario.key, revision, method, clients)
                cell = cells.setdefault(key, Cell())
                cell.rates.append(result["calls"] / result["seconds"])
                cell.p50.append(result["p50"])
                cell.cpu_per_call.append(used / result["calls"])
                cell.root_cpu_per_call.append(root_used / result["calls"])
                for message, count in result["failures"].items():
                    cell.failures[message] = cell.failures.get(message, 0) + count
    finally:
        stop(running)


def collect(args: argparse.Namespace, phases: tuple[tuple[int, str], ...] = PHASES) -> Cells:
    """Every server in every scenario, revision and phase, `args.rounds` times,
    the servers' order rotating each round."""
    everyone = servers(args.servers, args.runs_per_worker)
    scenarios = [SCENARIOS[key] for key in dict.fromkeys(args.scenario)]
    revisions = tuple(args.revision) if args.revision else REVISIONS
    service = Service(args.service_delay_ms) if SCENARIOS["get"] in scenarios else None
    cells: Cells = {}
    try:
        for round_ in range(args.rounds):
            shift = round_ % len(everyone)
            for server in everyone[shift:] + everyone[:shift]:
                for scenario in scenarios:
                    url = service.url if service and scenario.tool == "get" else None
                    measure(server, scenario, revisions, phases, args, cells, url)
    finally:
        if service:
            service.close()
    return cells


def report(cells: Cells, args: argparse.Namespace, load_before: tuple[float, ...]) -> None:
    from importlib.metadata import version

    fastmcp = version("fastmcp") if importlib.util.find_spec("fastmcp") else "not installed"
    print(f"rounds {args.rounds}, {args.calls} calls per cell, warm-up {args.warmup}; "
          f"{os.cpu_count()} cores; load average (1, 5, 15 min) before "
          f"{', '.join(f'{x:.2f}' for x in load_before)}, after "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}; Python {sys.version.split()[0]}, "
          f"mcp {version('mcp')}, fastmcp {fastmcp}, uvicorn {version('uvicorn')}, "
          f"uvloop {version('uvloop')}")
    names = list(dict.fromkeys(key[0] for key in cells))
    for scenario in dict.fromkeys(key[1] for key in cells):
        print(f"\n#### {SCENARIOS[scenario].title}, over Streamable HTTP\n")
        print("| revision | request | clients | server | per s | p50 ms | CPU ms each | "
              "main process alone ms each | this / SDK, per s |")
        print("|---|---|---:|---|---:|---:|---:|---:|---:|")
        combos = sorted({k[2:] for k in cells if k[1] == scenario},
                        key=lambda c: (c[0], c[1], c[2]))
        for revision, method, clients in combos:
            sdk = cells.get((SDK, scenario, revision, method, clients))
            for name in names:
                cell = cells.get((name, scenario, revision, method, clients))
                if cell is None:
                    continue
                ratio = f"{cell.rate() / sdk.rate():.2f}" if sdk else "-"
                print(f"| {revision} | {method} | {clients} | {name} | {cell.rate():.0f} | "
                      f"{statistics.median(cell.p50) * 1e3:.2f} | "
                      f"{statistics.median(cell.cpu_per_call) * 1e3:.2f} | "
                      f"{statistics.median(cell.root_cpu_per_call) * 1e3:.2f} | {ratio} |")
    failed = {key: cell.failures for key, cell in cells.items() if cell.failures}
    print(f"\nfailed calls: {failed or 'none'}")


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--servers", default="staal,sdk,fastmcp",
                        help="which servers, by key, comma-separated: staal, sdk, fastmcp")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS),
                        help="noop (the default), get; repeat for both")
    parser.add_argument("--revision", action="append", choices=REVISIONS,
                        help="one revision (repeat for both, the default)")
    parser.add_argument("--runs-per-worker", metavar="N[,N...]",
                        help="staal's server.runs_per_worker, a staal row per setting (such as "
                             "1,100); not given: one row, the key left to its default")
    parser.add_argument("--service-delay-ms", type=float, default=2.0,
                        help="how long the GET scenario's service waits before it answers")
    return parser


def main() -> None:
    args = arguments().parse_args()
    args.scenario = args.scenario or ["noop"]
    load_before = os.getloadavg()
    cells = collect(args)
    report(cells, args, load_before)


if __name__ == "__main__":
    main()
