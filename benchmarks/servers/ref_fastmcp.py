"""FastMCP (the `fastmcp` package on PyPI, not the SDK's) with the
benchmark's tools (`ref_tools.py`), over stdio: in-process, no journal,
ledger or isolation. Not a staal dependency: `pip install -e '.[bench]'`."""

from fastmcp import FastMCP
from ref_tools import get, noop

server = FastMCP("bench")
server.tool(noop)
server.tool(get)

if __name__ == "__main__":
    server.run("stdio", show_banner=False)
