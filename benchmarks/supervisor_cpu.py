"""The supervisor process's own CPU per no-op call (issue 26 item 3).

Starts `staal-supervisor serve` on the benchmark's no-op manifest
(`servers/staal_manifest.json`, the `noop` tool only) in a fresh directory,
speaks MCP over its stdio with a minimal client of its own (raw JSON-RPC
lines: no SDK, so the client costs little and is not counted anyway), warms
up, then makes --calls sequential calls and reads the supervisor's own CPU
time (user + system, all its threads: the kernel's per-process CPU clock)
before and after. The zygote and the workers are other processes and are not
counted; the supervisor's threads (stdin reader, the threads of the call
path's blocking steps, ZeroMQ's I/O thread) are.

    python benchmarks/supervisor_cpu.py [--calls 500] [--rounds 3] [--shm]
        [--postgres DSN] [--py-spy FILE] [--callgrind]

Prints `supervisor CPU per call: X ms (load L)` per store asked for (the
median over rounds), the load average before and after. With --postgres DSN,
also the ledger in the PostgreSQL store, in a schema made for the run and
dropped after it. --py-spy FILE records the measured calls with py-spy
(threads holding the GIL, native frames off) into FILE (speedscope JSON).
--callgrind runs the supervisor under `valgrind --tool=callgrind` (not its
children) and prints the instructions it runs per call, less those it runs
idle for as long (what comes by the second: heartbeats, the pool's watch),
a count in user mode that hardly depends on the machine's load (the kernel's
part is not in it; slow: about 50 times slower than natively, so use
--calls 100).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from proctree import TICK, process_cpu
from server_contenders import NOOP, STORE_ENV, write_staal_manifest

_T = TypeVar("_T")
INITIALIZE = {"protocolVersion": "2025-06-18", "capabilities": {},
              "clientInfo": {"name": "supervisor_cpu", "version": "1"}}


class Client:
    """A minimal MCP client on a server's stdio: one request at a time."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self.out = process.stdin
        self.fd = process.stdout.fileno()
        self.buffer = b""
        self.next_id = 0

    def request(self, method: str, params: dict[str, object], timeout: float = 120.0) -> dict:
        self.next_id += 1
        self.out.write(json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method,
                                   "params": params}).encode() + b"\n")
        self.out.flush()
        while True:
            line = self._line(timeout)
            message = json.loads(line)
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def notify(self, method: str) -> None:
        self.out.write(json.dumps({"jsonrpc": "2.0", "method": method}).encode() + b"\n")
        self.out.flush()

    def _line(self, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise TimeoutError("no answer from the server")
            data = os.read(self.fd, 65536)
            if not data:
                raise EOFError("the server closed its output")
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def call(self, i: int) -> None:
        result = self.request("tools/call", {"name": "noop", "arguments": {"x": i}})
        if result.get("isError") or result.get("structuredContent", {}).get("result") != i:
            raise RuntimeError(f"call {i} answered {result}")


def own_cpu(pid: int) -> float:
    return process_cpu(pid)[0]


def user_system(pid: int) -> tuple[float, float]:
    """A process's user and system CPU seconds (clock ticks, from /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def start(directory: Path, env: dict[str, str], wrap: list[str]) -> subprocess.Popen[bytes]:
    supervisor = str(Path(sys.executable).parent / "staal-supervisor")
    stderr = open(directory / "stderr.log", "ab")  # noqa: SIM115 - the child's
    return subprocess.Popen([*wrap, supervisor, "serve", str(directory / "manifest.json")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                            env=env, cwd=directory)


Phase = Callable[[subprocess.Popen[bytes], Client], _T]


def session(base: Path, warmup: int, postgres: str | None, phase: Phase[_T],
            wrap: list[str] | None = None) -> _T:
    """`phase`'s answer, run on a fresh server (under `wrap`, if given:
    valgrind) once it answered `warmup` calls."""
    directory = Path(tempfile.mkdtemp(prefix="bench-supcpu-", dir=base))
    env = dict(os.environ)
    if postgres:
        env[STORE_ENV] = postgres
    write_staal_manifest(directory, NOOP, None, postgres=postgres is not None)
    process = start(directory, env, wrap or [])
    try:
        client = Client(process)
        client.request("initialize", INITIALIZE, timeout=600)
        client.notify("notifications/initialized")
        client.request("tools/list", {}, timeout=600)
        for i in range(warmup):
            client.call(i)
        return phase(process, client)
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=600)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(directory, ignore_errors=True)


def cpu_phase(calls: int) -> Phase[tuple[float, float, float]]:
    """CPU seconds of the supervisor over `calls` sequential no-op calls: in
    all, in user mode and in the kernel (the last two in clock ticks)."""
    def phase(process: subprocess.Popen[bytes], client: Client) -> tuple[float, float, float]:
        before, (user, system) = own_cpu(process.pid), user_system(process.pid)
        for i in range(calls):
            client.call(i)
        after, (user2, system2) = own_cpu(process.pid), user_system(process.pid)
        return after - before, user2 - user, system2 - system

    return phase


def py_spy_phase(calls: int, output: str) -> Phase[None]:
    """py-spy records the supervisor's threads holding the GIL over `calls` calls."""
    def phase(process: subprocess.Popen[bytes], client: Client) -> None:
        spy = subprocess.Popen(["py-spy", "record", "--pid", str(process.pid), "--rate", "500",
                                "--format", "speedscope", "--output", output, "--gil",
                                "--nonblocking"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(1.0)  # py-spy attaches
            for i in range(calls):
                client.call(i)
        finally:
            spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            spy.wait()

    return phase


def callgrind_phase(calls: int, out: Path) -> Phase[tuple[float, float]]:
    """Instructions the supervisor runs over `calls` calls, less what it runs
    idle for as long (heartbeats, the pool's watch: these come by the second,
    and a call under valgrind lasts long, longer on a loaded machine): per
    call, and the idle ones per second. `callgrind_control` zeroes the
    counts and dumps them (callgrind.out.1, .2) around each phase."""
    def control(pid: int, what: str) -> None:
        subprocess.run(["callgrind_control", what, str(pid)], check=True, capture_output=True,
                       timeout=600)

    def phase(process: subprocess.Popen[bytes], client: Client) -> tuple[float, float]:
        control(process.pid, "-z")
        began = time.monotonic()
        for i in range(calls):
            client.call(i)
        took = time.monotonic() - began
        control(process.pid, "-d")
        control(process.pid, "-z")
        time.sleep(took)
        control(process.pid, "-d")
        busy, idle = (_total(out / f"callgrind.out.{n}") for n in (1, 2))
        return (busy - idle) / calls, idle / took

    return phase


def _total(path: Path) -> int:
    found = re.search(r"^(?:summary|totals): (\d+)", path.read_text(errors="replace"),
                      re.MULTILINE)
    assert found, f"callgrind wrote no total in {path}"
    return int(found.group(1))


def callgrind(base: Path, calls: int, warmup: int, postgres: str | None) -> float:
    """Instructions the supervisor spends per call, under callgrind."""
    out = Path(tempfile.mkdtemp(prefix="bench-callgrind-", dir=base))
    wrap = ["valgrind", "--tool=callgrind", "--trace-children=no",
            f"--callgrind-out-file={out}/callgrind.out"]
    per_call, idle = session(base, warmup, postgres, callgrind_phase(calls, out), wrap)
    print(f"<!-- callgrind: {idle / 1e6:.2f} M instructions per second idle; {out} -->")
    return per_call


def schema_dsn(dsn: str) -> tuple[str, str]:
    """A DSN whose connections use a schema of their own, and the schema's name."""
    schema = f"bench_supcpu_{os.getpid()}"
    subprocess.run(["psql", dsn, "-qc", f"CREATE SCHEMA {schema}"], check=True)
    if "://" not in dsn:  # key=value form
        return f"{dsn} options=-csearch_path={schema}", schema
    sep = "&" if "?" in dsn else "?"
    return f"{dsn}{sep}options=-csearch_path%3D{schema}", schema


def load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shm", action="store_true", help="the server's directory on /dev/shm")
    parser.add_argument("--postgres", metavar="DSN", help="also the PostgreSQL store")
    parser.add_argument("--py-spy", metavar="FILE", help="record one more round of the file store")
    parser.add_argument("--callgrind", action="store_true", help="instructions per call instead")
    args = parser.parse_args()
    base = Path("/dev/shm") if args.shm else Path(os.environ.get("BENCH_DIR") or tempfile.gettempdir())
    stores: list[tuple[str, str | None]] = [("file store", None)]
    schema = None
    if args.postgres:
        dsn, schema = schema_dsn(args.postgres)
        stores.append(("PostgreSQL store", dsn))
    try:
        for name, dsn in stores:
            if args.callgrind:
                per = callgrind(base, args.calls, args.warmup, dsn)
                print(f"supervisor instructions per call ({name}): {per / 1e6:.2f} M")
                continue
            started = load()
            samples, users, systems = [], [], []
            for _ in range(args.rounds):
                cpu, user, system = session(base, args.warmup, dsn, cpu_phase(args.calls))
                samples.append(cpu / args.calls)
                users.append(user / args.calls)
                systems.append(system / args.calls)
            if args.py_spy and dsn is None:  # a round of its own: sampling costs the server
                session(base, args.warmup, dsn, py_spy_phase(args.calls, args.py_spy))
            per = statistics.median(samples) * 1000
            rounds = ", ".join(f"{s * 1000:.2f}" for s in samples)
            print(f"supervisor CPU per call ({name}): {per:.2f} ms "
                  f"(load {started} to {load()}; user {statistics.median(users) * 1000:.2f} ms, "
                  f"kernel {statistics.median(systems) * 1000:.2f} ms; rounds {rounds} ms; "
                  f"{args.calls} calls each)")
    finally:
        if schema is not None:
            subprocess.run(["psql", args.postgres, "-qc",
                            f"SET client_min_messages TO warning; DROP SCHEMA {schema} CASCADE"],
                           check=False)


if __name__ == "__main__":
    main()
