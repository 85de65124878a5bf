"""Reading the protocol descriptor: every chunk, then the end, handed over
on the event loop, whether the loop polls the descriptor or a thread reads it."""

from __future__ import annotations

import asyncio
import os
import threading

from staal.supervisor.transport.stdio import read_chunks

WAIT_S = 30.0


async def read_all(fd: int) -> tuple[bytes, set[bool]]:
    """Everything read from `fd` to its end, and whether each delivery came
    on the event loop's thread."""
    loop = asyncio.get_running_loop()
    ended = asyncio.Event()
    chunks: list[bytes] = []
    on_loop: set[bool] = set()

    def deliver(data: bytes | None) -> None:
        on_loop.add(threading.current_thread() is threading.main_thread())
        if data is None:
            ended.set()
        else:
            chunks.append(data)

    stop = read_chunks(fd, deliver, loop, size=4)
    try:
        await asyncio.wait_for(ended.wait(), WAIT_S)
    finally:
        stop()
    return b"".join(chunks), on_loop


def test_a_pipe_is_read_on_the_event_loop_to_its_end():
    reader, writer = os.pipe()
    os.write(writer, b'{"jsonrpc": "2.0"}\n')
    os.close(writer)
    try:
        assert asyncio.run(read_all(reader)) == (b'{"jsonrpc": "2.0"}\n', {True})
    finally:
        os.close(reader)


def test_a_file_which_cannot_be_polled_is_read_to_its_end_and_handed_to_the_loop(tmp_path):
    path = tmp_path / "requests.jsonl"
    path.write_bytes(b'{"id": 1}\n{"id": 2}\n')
    fd = os.open(path, os.O_RDONLY)
    try:
        assert asyncio.run(read_all(fd)) == (b'{"id": 1}\n{"id": 2}\n', {True})
    finally:
        os.close(fd)
