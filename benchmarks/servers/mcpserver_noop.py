"""The official Python SDK's own high-level server (`mcp` 2.x `MCPServer`)
with the benchmark's no-op tool, over stdio: in-process, no journal, ledger
or isolation."""

from mcp.server.mcpserver import MCPServer

server = MCPServer("bench-noop")


@server.tool()
def noop(x: int) -> int:
    """Return x."""
    return x


if __name__ == "__main__":
    server.run("stdio")
