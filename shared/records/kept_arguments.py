"""A run's kept arguments (seed 000 section 7, step 6a): the one writer and
the one reader of `<run>.inputs.json`, beside the run's journal.

The supervisor keeps a new run's arguments, durably, before its worker
starts, so a run interrupted before it ended can be resumed with the same
arguments (the journal holds only their SHA-256); the worker reads them
from this file, to run or to resume. On the shared store the arguments are
a row and this file is the worker's copy of it. The file goes when the run
is settled.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from staal.records.fsio import OS_SYNC, Syncer, write_durably


def file_name(run: str) -> str:
    return f"{run}.inputs.json"


def keep(path: Path, arguments: Mapping[str, Any], syncer: Syncer = OS_SYNC) -> bool:
    """Write the arguments to `path`, durable when this returns; False if
    the file is there already (kept as first written)."""
    return write_durably(path, orjson.dumps(dict(arguments)), syncer)


def read(path: Path) -> dict[str, Any]:
    arguments: dict[str, Any] = orjson.loads(path.read_bytes())
    return arguments
