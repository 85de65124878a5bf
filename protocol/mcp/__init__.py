"""MCP itself, sans I/O: JSON-RPC lines, the two revisions, dispatch, and the
tools and resources methods."""
