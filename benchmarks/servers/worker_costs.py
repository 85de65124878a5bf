"""What one staal worker costs, step by step, measured by CPU time.

Run by `benchmarks/server.py --worker-costs` (not on its own): this process
becomes a zygote exactly as `staal.worker.processes.zygote.main` makes one (`preload`
of the benchmark's manifest, the tripwire installed, `gc.freeze`), then forks
children that each do a little more of what a worker does and exit. Each
child's CPU time (user + system) and minor page faults come from `wait4`'s
rusage: microsecond counts of that child alone, so other load on the machine
barely moves them. The parent's own CPU per fork is the page-table copy.

    A  fork, exit at once
    B  A + the worker's ZeroMQ context and DEALER socket (its I/O and reaper
       threads), closed again
    C  B + a `threading.Thread`, started and joined (the channel's thread
       before issue 12 item 3)
    H  B + the heartbeat thread as `serve.Channel` starts it now (a bare
       `_thread` thread), started and joined
    D  A + one run of the no-op tool (`staal.worker.runs.run.start`, journal in
       --journals), as `serve.execute` does it: narrow the tripwire, CPU
       backstop, read the inputs file
    E  C + D: what a worker does, without the messages
    F  D after the idle rehearsal (`serve.rehearse`): what rehearsing adds
       to a worker's CPU (it moves work off the run's path, not out of it)
    G  D with the collector off for the child's life (`gc.disable()` right
       after the fork): what the collector costs a one-run life

Prints one JSON object: per case, medians of child CPU (µs), minor faults,
wall time from fork to reaped (µs), and the parent's CPU per fork (µs).
"""

from __future__ import annotations

import gc
import json
import os
import resource
import statistics
import sys
import threading
import time
from pathlib import Path


def main() -> None:
    manifest, journals, count = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    from staal.worker.processes.zygote import preload

    configs, prepared, _reuse = preload(manifest)
    gc.collect()
    gc.freeze()
    import zmq

    from staal.runtime.ids import new_run_id
    from staal.worker.confinement import confine
    from staal.worker.confinement.limits import cpu_backstop
    from staal.worker.runs.run import RunRequest, note_violation, start, uses_ffi

    config = configs["noop"]
    loaded = prepared["noop"]
    inputs = journals / "inputs.json"
    with confine.broker_section():
        fd = os.open(inputs, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, b'{"x": 7}')
        os.close(fd)
    endpoint = f"ipc://{journals / 'nobody-listens'}"

    def zmq_socket() -> None:
        context = zmq.Context()
        socket = context.socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(endpoint)
        socket.close()
        context.term()

    def channel_thread() -> None:
        thread = threading.Thread(target=lambda: None)
        thread.start()
        thread.join()

    def bare_thread() -> None:
        import _thread

        done = _thread.allocate_lock()
        done.acquire()
        _thread.start_new_thread(done.release, ())
        done.acquire()

    def one_run() -> None:
        confine.narrow_tripwire(uses_ffi(config), note_violation)
        cpu_backstop(config.limits.cpu_ms / 1000)
        with confine.broker_section():
            arguments = json.loads(inputs.read_bytes())
        outcome = start(RunRequest(config=config, arguments=arguments,
                                   journal=journals / f"{new_run_id()}.journal",
                                   run_id=None, prepared=loaded))
        assert outcome.outcome == "done", outcome

    def rehearsal() -> None:
        from staal.worker.processes.serve import rehearse

        rehearse(configs, prepared)

    cases = {
        "A": (),
        "B": (zmq_socket,),
        "C": (zmq_socket, channel_thread),
        "D": (one_run,),
        "E": (zmq_socket, channel_thread, one_run),
        "F": (rehearsal, one_run),
        "G": (gc.disable, one_run),
        "H": (zmq_socket, bare_thread),
    }
    status = Path("/proc/self/status").read_text()
    size = {line.split(":")[0]: line.split(":")[1].strip() for line in status.splitlines()
            if line.startswith(("VmRSS", "VmSize"))}
    results: dict[str, object] = {"zygote": size}
    for name, steps in cases.items():
        cpu, faults, walls, parent = [], [], [], []
        for _ in range(count):
            before = resource.getrusage(resource.RUSAGE_SELF)
            t0 = time.perf_counter()
            with confine.broker_section():
                pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    for step in steps:
                        step()
                except BaseException as exc:  # noqa: BLE001  (reported as a failed case)
                    os.write(2, f"case {name}: {exc!r}\n".encode())
                    code = 1
                finally:
                    os._exit(code)
            after = resource.getrusage(resource.RUSAGE_SELF)
            _, status_code, usage = os.wait4(pid, 0)
            walls.append(time.perf_counter() - t0)
            if status_code != 0:
                raise SystemExit(f"case {name} failed")
            cpu.append(usage.ru_utime + usage.ru_stime)
            faults.append(usage.ru_minflt)
            parent.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        results[name] = {
            "child_cpu_us": statistics.median(cpu) * 1e6,
            "child_cpu_mean_us": statistics.fmean(cpu) * 1e6,
            "minor_faults": statistics.median(faults),
            "wall_us": statistics.median(walls) * 1e6,
            "parent_cpu_us": statistics.fmean(parent) * 1e6,
        }
    print(json.dumps(results))


if __name__ == "__main__":
    main()
