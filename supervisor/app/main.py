"""The `staal-supervisor` console script: a plain `serve MANIFEST` is served
without the command-line library (serving.py's fast path); anything else is
typer's (cli.py), imported only then."""

from __future__ import annotations

import sys

from staal.supervisor.app.serving import serve_from_argv


def main() -> None:
    """The `staal-supervisor` console script."""
    from staal.runtime.private_memory import forget_first_environment, keep_memory_private

    keep_memory_private()  # it holds every tool's secrets: in its environment since its exec
    forget_first_environment()  # and /proc/<pid>/environ would show them, dumpable or not
    code = serve_from_argv(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from staal.supervisor.app.cli import app

    app()


if __name__ == "__main__":
    main()
