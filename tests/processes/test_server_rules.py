"""Server rules that need a real server process: start-up checks, the
bound on calls in progress, the manifest read once, descriptors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from staal.supervisor.store.ledger import read_ledger
from tests.helpers.serving import server_env, start, tool, write_manifest


def serve_once(manifest) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "serve", str(manifest)],
                          input=b"", capture_output=True, timeout=60, env=server_env(),
                          cwd=manifest.parent, check=False)


def test_once_by_naming_something_that_is_not_an_input_stops_the_server_at_start(tmp_path):
    (tmp_path / "p.py").write_text("def main(order: str) -> dict:\n    return {}\n")
    manifest = write_manifest(tmp_path, [tool("t", "p.py", once={"by": ["customer"]})])
    done = serve_once(manifest)
    assert done.returncode == 2 and done.stdout == b""
    assert b"once.by names customer" in done.stderr


def test_start_up_checks_run_nothing(tmp_path, service):
    (tmp_path / "p.py").write_text(
        f"BASE = {service.base!r}\nfrom staal.caps import HttpGet\n\n"
        "def main(order: str, get: HttpGet) -> dict:\n"
        "    return {'s': get.get(BASE + '/v1/x').status_code}\n")
    grants = {"get": {"cap": "net.http.get", "only": [service.base + "/**"]}}
    manifest = write_manifest(tmp_path, [tool("t", "p.py", grants)])
    done = serve_once(manifest)
    assert done.returncode == 0, done.stderr.decode()
    assert service.seen() == []
    assert read_ledger(tmp_path / "journals" / "server.ledger").runs() == ()


def test_more_than_four_times_the_run_limit_plus_16_calls_in_progress_are_answered_busy(tmp_path):
    (tmp_path / "p.py").write_text("def main(n: int) -> int:\n    return n\n")
    manifest = write_manifest(tmp_path, [tool("t", "p.py")], max_concurrent_runs=1)
    with start(manifest) as served:
        lines = b"".join(
            json.dumps({"jsonrpc": "2.0", "id": 1000 + n, "method": "tools/call",
                        "params": {"name": "t", "arguments": {"n": n}}}).encode() + b"\n"
            for n in range(40))
        # One write: the server reads all 40 calls before any of them can run.
        served.process.stdin.write(lines)
        served.process.stdin.flush()
        answers = [served.answer(1000 + n)["result"] for n in range(40)]
        over = [a for a in answers if "more than 20 calls are in progress" in a["content"][0]["text"]]
        assert len(over) == 20
        assert all(a["isError"] for a in over)
        assert served.close() == 0


def test_the_manifest_is_read_once_at_start(tmp_path):
    (tmp_path / "p.py").write_text("def main(n: int) -> int:\n    return n\n")
    manifest = write_manifest(tmp_path, [tool("t", "p.py")])
    with start(manifest) as served:
        before = served.request("tools/list")["result"]["tools"]
        data = json.loads(manifest.read_text())
        data["tools"][0]["description"] = "Changed while serving."
        data["tools"].append(tool("u", "p.py"))
        manifest.write_text(json.dumps(data))
        assert served.request("tools/list")["result"]["tools"] == before
        assert served.close() == 0


def test_the_servers_descriptor_0_is_dev_null_and_1_is_its_stderr(tmp_path):
    (tmp_path / "p.py").write_text("def main(n: int) -> int:\n    return n\n")
    manifest = write_manifest(tmp_path, [tool("t", "p.py")])
    with start(manifest) as served:
        pid = served.process.pid
        assert os.readlink(f"/proc/{pid}/fd/0") == "/dev/null"
        assert os.readlink(f"/proc/{pid}/fd/1") == os.readlink(f"/proc/{pid}/fd/2")
        # The private protocol descriptors are close-on-exec copies of the pipes.
        fds = {fd: os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        assert sum(1 for target in fds.values() if target.startswith("pipe:")) >= 2
        assert served.call("t", {"n": 3})["structuredContent"] == {"result": 3}
        assert served.close() == 0
