"""The conformance suite's `protocol_error_job`: a failure inside the server,
not the tool's error. Its worker process ends itself with SIGKILL each time,
so the server gives up on the run as internal (nothing was in doubt): a
failed task with a JSON-RPC error in 2026-07-28."""

import os
import signal


def main() -> dict:
    os.kill(os.getpid(), signal.SIGKILL)
    return {}
