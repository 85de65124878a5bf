"""`staal`: the run engine's command line."""

from __future__ import annotations

import typer

import staal

app = typer.Typer(
    name="staal",
    help="Run staal programs: durable, bounded, journaled runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Run staal programs: durable, bounded, journaled runs."""


@app.command()
def version() -> None:
    """Print the runtime version that journals are tied to."""
    print(f"staal {staal.__version__}")


def main() -> None:
    app()
