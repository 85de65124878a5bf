"""Run ids: 32 random hexadecimal characters (seed 000 section 5, step 6)."""

from __future__ import annotations

import re
import secrets

_RUN_ID = re.compile(r"^[0-9a-f]{32}$")


def new_run_id() -> str:
    return secrets.token_hex(16)


def is_run_id(value: object) -> bool:
    return isinstance(value, str) and _RUN_ID.fullmatch(value) is not None
