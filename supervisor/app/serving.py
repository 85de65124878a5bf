"""`staal-supervisor serve`, without the command-line library: an MCP
client starts this command and waits for each start, so it skips typer's
imports (about a tenth of a second) and starts the zygote as soon as the
manifest is read, overlapping its start-up with the supervisor's."""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from staal.errors import ManifestError
from staal.manifest.check import load_manifest
from staal.manifest.model import Manifest

if TYPE_CHECKING:
    from staal.supervisor.telemetry.log import Log
    from staal.supervisor.workers.zygote import Spawned

EXIT_MANIFEST = 2
EXIT_INTERRUPTED = 130  # a shell's code for a command ended by SIGINT


@dataclass(frozen=True)
class ServeOption:
    """One of `serve`'s options, declared once: the fast path's parser here
    and typer's `serve` command (cli.py, for help and errors) both read it."""

    flag: str
    default: str | bool | None
    help: str

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")


MANIFEST_HELP = "The manifest JSON file."
SERVE_OPTIONS = {option.dest: option for option in (
    ServeOption("--log-format", "json", "json (one object per line) or text."),
    ServeOption("--http", None,
                "HOST:PORT: serve Streamable HTTP at http://HOST:PORT/mcp instead of stdio."),
    ServeOption("--insecure-no-auth", False,
                "With --http on a non-loopback address: serve without authentication."),
)}


def read_manifest(manifest: Path, log: Log | None = None) -> Manifest | None:
    """The manifest, or None after reporting every problem in it. Problems
    and warnings go to `log` (the server's structured log) when given, else
    to stderr as text."""
    try:
        loaded = load_manifest(manifest)
    except ManifestError as exc:
        if log is not None:
            log("manifest_refused", level="error", manifest=str(Path(manifest).resolve()),
                problems=list(exc.problems))
        else:
            print(exc.message, file=sys.stderr)
        return None
    for warning in loaded.warnings():
        if log is not None:
            log("manifest_warning", level="warning", message=warning)
        else:
            print(f"warning: {warning}", file=sys.stderr)
    return loaded


def run_serve(manifest: Path, log_format: str, http: str | None = None,
              insecure_no_auth: bool = False) -> int:
    """`serve`: over stdio, or over Streamable HTTP at `http` (HOST:PORT)."""
    from staal.supervisor.telemetry.log import StderrLog
    from staal.supervisor.transport.stdio import protect_descriptors

    # Before anything else, and before the manifest is read (seed 000 section 3).
    stdio = protect_descriptors()
    if log_format not in ("json", "text"):
        print(f"--log-format: json or text, not {log_format!r}", file=sys.stderr)
        return 2
    log = StderrLog(log_format)
    loaded = read_manifest(manifest, log)
    if loaded is None:
        return EXIT_MANIFEST
    if http is not None:
        return _serve_http(loaded, http, insecure_no_auth, log)
    from staal.supervisor.workers.zygote import spawn_early

    early = spawn_early(loaded)  # its start-up overlaps the rest of ours
    import asyncio

    import uvloop

    from staal.supervisor.app.server import serve
    from staal.supervisor.transport.stdio_serving import over_stdio

    # uvloop, as over HTTP: the loop turns several times per call (the
    # request, each worker message, each thread's result), and asyncio's
    # own loop, in Python, was about a fifth of the supervisor's CPU per call.
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        try:
            return runner.run(serve(loaded, over_stdio(stdio), log, early))
        except KeyboardInterrupt:
            return interrupted(log, early)


def _serve_http(loaded: Manifest, http: str, insecure_no_auth: bool, log: Log) -> int:
    """Listen first (a port taken or an address refused stops here; the
    listening URL is then known, the resource a token's audience names),
    then start as stdio does, in a uvloop event loop."""
    import asyncio

    import uvloop

    from staal.errors import StaalError
    from staal.supervisor.app.server import serve
    from staal.supervisor.auth.guard import authenticator_for
    from staal.supervisor.auth.resource import with_resource
    from staal.supervisor.transport.http_serving import Address, HttpRefused, listen, over_http
    from staal.supervisor.transport.not_ready import answering_not_ready
    from staal.supervisor.workers.zygote import spawn_early

    try:
        address = Address.parse(http)
        if not address.loopback and not insecure_no_auth and loaded.auth is None:
            raise HttpRefused(
                f"--http {http}: listening beyond this machine needs authentication, which this "
                "manifest does not configure (its auth section); listen on a loopback address "
                "(127.0.0.1), or pass --insecure-no-auth to serve anyone who can reach it")
        sock = listen(address)
    except StaalError as exc:
        log("startup_failed", level="error", kind=exc.kind, message=exc.message)
        return 2
    try:  # the URL clients use is known once it listens: the resource tokens are for
        loaded = with_resource(loaded, sock.getsockname()[:2])
        authenticator = None if loaded.auth is None else authenticator_for(loaded, log)
    except StaalError as exc:
        sock.close()
        log("startup_failed", level="error", kind=exc.kind, message=exc.message)
        return 2
    early = spawn_early(loaded)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        try:
            return runner.run(serve(loaded, over_http(sock, authenticator), log, early,
                                    while_starting=lambda: answering_not_ready(sock)))
        except StaalError as exc:  # an authenticator that could not start: a verifier that did not load
            log("startup_failed", level="error", kind=exc.kind, message=exc.message)
            return 2
        except KeyboardInterrupt:
            return interrupted(log, early)


def interrupted(log: Log, early: Spawned) -> int:
    """Ctrl-C before the server was serving: asyncio's own SIGINT handling
    (the server's, `terminated`, is installed once it serves) cancelled the
    start. Stopped at once, as SIGTERM stops it then; the zygote dies with
    this process (it asked the kernel to)."""
    log("interrupted", level="warning",
        message="SIGINT before the server was serving: it stopped without serving anything")
    shutil.rmtree(early.runtime_dir, ignore_errors=True)
    return EXIT_INTERRUPTED


def serve_from_argv(argv: list[str]) -> int | None:
    """The exit code of `serve ...`, or None for any other command line
    (which typer then handles, help and errors included)."""
    import argparse

    if argv[:1] != ["serve"] or {"-h", "--help"} & set(argv):
        return None
    parser = argparse.ArgumentParser(prog="staal-supervisor serve", add_help=False)
    parser.add_argument("manifest", type=Path)
    for option in SERVE_OPTIONS.values():
        if isinstance(option.default, bool):
            parser.add_argument(option.flag, action="store_true")
        else:
            parser.add_argument(option.flag, default=option.default)
    try:
        args = parser.parse_args(argv[1:])
    except SystemExit:
        return None  # let typer explain what is wrong
    return run_serve(args.manifest, **{name: getattr(args, name) for name in SERVE_OPTIONS})
