"""Several refund calls at once (or one after another), through the
official client, in one server session: what the power-loss scenario "two
in flight" records, and the repeat of each of its calls on every state it
could leave.
tests/crash/harness.py's `call` is the one-call session the other
scenarios use."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.crash.harness import ANSWERED, TIMEOUT_S, leaves

Answered = Callable[[int, dict[str, Any]], None]


async def call_all(manifest_path: Path, env: dict[str, str], stderr: Path,
                   calls: list[dict[str, Any]], answered: Answered | None = None,
                   in_series: bool = False) -> list[dict[str, Any]]:
    """One server process, every call of `calls` sent at once (`in_series`:
    each once the one before was answered): for each, in order,
    {"seen": ANSWERED, ...the answer} or {"seen": what else}.
    `answered(i, seen)` is given call i's answer as soon as it arrives."""
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "staal.supervisor.app.main", "serve", str(manifest_path)],
        env=env, cwd=str(manifest_path.parent))

    async def one(client: Any, number: int, arguments: dict[str, Any]) -> dict[str, Any]:
        try:
            result = await client.call_tool("refund_order", arguments,
                                            read_timeout_seconds=TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - classified, not hidden
            return {"seen": f"an error: {type(exc).__name__}: {exc}"}
        seen = {"seen": ANSWERED, "is_error": result.is_error,
                "structured": result.structured_content,
                "text": result.content[0].text if result.content else ""}
        if answered is not None:
            answered(number, seen)
        return seen

    with open(stderr, "a") as errlog:  # noqa: ASYNC230 - a local file, opened once per server
        try:
            async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
                await client.list_tools()
                if in_series:
                    return [await one(client, number, arguments)
                            for number, arguments in enumerate(calls)]
                return list(await asyncio.gather(*(one(client, number, arguments)
                                                   for number, arguments in enumerate(calls))))
        except Exception as exc:  # noqa: BLE001 - the state's judgement reports it
            seen = "; ".join(f"an error: {type(e).__name__}: {e}" for e in leaves(exc))
            return [{"seen": seen} for _ in calls]
