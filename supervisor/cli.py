"""`staal-supervisor`: the server's command line.

`check` reads a manifest exactly as `serve` will at start and reports every
problem at once.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import typer

from staal.errors import ManifestError
from staal.manifest import Manifest, load_manifest

EXIT_MANIFEST = 2

app = typer.Typer(
    name="staal-supervisor",
    help="Serve staal programs as MCP tools, and look after their runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Serve staal programs as MCP tools, and look after their runs."""


def load_or_exit(manifest: Path, log: Callable[..., None] | None = None) -> Manifest:
    """The manifest, or every problem in it on stderr and a non-zero exit
    before anything else happens. Its warnings go to `log` (the server's
    structured log) when given, else to stderr as text."""
    try:
        loaded = load_manifest(manifest)
    except ManifestError as exc:
        if log is not None:
            log("manifest_refused", level="error", manifest=str(manifest),
                problems=list(exc.problems))
        else:
            print(exc.message, file=sys.stderr)
        raise typer.Exit(EXIT_MANIFEST) from None
    for warning in loaded.warnings():
        if log is not None:
            log("manifest_warning", level="warning", message=warning)
        else:
            print(f"warning: {warning}", file=sys.stderr)
    return loaded


@app.command()
def check(manifest: Path = typer.Argument(..., help="The manifest JSON file.")) -> None:
    """Check a manifest: report every problem with its key path."""
    loaded = load_or_exit(manifest)
    names = ", ".join(tool.name for tool in loaded.tools)
    count = len(loaded.tools)
    print(f"{loaded.path}: valid: {count} tool{'s' if count != 1 else ''} ({names})")


@app.command()
def serve(
    manifest: Path = typer.Argument(..., help="The manifest JSON file."),
    log_format: str = typer.Option("json", help="json (one object per line) or text."),
) -> None:
    """Serve the manifest's tools over stdio to one MCP client."""
    import asyncio

    from staal.supervisor.log import Log
    from staal.supervisor.server import serve as run_server
    from staal.supervisor.stdio import protect_descriptors

    # Before anything else, and before the manifest is read (seed 000 section 3).
    stdio = protect_descriptors()
    if log_format not in ("json", "text"):
        print(f"--log-format: json or text, not {log_format!r}", file=sys.stderr)
        raise typer.Exit(2)
    log = Log(log_format)
    loaded = load_or_exit(manifest, log)
    raise typer.Exit(asyncio.run(run_server(loaded, stdio, log)))


@app.command()
def status(
    manifest: Path = typer.Argument(..., help="The manifest JSON file."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON, stable for scripts."),
) -> None:
    """Unfinished runs and quota use, beside a running server (read only)."""
    import json

    from staal.supervisor.status import collect, render

    report = collect(load_or_exit(manifest))
    print(json.dumps(report, indent=2) if as_json else render(report))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
