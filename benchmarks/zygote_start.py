"""Starting the zygote: today's `subprocess.Popen` of `python -m
staal.worker.processes.zygote` (supervisor/workers/zygote.py) against `multiprocess`'s spawn
context (DESIGN.md section 6 names it as a way to start the zygote with none
of the supervisor's descriptors), each measured from a fresh parent process,
as a server's cold start pays it.

- `zygote`: a fresh parent that has read the manifest as `serve` has (it
  imports what supervisor/app/serving.py imports by then) opens one inheritable
  decoy descriptor, then starts the zygote one way or the other and asks it
  for a worker at once ("fork 1" on its request pipe). Ready is the zygote's
  first `forked PID` report: its interpreter is up and it has imported the
  engine and every program. Measured at ready: the wall time from just
  before the start (for multiprocess, importing it is included: the
  supervisor would import it at that point), the parent's CPU time over that
  span, the zygote's CPU time, the CPU time of any other process the start
  made (multiprocess's resource tracker), the zygote's open descriptors and
  whether the decoy reached it. The multiprocess zygote runs the same
  `staal.worker.processes.zygote.main`, its request pipe put on descriptor 0 and the
  environment set to what `worker_environment` gives, as Popen's `env=` does.
- `serve`: `staal-supervisor serve` on a fresh copy of examples/, started
  through this file (`--serve MODE`, which puts the multiprocess start in
  place of `staal.supervisor.workers.zygote.spawn` for that mode), from the process's
  spawn to the answer to `initialize` and then to `tools/list` (raw JSON-RPC
  lines, no client library), and the CPU time of the whole process tree
  (wait4 of the server, which waits for its zygote, which waits for its
  workers) once its input closed and it exited.
- `import`: `import multiprocess` plus `get_context('spawn')` in a fresh
  interpreter, against an interpreter that imports nothing more.

Rounds alternate the two modes (the order flips every round). Reports the
median and the spread (min to max) of each, and the load average before and
after.

    python benchmarks/zygote_start.py [--rounds 15] [--manifest examples/manifest.json]

`multiprocess` is not a staal dependency: `pip install multiprocess` into
the venv to run this. Top-level imports are the standard library only: a
multiprocess spawn child imports this file again as its main module.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = ("subprocess", "multiprocess")
SECRETS = {"STRIPE_SECRET_KEY": "sk_test_example"}  # what the example manifest's grants name


# -- the multiprocess start (parent and child sides) --------------------------------


class ProcessAsPopen:
    """What the pool uses of a Popen (stdin, wait, kill, pid), over a
    multiprocess Process."""

    def __init__(self, process, stdin_fd: int) -> None:
        self.process = process
        self.pid = process.pid
        self.stdin = os.fdopen(stdin_fd, "wb")

    def wait(self, timeout: float | None = None) -> int | None:
        self.process.join(timeout)
        return self.process.exitcode

    def kill(self) -> None:
        self.process.kill()

    @property
    def returncode(self) -> int | None:
        return self.process.exitcode


def zygote_child(requests, reports, manifest: str, endpoint: str, env: dict[str, str]) -> None:
    """The spawned child: the request pipe on descriptor 0, the environment
    Popen would have given, then the zygote's own main."""
    os.dup2(requests.fileno(), 0)
    requests.close()
    report_fd = os.dup(reports.fileno())
    reports.close()
    os.environ.clear()
    os.environ.update(env)
    from staal.worker.processes import zygote
    zygote.main(["--manifest", manifest, "--endpoint", endpoint, "--report-fd", str(report_fd)])


def spawn_multiprocess(manifest: Path, endpoint: str, env: dict[str, str]):
    """`staal.supervisor.workers.zygote.spawn`, through multiprocess's spawn context."""
    import multiprocess

    from staal.supervisor.workers.zygote import Spawned

    context = multiprocess.get_context("spawn")
    requests_r, requests_w = context.Pipe(duplex=False)
    reports_r, reports_w = context.Pipe(duplex=False)
    process = context.Process(target=zygote_child, name="staal-zygote",
                              args=(requests_r, reports_w, str(manifest), endpoint, env))
    process.start()
    requests_r.close()
    reports_w.close()
    stdin_fd, report_fd = os.dup(requests_w.fileno()), os.dup(reports_r.fileno())
    requests_w.close()
    reports_r.close()
    return Spawned(ProcessAsPopen(process, stdin_fd), report_fd, endpoint,
                   Path(endpoint.removeprefix("ipc://")).parent)


def use_mode(mode: str) -> None:
    if mode == "multiprocess":
        from staal.supervisor.workers import pool, zygote
        zygote.spawn = pool.spawn = spawn_multiprocess


# -- one zygote start, in a fresh parent ------------------------------------------------


def cpu(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def descriptors(pid: int) -> list[str]:
    base = Path(f"/proc/{pid}/fd")
    out = []
    for entry in sorted(base.iterdir(), key=lambda p: int(p.name)):
        try:
            target = os.readlink(entry)
        except OSError:
            continue
        kind = target.split(":")[0] if ":[" in target else target
        out.append(f"{entry.name}={kind}")
    return out


def one_zygote(mode: str, manifest: Path) -> dict:
    import psutil

    from staal.manifest.check import load_manifest
    from staal.supervisor.workers import zygote
    loaded = load_manifest(manifest)
    decoy = os.open("/dev/zero", os.O_RDONLY)
    os.set_inheritable(decoy, True)
    directory = zygote.runtime_dir()
    endpoint = f"ipc://{directory / 'workers'}"
    env = zygote.worker_environment(loaded)
    before = cpu(resource.getrusage(resource.RUSAGE_SELF))
    start = time.perf_counter()
    if mode == "multiprocess":
        spawned = spawn_multiprocess(loaded.path, endpoint, env)
    else:
        spawned = zygote.spawn(loaded.path, endpoint, env)
    spawned.process.stdin.write(b"fork 1\n")
    spawned.process.stdin.flush()
    pending = b""
    while b"forked " not in pending:
        chunk = os.read(spawned.report_fd, 4096)
        if not chunk:
            raise RuntimeError("the zygote exited before it forked")
        pending += chunk
    ready = time.perf_counter() - start
    parent_cpu = cpu(resource.getrusage(resource.RUSAGE_SELF)) - before
    me = psutil.Process()
    zygote_pid = spawned.process.pid
    zygote_times = psutil.Process(zygote_pid).cpu_times()
    zygote_fds = descriptors(zygote_pid)
    helpers = [p for p in me.children() if p.pid != zygote_pid]
    helper_cpu = sum(p.cpu_times().user + p.cpu_times().system for p in helpers)
    decoy_reached = any(os.path.samestat(os.stat(f"/proc/{zygote_pid}/fd/{fd.split('=')[0]}"),
                                         os.fstat(decoy))
                        for fd in zygote_fds if fd.endswith("/dev/zero"))
    spawned.process.stdin.close()
    spawned.process.wait(30)
    shutil.rmtree(directory, ignore_errors=True)
    zygote_cpu = zygote_times.user + zygote_times.system
    return {"ready": ready, "parent_cpu": parent_cpu, "zygote_cpu": zygote_cpu,
            "helper_cpu": helper_cpu, "all_cpu": parent_cpu + zygote_cpu + helper_cpu,
            "helpers": len(helpers), "fds": zygote_fds, "decoy": decoy_reached}


# -- one cold start of serve ------------------------------------------------------------


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                         "clientInfo": {"name": "zygote-bench", "version": "0"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


def answer(stdout, wanted: int) -> dict:
    while True:
        line = stdout.readline()
        if not line:
            raise RuntimeError("the server closed its output")
        message = json.loads(line)
        if message.get("id") == wanted:
            return message


def one_serve(mode: str, examples: Path, work: Path) -> dict:
    copy = work / f"examples-{mode}"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(examples, copy, ignore=shutil.ignore_patterns("journals", "__pycache__"))
    env = {**os.environ, **SECRETS}
    start = time.perf_counter()
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", mode, str(copy / "manifest.json")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    server.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
    server.stdin.flush()
    assert "result" in answer(server.stdout, 1)
    initialized = time.perf_counter() - start
    server.stdin.write((json.dumps(INITIALIZED) + "\n" + json.dumps(LIST) + "\n").encode())
    server.stdin.flush()
    assert len(answer(server.stdout, 2)["result"]["tools"]) == 3
    listed = time.perf_counter() - start
    server.stdin.close()
    _, status, usage = os.wait4(server.pid, 0)
    server.returncode = os.waitstatus_to_exitcode(status)
    assert server.returncode == 0, f"serve exited {server.returncode}"
    return {"initialize": initialized, "tools_list": listed, "tree_cpu": cpu(usage)}


def serve_main(mode: str, manifest: str) -> None:
    use_mode(mode)
    from staal.supervisor.app.serving import serve_from_argv

    sys.exit(serve_from_argv(["serve", manifest]))


# -- the import -----------------------------------------------------------------------


def one_import(what: str) -> float:
    code = {"multiprocess": "import multiprocess; multiprocess.get_context('spawn')",
            "nothing": "pass"}[what]
    script = f"import time; t = time.perf_counter(); {code}; print(time.perf_counter() - t)"
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True)
    return float(done.stdout) if what == "multiprocess" else time.perf_counter() - start


# -- the driver -------------------------------------------------------------------------


def child_json(args: list[str]) -> dict:
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **SECRETS}, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{args}: {done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def spread(values: list[float], digits: int = 0) -> str:
    """Median (min to max), in milliseconds."""
    def ms(value: float) -> str:
        return f"{value * 1e3:.{digits}f}"

    return f"{ms(statistics.median(values))} ms ({ms(min(values))} to {ms(max(values))})"


def table(title: str, columns: list[str], cells: dict[str, list[str]]) -> None:
    """A Markdown table, one row a start mode (median, min to max)."""
    print(f"\n### {title} (median, min to max)\n")
    print("| start | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for mode, row in cells.items():
        print(f"| {mode} | " + " | ".join(row) + " |")


def paired(rows: dict[str, list[dict]], key: str) -> str:
    """The per-round difference, multiprocess minus subprocess (the rounds
    interleave the two, so each pair saw about the same load)."""
    return spread([m[key] - s[key] for m, s in zip(rows["multiprocess"], rows["subprocess"], strict=True)])


def drive(args: argparse.Namespace) -> None:
    manifest = Path(args.manifest).resolve()
    load_before = os.getloadavg()
    zygotes = {mode: [] for mode in MODES}
    serves = {mode: [] for mode in MODES}
    imports = []
    with tempfile.TemporaryDirectory(prefix="zygote-bench-") as work:
        for round_ in range(args.rounds):
            order = MODES if round_ % 2 == 0 else MODES[::-1]
            for mode in order:
                zygotes[mode].append(child_json(["--one", mode, str(manifest)]))
            for mode in order:
                serves[mode].append(one_serve(mode, manifest.parent, Path(work)))
            imports.append(one_import("multiprocess"))
    load_after = os.getloadavg()
    print(f"{args.rounds} rounds; load average before {load_before[0]:.2f} "
          f"{load_before[1]:.2f} {load_before[2]:.2f}, after {load_after[0]:.2f} "
          f"{load_after[1]:.2f} {load_after[2]:.2f}; {os.cpu_count()} CPUs; "
          f"Python {sys.version.split()[0]}")
    table("Starting the zygote, to its first fork",
          ["to ready", "parent CPU", "zygote CPU", "other processes' CPU", "other processes",
           "zygote's descriptors at ready", "decoy inherited"],
          {mode: [spread([r["ready"] for r in rows]),
                  spread([r["parent_cpu"] for r in rows], 1),
                  spread([r["zygote_cpu"] for r in rows]),
                  spread([r["helper_cpu"] for r in rows]),
                  str(max(r["helpers"] for r in rows)),
                  f"{len(rows[0]['fds'])}: " + " / ".join(sorted({" ".join(r["fds"]) for r in rows})),
                  str(any(r["decoy"] for r in rows))]
           for mode, rows in zygotes.items()})
    print(f"\nmultiprocess - subprocess, round by round: to ready "
          f"{paired(zygotes, 'ready')}, all CPU {paired(zygotes, 'all_cpu')}")
    table("Cold start of `serve` on examples/",
          ["to `initialize` answered", "to `tools/list` answered",
           "CPU of the process tree, start to exit (waited processes only)"],
          {mode: [spread([r[key] for r in rows]) for key in ("initialize", "tools_list", "tree_cpu")]
           for mode, rows in serves.items()})
    print(f"\nmultiprocess - subprocess, round by round: to `tools/list` "
          f"{paired(serves, 'tools_list')}, CPU {paired(serves, 'tree_cpu')}")
    print(f"\n`import multiprocess` + `get_context('spawn')` in a fresh interpreter: "
          f"{spread(imports)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--manifest", default=str(ROOT / "examples" / "manifest.json"))
    parser.add_argument("--one", nargs=2, metavar=("MODE", "MANIFEST"), help=argparse.SUPPRESS)
    parser.add_argument("--serve", nargs=2, metavar=("MODE", "MANIFEST"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_zygote(args.one[0], Path(args.one[1]))))
    elif args.serve:
        serve_main(*args.serve)
    else:
        drive(args)


if __name__ == "__main__":
    main()
