"""The conformance suite's `failing_job`: after about a second, a tool
error (a result with isError true, so a completed task in 2026-07-28)."""

import time

from staal import fail


def main() -> dict:
    time.sleep(1)
    fail("action", "failing_job always fails")
