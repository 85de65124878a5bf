"""README.md's "Serving over HTTP": every command in it, run as an operator
would, against `serve examples/manifest.json --http` (which the test starts
itself, on a free port, where the README's operator starts it in a
terminal of its own), each printing what the README shows."""

from __future__ import annotations

import os
import re
import shlex

from tests.clients.test_client_typescript import NODE_MODULES, on_node22, require_node_modules
from tests.helpers.http_servers import HttpServer
from tests.helpers.readme import blocks, copy_examples, normalized, run_steps, section, shell_env, steps
from tests.helpers.servers import Site

TITLE = "Serving over HTTP"
README_URL = "http://127.0.0.1:8080"
SERVE = re.compile(r"(?:(\w+)=(\S+) )?staal-supervisor serve examples/manifest\.json "
                   r"--http 127\.0\.0\.1:8080")
INSPECTOR_NPX = re.compile(r"npx -y @modelcontextprotocol/inspector@(\S+)")


def test_every_command_of_the_http_section_runs_and_prints_what_it_shows(tmp_path):
    require_node_modules()
    found = steps(blocks(section(TITLE)))
    (serve,) = [s for s in found if SERVE.fullmatch(s.command)]
    variable, value = SERVE.fullmatch(serve.command).groups()
    root = tmp_path / "staal"
    root.mkdir()
    copy_examples(root, "http://127.0.0.1:9")  # no refund is made: the fake is not needed
    site = Site(root / "examples")
    with HttpServer(site, env={variable: value}) as server:
        base = server.base

        def local(command: str) -> str:
            inspector = INSPECTOR_NPX.search(command)
            if inspector:
                command = command.replace(inspector.group(0),
                                          shlex.quote(str(NODE_MODULES / ".bin" / "mcp-inspector")))
            return command.replace(README_URL, base)

        env = shell_env({"HOME": str(tmp_path), "TMPDIR": str(tmp_path)})
        env["PATH"] = on_node22(os.pathsep.join([str(NODE_MODULES / ".bin"), env["PATH"]]))
        ran = run_steps([s for s in found if s is not serve], local, root, env,
                        tmp_path / "steps")
        runs = server.stderr.events("run_ended")
    for r in ran:
        where = f"README step:\n{r.step.command}\nprinted:\n{r.out}\n{r.err}"
        assert r.code == 0, where
        assert normalized(r.out) == normalized(r.step.shown), where
    # Three lookups, one per mode, each a run of the server's own, done.
    assert [(e["tool"], e["outcome"]) for e in runs] == [("lookup_order", "done")] * 3
