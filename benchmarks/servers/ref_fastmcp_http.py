"""FastMCP (the `fastmcp` package on PyPI, not the SDK's) with the
benchmark's tools (`ref_tools.py`), over Streamable HTTP: its own ASGI app
(`http_app`), stateless (no session, as staal) with JSON answers, under
uvicorn, on 127.0.0.1 and the port given (argv[1]): in-process, no journal,
ledger or isolation. Not a staal dependency: `pip install -e '.[bench]'`."""

import logging
import sys

import uvicorn
from fastmcp import FastMCP
from ref_tools import get, noop

server = FastMCP("bench")
server.tool(noop)
server.tool(get)

if __name__ == "__main__":
    # FastMCP logs each request at INFO through rich; staal logs no line per call.
    logging.getLogger("fastmcp").setLevel(logging.WARNING)
    app = server.http_app(path="/mcp", stateless_http=True, json_response=True)
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning",
                access_log=False)
