"""`staal-supervisor`: the server's command line.

`check` reads a manifest exactly as `serve` will at start, checks every
tool's program and config in a worker as `serve` does, and reports every
problem at once.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer

from staal.manifest.model import Manifest
from staal.supervisor.app.serving import (
    EXIT_MANIFEST,
    MANIFEST_HELP,
    SERVE_OPTIONS,
    read_manifest,
    run_serve,
)
from staal.supervisor.telemetry.log import Log

app = typer.Typer(
    name="staal-supervisor",
    help="Serve staal programs as MCP tools, and look after their runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(asked: bool) -> None:
    if asked:
        import staal

        print(f"staal-supervisor {staal.__version__} (runtime {staal.RUNTIME})")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                       help="Print the version and exit.")) -> None:
    """Serve staal programs as MCP tools, and look after their runs."""


def load_or_exit(manifest: Path, log: Log | None = None) -> Manifest:
    """The manifest, or every problem in it and a non-zero exit before
    anything else happens."""
    loaded = read_manifest(manifest, log)
    if loaded is None:
        raise typer.Exit(EXIT_MANIFEST)
    return loaded


@app.command()
def check(manifest: Path = typer.Argument(..., help="The manifest JSON file.")) -> None:
    """Check a manifest as serve does at start, programs and configs included
    (in a worker): report every problem."""
    import asyncio

    from staal.manifest.resources import is_hidden_tool
    from staal.supervisor.app.startup import check_manifest

    loaded = load_or_exit(manifest)
    problems = asyncio.run(check_manifest(loaded))
    if problems:
        count = len(problems)
        print(f"{loaded.path}: {count} problem{'s' if count != 1 else ''}", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        raise typer.Exit(EXIT_MANIFEST)
    tools = [tool.name for tool in loaded.tools if not is_hidden_tool(tool.name)]
    count = len(tools)
    line = f"{loaded.path}: valid: {count} tool{'s' if count != 1 else ''} ({', '.join(tools)})"
    if loaded.resources:
        kept = len(loaded.resources)
        line += (f"; {kept} collection{'s' if kept != 1 else ''} "
                 f"({', '.join(r.name for r in loaded.resources)})")
    print(line)


def _serve_option(name: str) -> Any:
    """Typer's declaration of one of serve's options (serving.py declares them)."""
    option = SERVE_OPTIONS[name]
    return typer.Option(option.default, option.flag, help=option.help)


@app.command()
def serve(
    manifest: Path = typer.Argument(..., help=MANIFEST_HELP),
    log_format: str = _serve_option("log_format"),
    http: Optional[str] = _serve_option("http"),  # noqa: UP045 - typer reads the annotation
    insecure_no_auth: bool = _serve_option("insecure_no_auth"),
) -> None:
    """Serve the manifest's tools over stdio to one MCP client, or over
    Streamable HTTP with --http."""
    raise typer.Exit(run_serve(manifest, log_format, http, insecure_no_auth))


@app.command()
def status(
    manifest: Path = typer.Argument(..., help="The manifest JSON file."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON, stable for scripts."),
) -> None:
    """Unfinished runs and quota use, beside a running server (read only)."""
    import json

    from staal.supervisor.store.errors import StoreError
    from staal.supervisor.views.status import collect, render

    try:
        report = collect(load_or_exit(manifest))
    except StoreError as exc:
        print(f"staal-supervisor status: {exc.message}", file=sys.stderr)
        raise typer.Exit(EXIT_MANIFEST) from None
    print(json.dumps(report.to_json(), indent=2) if as_json else render(report))


@app.command()
def resolve(
    manifest: Path = typer.Argument(..., help="The manifest JSON file."),
    run: str = typer.Option(..., help="The waiting run's id."),
    op: int = typer.Option(..., help="The op in doubt."),
    happened: str = typer.Option(..., help="yes or no: whether the action happened."),
    result: Optional[str] = typer.Option(  # noqa: UP045 - typer reads the annotation
        None, help="With --happened yes: the action's result as JSON."),
) -> None:
    """Record an operator's answer for an op in doubt in the shared store
    (server.store postgres), from any machine with the DSN."""
    from staal.errors import LogDamaged
    from staal.supervisor.recovery.resolve import ResolveRefused, resolve_in_store
    from staal.supervisor.store.errors import StoreError

    if happened not in ("yes", "no"):
        print("staal-supervisor resolve: --happened: yes or no", file=sys.stderr)
        raise typer.Exit(EXIT_MANIFEST)
    loaded = load_or_exit(manifest)
    try:
        print(resolve_in_store(loaded.server, run, op, happened == "yes", result))
    except (ResolveRefused, StoreError, LogDamaged) as exc:
        print(f"staal-supervisor resolve: {exc.message}", file=sys.stderr)
        raise typer.Exit(EXIT_MANIFEST) from None


@app.command()
def forget(
    manifest: Path = typer.Argument(..., help="The manifest JSON file."),
    run: str = typer.Option(..., help="The ended run whose once key to release."),
) -> None:
    """Release an ended run's once key, so the next identical call starts a
    new run (after its program is fixed, say); what it spent still counts."""
    from staal.errors import LogDamaged
    from staal.supervisor.recovery.forget import ForgetRefused, forget_run
    from staal.supervisor.store.errors import StoreError

    loaded = load_or_exit(manifest)
    try:
        print(forget_run(loaded.server, run))
    except (ForgetRefused, StoreError, LogDamaged) as exc:
        print(f"staal-supervisor forget: {exc.message}", file=sys.stderr)
        raise typer.Exit(EXIT_MANIFEST) from None


@app.command()
def console(
    manifest: Path = typer.Argument(..., help="The manifest JSON file."),
    listen: str = typer.Option("127.0.0.1:8090", help="HOST:PORT to serve the pages at."),
    allow_remote: bool = typer.Option(
        False, "--allow-remote", help="Allow a --listen address that is not loopback."),
) -> None:
    """A read-only web page of waiting runs, quotas, recent runs and each run's
    timeline, beside a running server."""
    from staal.supervisor.views.console import ListenRefused, parse_listen, serve_console

    loaded = load_or_exit(manifest)
    try:
        host, port = parse_listen(listen, allow_remote)
    except ListenRefused as exc:
        print(f"staal-supervisor console: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_MANIFEST) from None
    raise typer.Exit(serve_console(loaded, host, port))
