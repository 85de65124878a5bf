"""docs/operators.md's "Authenticated callers on one machine" (issue 24 item
10): every command of the recipe, run as an operator would. The test starts
the two long-running ones itself, each as the guide says, on a free port
(the authorization server by its script and port option, `serve` on its
manifest), and runs the others with the guide's URLs pointed at them, each
printing what the guide shows."""

from __future__ import annotations

import contextlib
import json
import re
import select
import shlex
import subprocess
from collections.abc import Iterator

from tests.helpers.authorization import SCRIPT, AuthorizationServer
from tests.helpers.http_servers import HttpServer
from tests.helpers.pg_cluster import free_port
from tests.helpers.readme import ROOT, blocks, copy_examples, normalized, run_steps, shell_env, steps
from tests.helpers.servers import WAIT, Site

TITLE = "### Authenticated callers on one machine"
ISSUER = "http://localhost:8080"
SERVED = "http://127.0.0.1:8000"
SERVE = "staal-supervisor serve examples/manifest.auth.json --http 127.0.0.1:8000"


def recipe() -> str:
    """The guide's section, up to its next heading."""
    guide = (ROOT / "docs" / "operators.md").read_text()
    start = guide.index(TITLE + "\n")
    end = re.compile(r"^#{1,3} ", re.MULTILINE).search(guide, start + len(TITLE))
    return guide[start:end.start() if end else len(guide)]


@contextlib.contextmanager
def started_as_written(command: str, node: str, port: int) -> Iterator[str]:
    """The guide's authorization server command, `node` the pinned Node 22
    and its port `port`, from the checkout; its issuer, once it listens."""
    words = shlex.split(command.replace("--port 8080", f"--port {port}"))
    assert words[0] == "node"
    process = subprocess.Popen([node, *words[1:]], cwd=ROOT, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([process.stdout], [], [], WAIT)
        line = process.stdout.readline() if ready else ""
        assert line, f"the authorization server said nothing: {process.poll()}"
        yield json.loads(line)["issuer"]
    finally:
        process.stdin.close()  # its cue to stop, as when a terminal's input ends
        try:
            process.wait(WAIT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(WAIT)
        process.stdout.close()
        process.stderr.close()


def test_the_guides_local_recipe_for_authenticated_callers_runs_and_prints_what_it_shows(
        tmp_path, authorization: AuthorizationServer):
    found = steps(blocks(recipe()))
    (authorization_step, serve_step, *rest) = found
    assert shlex.split(authorization_step.command) == [
        "node", str(SCRIPT.relative_to(ROOT)), "--port", "8080"]
    assert serve_step.command == SERVE
    root = tmp_path / "staal"
    root.mkdir()
    examples = copy_examples(root, "http://127.0.0.1:9")  # no payment is made: no fake needed
    # The guide's `node` is the pinned Node 22, the one the tests' own
    # authorization server runs on.
    node = authorization.process.args[0]
    port = free_port()
    with started_as_written(authorization_step.command, node, port) as issuer:
        assert issuer == f"http://localhost:{port}"  # as the guide says it prints, at its port
        manifest = examples / "manifest.auth.json"
        manifest.write_text(manifest.read_text().replace(ISSUER, issuer))
        site = Site(examples)
        site.manifest = manifest
        with HttpServer(site) as server:
            here = {SERVED: server.base, ISSUER: issuer}

            def local(command: str) -> str:
                for guide_url, url in here.items():
                    command = command.replace(guide_url, url)
                return command

            env = shell_env({"HOME": str(tmp_path), "TMPDIR": str(tmp_path)})
            ran = run_steps(rest, local, root, env, tmp_path / "steps")
            runs = server.stderr.events("run_ended")
    for r in ran:
        where = f"guide step:\n{r.step.command}\nprinted:\n{r.out}\n{r.err}"
        assert r.code == 0, where
        out = r.out
        for guide_url, url in here.items():
            out = out.replace(url, guide_url)
        assert normalized(out) == normalized(r.step.shown), where
    # The request without a token ran nothing; the call with one ran the tool once.
    assert [(e["tool"], e["outcome"]) for e in runs] == [("lookup_order", "done")]
