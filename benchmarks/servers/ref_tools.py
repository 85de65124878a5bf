"""The two tools every reference server serves, in-process, with no journal,
ledger or isolation (staal's side: `noop.py` and `get.py`):

- `noop(x: int) -> int` returns x;
- `get(url: str) -> int` makes one HTTP GET of `url` (the benchmark's local
  service, `http_service.py`) through one httpx client shared by all calls
  of the process, and returns the `x` of the JSON it answers.

httpx is imported and the client made on the first GET, so a server that is
only asked for the no-op (its cold start included) never pays for them.
"""

from __future__ import annotations

from typing import Any

_client: Any = None


def noop(x: int) -> int:
    """Return x."""
    return x


async def get(url: str) -> int:
    """GET url once; return the x it answers."""
    global _client
    if _client is None:
        import logging

        import httpx

        # MCPServer and FastMCP set the root logger to INFO, at which httpx
        # logs every request (through rich): a cost of the logging set-up,
        # not of the server, and staal logs no line per request.
        logging.getLogger("httpx").setLevel(logging.WARNING)

        # The bounds staal's tool has (`net` in staal_manifest.json); the
        # environment's proxies are not for a local service.
        _client = httpx.AsyncClient(timeout=httpx.Timeout(1.0, connect=1.0), trust_env=False)
    response = await _client.get(url)
    response.raise_for_status()
    return response.json()["x"]
