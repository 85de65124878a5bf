"""The official Python SDK's own high-level server (`mcp` 2.x `MCPServer`)
with the benchmark's tools (`ref_tools.py`), over Streamable HTTP: stateless
(no session, as staal), JSON answers, uvicorn as the SDK runs it, on
127.0.0.1 and the port given (argv[1]). Prints the port, once listening."""

import sys

import uvicorn
from mcp.server.mcpserver import MCPServer
from ref_tools import get, noop

server = MCPServer("bench", log_level="WARNING")
server.tool()(noop)
server.tool()(get)

if __name__ == "__main__":
    app = server.streamable_http_app(stateless_http=True, json_response=True)
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning",
                access_log=False)
