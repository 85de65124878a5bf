"""A worker holds only its own tool's secrets (issue 11, item 3).

The zygote starts with an environment that holds no secret; each run is
handed, in its `run` message, exactly the secrets its tool's grants name,
for the capability implementations, never in `os.environ`. These tests scan
the memory of real processes under a real server: from outside, the test
reads `/proc/<pid>/mem` (as root, which may read any process) while a
program waits on a FIFO the test holds open; from inside, a program's own
attempt to open `/proc/self/mem` is refused by the tripwire, and one that
gets past the tripwire still cannot open the server's, the zygote's or
another worker's memory (they are not dumpable), run by a server that,
like a process of the staal user, lacks CAP_SYS_PTRACE.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from staal.manifest.check import load_manifest
from staal.records.messages import Run, pack, unpack
from staal.supervisor.workers.zygote import worker_environment
from tests.helpers.servers import RawServer, Site, stripe_refund_grant

# Reading another process's memory needs the same user and a dumpable target,
# or CAP_SYS_PTRACE; workers and the zygote are not dumpable, so only root can.
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="reads other processes' memory as root")

# A grant-less program, and one granted a payment capability, each waiting
# until the test closes its end of the FIFO `gate`.
HOLDS = """
def main(gate: str) -> dict:
    print("holding")
    with open(gate, "rb") as held:
        held.read()
    return {"held": True}
"""

PAYS_AND_HOLDS = """
from staal.caps import StripeRefund

def main(gate: str, pay: StripeRefund) -> dict:
    print("holding")
    with open(gate, "rb") as held:
        held.read()
    return {"held": True}
"""

REPORTS = """
from staal.caps import PostgresRead

def main(db: PostgresRead) -> dict:
    return {}
"""

ASKS = """
from staal.caps import Model

def main(model: Model) -> dict:
    return {}
"""

READS_ITS_MEMORY = """
def main() -> dict:
    with open("/proc/self/maps") as maps:
        start = int(maps.readline().split("-")[0], 16)
    got = None
    try:
        with open("/proc/self/mem", "rb") as memory:
            memory.seek(start)
            got = len(memory.read(16))
    except BaseException as refused:
        print("refused:", type(refused).__name__)
    print("read", got)
    return {"read": got}
"""


# A program that gets past the tripwire on purpose (it is not a sandbox) and
# tries to open the memory of each process it is given, and its own.
PEEKS = """
import os
from staal.worker.confinement import confine
def main(others: list[int]) -> dict:
    opened = {}
    with confine.broker_section():
        for pid in [*others, os.getpid()]:
            try:
                with open(f"/proc/{pid}/mem", "rb"):
                    opened[str(pid)] = "opened"
            except PermissionError:
                opened[str(pid)] = "denied"
    return opened
"""

CAP_SYS_PTRACE = 19
PR_CAPBSET_DROP = 24


def without_ptrace_capability() -> None:
    """In the server's child before its exec: drop CAP_SYS_PTRACE from the
    bounding set, so the server and every process it starts run as root
    without it, as a process of the same user that may not trace others."""
    import ctypes

    if ctypes.CDLL(None, use_errno=True).prctl(PR_CAPBSET_DROP, CAP_SYS_PTRACE, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP, CAP_SYS_PTRACE)")


def every_secret() -> dict[str, str]:
    """One distinctive value for each variable the manifest below names."""
    return {
        "STRIPE_SECRET_KEY": "sk_test_" + secrets.token_hex(16),
        "REPORTS_DSN": f"postgresql://reports:{secrets.token_hex(16)}@127.0.0.1:9/reports",
        "MODEL_API_KEY": "sk-ant-" + secrets.token_hex(16),
    }


def four_tools(site: Site) -> None:
    """A grant-less tool, a payment tool (STRIPE_SECRET_KEY), a PostgreSQL
    tool (REPORTS_DSN) and a model tool (the model's MODEL_API_KEY)."""
    for name, source in (("holds.py", HOLDS), ("pays.py", PAYS_AND_HOLDS),
                         ("reports.py", REPORTS), ("asks.py", ASKS)):
        site.program(name, source)
    site.write(
        [
            {"name": "blind", "program": "holds.py"},
            {"name": "pay", "program": "pays.py",
             "grants": {"pay": stripe_refund_grant("http://127.0.0.1:9")}},
            {"name": "reports", "program": "reports.py",
             "grants": {"db": {"cap": "db.postgres.read", "dsn": {"env": "REPORTS_DSN"}}}},
            {"name": "ask", "program": "asks.py", "grants": {"model": {"cap": "model.complete"}}},
        ],
    )
    manifest = site.manifest.read_text()
    model = ('"model": {"provider": "anthropic", "model": "claude-test", '
             '"api_key": {"env": "MODEL_API_KEY"}, "timeout_ms": 10000, "retries": 0}, ')
    site.manifest.write_text(manifest.replace('"tools":', model + '"tools":', 1))


def secrets_in_memory(pid: int, values: dict[str, str]) -> set[str]:
    """The names of `values` whose value appears anywhere in the readable
    memory of process `pid`."""
    needles = {name: value.encode() for name, value in values.items()}
    found: set[str] = set()
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", buffering=0) as memory:
        for line in maps:
            addresses, permissions = line.split()[:2]
            if not permissions.startswith("r"):
                continue
            start, end = (int(a, 16) for a in addresses.split("-"))
            try:
                memory.seek(start)
                data = memory.read(end - start)
            except (OSError, OverflowError):
                continue  # [vvar], [vsyscall]: not memory the process holds
            found.update(name for name, needle in needles.items() if needle in data)
    return found


@contextmanager
def held_gate(path: Path) -> Iterator[None]:
    """A FIFO held open for writing (O_RDWR never blocks): a program that
    reads it waits until the test closes it, on leaving the block."""
    os.mkfifo(path)
    fd = os.open(path, os.O_RDWR)
    try:
        yield
    finally:
        os.close(fd)


@needs_root
def test_a_worker_holds_only_the_secrets_its_tools_grants_name_and_the_zygote_none(tmp_path):
    site = Site(tmp_path)
    four_tools(site)
    values = every_secret()
    with RawServer(site, env=values) as server, held_gate(tmp_path / "blind.gate"), \
            held_gate(tmp_path / "pay.gate"):
        server.initialize()
        blind = server.request("tools/call", {"name": "blind",
                                              "arguments": {"gate": str(tmp_path / "blind.gate")}})
        pay = server.request("tools/call", {"name": "pay",
                                            "arguments": {"gate": str(tmp_path / "pay.gate")}})
        # Both programs are running, each waiting on its gate.
        for tool in ("blind", "pay"):
            server.stderr.wait_event("print", tool=tool, text="holding")
        blind_pid = server.stderr.wait_event("run_started", tool="blind")["pid"]
        pay_pid = server.stderr.wait_event("run_started", tool="pay")["pid"]
        zygote = psutil.Process(blind_pid).ppid()
        assert psutil.Process(pay_pid).ppid() == zygote
        assert "staal.worker.processes.zygote" in psutil.Process(zygote).cmdline()

        # The scan finds a secret where one is: the payment worker holds its key.
        assert secrets_in_memory(pay_pid, values) == {"STRIPE_SECRET_KEY"}
        assert secrets_in_memory(blind_pid, values) == set()
        assert secrets_in_memory(zygote, values) == set()
    # Released, both runs end normally.
    for request in (blind, pay):
        answer = server.answer(request)["result"]
        assert answer["isError"] is False and answer["structuredContent"] == {"result": {"held": True}}


def test_a_program_that_opens_its_own_memory_fails_as_capability_having_read_nothing(tmp_path):
    site = Site(tmp_path)
    site.program("reads.py", READS_ITS_MEMORY)
    site.write([{"name": "reads", "program": "reads.py"}])
    with RawServer(site) as server:
        server.initialize()
        result = server.call_tool("reads", {})
        run = server.stderr.wait_event("run_started", tool="reads")["run"]
    assert result["isError"] is True
    assert result["content"][0]["text"].startswith(
        "a tool may not read a process's memory (open of '/proc/self/mem')")
    # The program caught the refusal: nothing was read, and the run failed anyway.
    printed = [r["text"] for r in site.journal_records("reads", run) if r["type"] == "print"]
    assert printed == ["refused: CapabilityRefused", "read None"]


def test_the_zygote_gets_no_secret_and_each_run_exactly_those_its_tools_grants_name(
        tmp_path, monkeypatch):
    from staal.supervisor.workers.zygote import run_secrets, secret_names

    site = Site(tmp_path)
    four_tools(site)
    values = every_secret()
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    manifest = load_manifest(site.manifest)
    environment = worker_environment(manifest)
    assert environment["PATH"] == "/usr/bin:/bin"
    assert not set(values) & set(environment)
    assert not set(values.values()) & set(environment.values())
    names = secret_names(manifest)
    assert names == {"blind": (), "pay": ("STRIPE_SECRET_KEY",), "reports": ("REPORTS_DSN",),
                     "ask": ("MODEL_API_KEY",)}
    assert run_secrets(names["pay"]) == {"STRIPE_SECRET_KEY": values["STRIPE_SECRET_KEY"]}
    assert run_secrets(names["blind"]) == {}
    monkeypatch.delenv("REPORTS_DSN")
    assert run_secrets(names["reports"]) == {}  # not set: the capability will say so


def test_a_run_message_carries_its_secrets_to_the_worker_and_never_shows_them():
    key = "sk_test_" + secrets.token_hex(16)
    message = Run(run="ab" * 16, tool="pay", journal="/j/pay/ab/x.journal",
                  inputs="/j/pay/ab/x.inputs.json", secrets={"STRIPE_SECRET_KEY": key})
    assert unpack(pack(message)) == message
    assert key not in repr(message) and key not in str(message)
    assert "STRIPE_SECRET_KEY" not in repr(message)


@needs_root
def test_a_program_past_the_tripwire_cannot_open_the_servers_the_zygotes_or_another_workers_memory(
        tmp_path):
    site = Site(tmp_path)
    site.program("pays.py", PAYS_AND_HOLDS)
    site.program("peeks.py", PEEKS)
    site.write([
        {"name": "pay", "program": "pays.py",
         "grants": {"pay": stripe_refund_grant("http://127.0.0.1:9")}},
        {"name": "peek", "program": "peeks.py"},
    ])
    key = {"STRIPE_SECRET_KEY": "sk_test_" + secrets.token_hex(16)}
    with RawServer(site, env=key, preexec=without_ptrace_capability) as server, \
            held_gate(tmp_path / "pay.gate"):
        server.initialize()
        pay = server.request("tools/call", {"name": "pay",
                                            "arguments": {"gate": str(tmp_path / "pay.gate")}})
        server.stderr.wait_event("print", tool="pay", text="holding")
        worker = server.stderr.wait_event("run_started", tool="pay")["pid"]
        zygote = psutil.Process(worker).ppid()
        others = [server.process.pid, zygote, worker]
        peeked = server.call_tool("peek", {"others": others})
    assert peeked["isError"] is False, peeked
    opened = peeked["structuredContent"]["result"]
    peeker = next(pid for pid in opened if int(pid) not in others)
    assert opened.pop(peeker) == "opened"  # its own: the way in works where it may
    assert opened == {str(pid): "denied" for pid in others}
    assert server.answer(pay)["result"]["isError"] is False


@needs_root
def test_a_warm_worker_serves_only_its_own_tools_runs_and_holds_only_their_secrets(tmp_path):
    site = Site(tmp_path)
    four_tools(site)
    manifest = site.manifest.read_text()
    site.manifest.write_text(manifest.replace('"server": {', '"server": {"runs_per_worker": 100, ', 1))
    gate = tmp_path / "open.gate"
    gate.write_bytes(b"")  # a program reading it goes on at once
    values = every_secret()
    with RawServer(site, env=values) as server:
        server.initialize()
        for tool in ("pay", "blind", "blind", "pay", "blind"):
            answer = server.call_tool(tool, {"gate": str(gate)})
            assert answer["isError"] is False, answer
        ran_in: dict[str, set[int]] = {"pay": set(), "blind": set()}
        for started in server.stderr.events("run_started"):
            ran_in[started["tool"]].add(int(started["pid"]))
        assert ran_in["pay"].isdisjoint(ran_in["blind"])
        assert len(ran_in["pay"]) == len(ran_in["blind"]) == 1  # each served all its tool's runs
        # Between runs, still alive: each holds its own grant set's secrets only.
        (pay_pid,), (blind_pid,) = ran_in["pay"], ran_in["blind"]
        assert secrets_in_memory(pay_pid, values) == {"STRIPE_SECRET_KEY"}
        assert secrets_in_memory(blind_pid, values) == set()
        server.close_stdin()
        assert server.wait_exit() == 0
