"""The HTTP benchmark's load: N clients, each one keep-alive HTTP/1.1
connection calling a tool in turn (the no-op, or with --tool get --service
URL the GET tool on that service), as fast as the server answers.

A process of its own (so its CPU is not the server's) with the least client
a request can have: each request is built in advance, written whole, and its
answer read by its Content-Length (or its chunks) and checked: 200, and the
tool's result equal to the argument sent. Nothing of an SDK's client is in
the way, so the same bytes measure every server.

    python benchmarks/http_load.py --port P [--path /mcp] --clients 16 --calls 2000
        --revision 2025-11-25|2026-07-28 [--method tools/call|tools/list]
        [--tool noop|get --service http://127.0.0.1:PORT]

Prints one JSON object: calls, failures (by message), seconds (first request
written to last answer read), this process's CPU seconds, and the median
and 99th percentile of one call's time (request written to answer read).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections import Counter

LEGACY = "2025-11-25"
MODERN = "2026-07-28"
CALL = "tools/call"
LIST = "tools/list"
META = {"io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "bench-load", "version": "1"}}


def arguments(tool: str, service: str | None, i: int) -> dict[str, object]:
    """The call's arguments; both tools answer i."""
    return {"x": i} if tool == "noop" else {"url": f"{service}/item/{i}"}


def request(path: str, port: int, revision: str, method: str, i: int, tool: str = "noop",
            service: str | None = None) -> bytes:
    params: dict[str, object] = ({"name": tool, "arguments": arguments(tool, service, i)}
                                 if method == CALL else {})
    headers = [f"POST {path} HTTP/1.1", f"host: 127.0.0.1:{port}",
               "content-type: application/json", "accept: application/json, text/event-stream",
               f"mcp-protocol-version: {revision}"]
    if revision == MODERN:
        params["_meta"] = META
        headers += [f"mcp-method: {method}"] + ([f"mcp-name: {tool}"] if method == CALL else [])
    body = json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}).encode()
    headers.append(f"content-length: {len(body)}")
    return ("\r\n".join(headers) + "\r\n\r\n").encode() + body


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    if "content-length" in fields:
        return status, await reader.readexactly(int(fields["content-length"]))
    body = b""
    while True:  # chunked
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        chunk = await reader.readexactly(size + 2)
        if size == 0:
            return status, body
        body += chunk[:-2]


def judged(status: int, body: bytes, i: int, method: str, tool: str = "noop") -> str | None:
    """None if the answer is the tool's result i (or a listing naming the
    tool), else what was wrong."""
    if status != 200:
        return f"HTTP {status}"
    text = body.decode()
    if text.startswith(("event:", "data:")):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    message = json.loads(text)
    result = message.get("result")
    if result is None:
        return f"error {message.get('error', {}).get('code')}"
    if method == LIST:
        listed = any(t["name"] == tool for t in result.get("tools", ()))
        return None if listed else f"no {tool} listed"
    if result.get("isError") or result.get("structuredContent", {}).get("result") != i:
        return "wrong result"
    return None


async def client(port: int, method: str, tool: str, requests: list[tuple[int, bytes]],
                 failures: Counter[str], took: list[float]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for i, data in requests:
            start = time.perf_counter()
            writer.write(data)
            status, body = await read_answer(reader)
            took.append(time.perf_counter() - start)
            problem = judged(status, body, i, method, tool)
            if problem is not None:
                failures[problem] += 1
    finally:
        writer.close()


async def load(args: argparse.Namespace) -> dict[str, object]:
    per_client: list[list[tuple[int, bytes]]] = [[] for _ in range(args.clients)]
    for i in range(args.calls):
        per_client[i % args.clients].append(
            (i, request(args.path, args.port, args.revision, args.method, i, args.tool,
                        args.service)))
    failures: Counter[str] = Counter()
    took: list[float] = []
    cpu = time.process_time()
    started = time.perf_counter()
    await asyncio.gather(*(client(args.port, args.method, args.tool, chunk, failures, took)
                           for chunk in per_client))
    seconds = time.perf_counter() - started
    took.sort()
    return {"calls": args.calls, "failures": dict(failures), "seconds": seconds,
            "cpu": time.process_time() - cpu, "p50": statistics.median(took),
            "p99": took[min(len(took) - 1, int(len(took) * 0.99))]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="/mcp")
    parser.add_argument("--clients", type=int, default=1)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--revision", choices=(LEGACY, MODERN), default=MODERN)
    parser.add_argument("--method", choices=(CALL, LIST), default=CALL)
    parser.add_argument("--tool", choices=("noop", "get"), default="noop")
    parser.add_argument("--service", help="--tool get: the local service's base URL")
    print(json.dumps(asyncio.run(load(parser.parse_args()))))


if __name__ == "__main__":
    main()
