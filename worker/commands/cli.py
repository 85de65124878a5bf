"""`staal`: the run engine's command line.

Exit codes: 0 done (or ok), 1 failed, 2 an error in what was asked (a
config, inputs, or a journal that cannot be resumed), 3 stopped: waiting for
an operator.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer

import staal
from staal.errors import LogDamaged, LogExists, ManifestError, StaalError

if TYPE_CHECKING:
    from staal.worker.runs.actions import RunOutcome

EXIT = {"done": 0, "failed": 1, "error": 2, "stopped": 3}

app = typer.Typer(
    name="staal",
    help="Run staal programs: durable, bounded, journaled runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
journal_app = typer.Typer(help="Read journals.", no_args_is_help=True)
app.add_typer(journal_app, name="journal")


def _version(asked: bool) -> None:
    if asked:
        print(f"staal {staal.__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                       help="Print the runtime version and exit.")) -> None:
    """Run staal programs: durable, bounded, journaled runs."""


@app.command()
def version() -> None:
    """Print the runtime version that journals are tied to."""
    print(f"staal {staal.__version__}")


def _fail(message: str, code: int = 2) -> NoReturn:
    print(message, file=sys.stderr)
    raise typer.Exit(code)


def _grants(text: str | None) -> Any:
    from staal.manifest.grants import GrantReader
    from staal.manifest.values import ValueReader

    if text is None:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        _fail(f"--grants: not valid JSON: {exc}")
    values = ValueReader(base_dir=Path.cwd())
    grants = GrantReader(values).grants(data, "grants")
    if values.problems:
        _fail("\n".join(values.problems))
    return grants


def _inspect(program: Path, entry: str, grants: Any = None) -> Any:
    from staal.worker.confinement import confine
    from staal.worker.runs.program import inspect_program

    if not program.is_file():
        _fail(f"{program}: no such file")
    ffi = bool(grants) and any(g.cap == "ffi.c" for gr in grants.values() for g in gr.walk())
    confine.install_tripwire(allow_ffi=ffi, on_violation=lambda message: None)
    return inspect_program(program.resolve(), entry, grants)


@app.command()
def check(
    program: Path = typer.Argument(..., help="The program's Python file."),
    entry: str = typer.Option("main", help="The entry function."),
    grants: str | None = typer.Option(None, help="Grants as JSON, as in a manifest tool."),
) -> None:
    """Check a program: report every problem at once."""
    info = _inspect(program, entry, _grants(grants))
    if info.problems:
        print(f"{program}: {len(info.problems)} problem{'s' if len(info.problems) != 1 else ''}",
              file=sys.stderr)
        for problem in info.problems:
            print(f"  {problem}", file=sys.stderr)
        raise typer.Exit(2)
    inputs = ", ".join(f"{i['name']} ({i['type']['type']})" for i in info.inputs["inputs"])
    caps = ", ".join(f"{n} ({c})" for n, c in info.capabilities.items())
    print(f"{program}: ok: inputs {inputs or 'none'}; capabilities {caps or 'none'}")


@app.command()
def schema(
    program: Path = typer.Argument(..., help="The program's Python file."),
    entry: str = typer.Option("main", help="The entry function."),
) -> None:
    """Print the JSON Schema of the program's inputs."""
    from staal.inputs.schema import to_json_schema

    info = _inspect(program, entry)
    if info.problems:
        _fail("\n".join(info.problems))
    print(json.dumps(to_json_schema(info.inputs), indent=2, sort_keys=True))


@app.command()
def config(
    program: Path = typer.Argument(..., help="The program's Python file."),
    entry: str = typer.Option("main", help="The entry function."),
) -> None:
    """Print a run config for the program, with placeholder grants and inputs."""
    from staal.inputs.schema import placeholder_arguments
    from staal.worker.commands.placeholders import placeholder_config

    info = _inspect(program, entry)
    if info.problems:
        _fail("\n".join(info.problems))
    data = placeholder_config(str(program), entry, info.capabilities,
                              placeholder_arguments(info.inputs))
    print(json.dumps(data, indent=2))


def _protect_stdout() -> int:
    """Keep the real stdout for the outcome; anything else written to fd 1
    (a C library, a stray print) lands on stderr."""
    out = os.dup(1)
    os.dup2(2, 1)
    return out


def _emit(out: int, outcome: RunOutcome) -> NoReturn:
    """The outcome as JSON on the real standard output; where the program
    failed, as a traceback of its frames, on standard error."""
    from staal.records.fsio import write_all
    from staal.records.outcomes import format_frames

    if outcome.failure is not None and outcome.failure.traceback:
        print("\n".join(format_frames(outcome.failure.traceback)), file=sys.stderr)
    write_all(out, (json.dumps(outcome.to_json(), ensure_ascii=False) + "\n").encode())
    raise typer.Exit(EXIT[outcome.outcome])


@app.command()
def run(
    config_path: Path = typer.Argument(..., metavar="CONFIG", help="The run config JSON file."),
    journal: Path = typer.Option(..., help="Where to write the run's journal (a new file)."),
) -> None:
    """Run a program under a run config; print the outcome as JSON."""
    from staal.records.runconfig import load_run_config
    from staal.worker.runs.run import RunRequest, error, start

    out = _protect_stdout()
    try:
        config_obj, inputs = load_run_config(config_path)
    except ManifestError as exc:
        _emit(out, error("config", exc.message))
    if journal.exists():
        _emit(out, error("config", f"{journal} exists; a new run needs a new journal "
                                   "(staal resume continues one)"))
    try:
        outcome = start(RunRequest(config=config_obj, arguments=inputs, journal=journal))
    except LogExists as exc:
        outcome = error("config", exc.message)
    _emit(out, outcome)


@app.command()
def resume(
    journal: Path = typer.Option(..., help="The journal of the run to resume."),
    config_path: Path | None = typer.Option(None, "--config",
                                               help="The run config (default: the one the run began with)."),
) -> None:
    """Resume a run from its journal, replaying what it already did."""
    from staal.journal.reader import read_journal
    from staal.records.runconfig import load_run_config
    from staal.worker.runs.run import ResumeRefused, RunRequest, ended_outcome, error
    from staal.worker.runs.run import resume as resume_run

    out = _protect_stdout()
    try:
        state = read_journal(journal)
    except (LogDamaged, FileNotFoundError) as exc:
        _emit(out, error("config", str(exc)))
    if state.end is not None:
        _emit(out, ended_outcome(state))
    source = config_path or (Path(state.header.config) if state.header.config else None)
    if source is None:
        _emit(out, error("config", f"{journal}: the journal names no run config; give --config"))
    try:
        config_obj, inputs = load_run_config(source)
        outcome = resume_run(RunRequest(config=config_obj, arguments=inputs, journal=journal), state)
    except (ManifestError, ResumeRefused) as exc:
        outcome = error("config", exc.message)
    _emit(out, outcome)


@app.command()
def resolve(
    journal: Path = typer.Option(..., help="The journal of the stopped run."),
    op: int = typer.Option(..., help="The op in doubt."),
    happened: str = typer.Option(..., help="yes or no: whether the action happened."),
    result: str | None = typer.Option(None, help="With --happened yes: the action's result as JSON."),
) -> None:
    """Record an operator's answer for an op in doubt; a later resume continues from it."""
    from staal.worker.commands.resolve import ResolveRefused, resolve_op

    if happened not in ("yes", "no"):
        _fail("--happened: yes or no")
    try:
        message = resolve_op(journal, op, happened == "yes", result)
    except (ResolveRefused, LogDamaged, FileNotFoundError) as exc:
        _fail(str(exc))
    print(message)


@journal_app.command("show")
def journal_show(path: Path = typer.Argument(..., help="A journal file.")) -> None:
    """Print a journal for a person: its whole history, in order."""
    from staal.worker.commands.journal_show import show

    try:
        print(show(path))
    except StaalError as exc:
        _fail(str(exc))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
