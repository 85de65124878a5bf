"""FastMCP (the `fastmcp` package on PyPI, not the SDK's) with the
benchmark's no-op tool, over stdio: in-process, no journal, ledger or
isolation. Install it for the benchmark only: `pip install fastmcp`."""

from fastmcp import FastMCP

server = FastMCP("bench-noop")


@server.tool
def noop(x: int) -> int:
    """Return x."""
    return x


if __name__ == "__main__":
    server.run("stdio", show_banner=False)
