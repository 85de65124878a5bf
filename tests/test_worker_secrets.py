"""What a worker's process can reach of secrets (issue 11, item 3): here,
a program's own attempt to open `/proc/self/mem` is refused by the tripwire.
"""

from __future__ import annotations

from tests.servers import RawServer, Site

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
