"""The official Python SDK's own high-level server (`mcp` 2.x `MCPServer`)
with the benchmark's tools (`ref_tools.py`), over stdio: in-process, no
journal, ledger or isolation."""

from mcp.server.mcpserver import MCPServer
from ref_tools import get, noop

server = MCPServer("bench")
server.tool()(noop)
server.tool()(get)

if __name__ == "__main__":
    server.run("stdio")
