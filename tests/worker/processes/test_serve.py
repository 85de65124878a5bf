"""staal.worker.processes.serve.Channel: a worker's one ZeroMQ socket, used by the
thread that serves the run, with heartbeats from its own thread once the
run began (issue 12 item 3). The supervisor's side is played by a real
ROUTER on a real ipc endpoint; every wait is a bounded poll."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import zmq

from staal.errors import StaalError
from staal.records.messages import Check, Ended, Heartbeat, PrintLine, Run, pack, unpack
from staal.worker.processes.serve import Channel

BOUND_MS = 20_000  # what a message may take to arrive on a loaded machine


@pytest.fixture
def router(tmp_path: Path):
    context = zmq.Context()
    socket = context.socket(zmq.ROUTER)
    socket.setsockopt(zmq.LINGER, 0)
    endpoint = f"ipc://{tmp_path / 'workers'}"
    socket.bind(endpoint)
    yield socket, endpoint
    socket.close()
    context.term()


def next_message(socket: zmq.Socket) -> tuple[bytes, object]:
    assert socket.poll(BOUND_MS), "no message arrived within the bound"
    identity, frame = socket.recv_multipart()
    return identity, unpack(frame)


@pytest.fixture
def started(router):
    """A started channel whose ready heartbeat the router has read: the
    router, the channel and its identity. Finished at the end."""
    socket, endpoint = router
    channel = Channel(endpoint)
    try:
        channel.start()
        identity, ready = next_message(socket)
        assert identity == f"w{os.getpid()}".encode()
        assert ready == Heartbeat(pid=os.getpid())
        yield socket, channel, identity
    finally:
        channel.finish()


def test_a_channel_says_it_is_ready_answers_checks_and_hands_over_the_run_in_order(started):
    socket, channel, identity = started
    socket.send_multipart([identity, pack(Check(manifest="m.json", tool="noop"))])
    assert channel.receive() == Check(manifest="m.json", tool="noop")
    run = Run(run="a" * 32, tool="noop", journal="j", inputs="i")
    socket.send_multipart([identity, pack(run)])
    assert channel.receive() == run
    channel.begin_run(run.run)
    sent = [PrintLine(run=run.run, text=f"line {i}") for i in range(50)]
    for message in sent:
        channel.send(message)
    channel.send(Ended(run=run.run, outcome="done", result=1))
    got = []
    while len(got) < len(sent) + 1:
        message = next_message(socket)[1]
        if not isinstance(message, Heartbeat):
            got.append(message)
    assert got == [*sent, Ended(run=run.run, outcome="done", result=1)]


def test_while_the_run_runs_the_heartbeat_thread_sends_heartbeats_naming_it(started):
    socket, channel, _ = started
    channel.begin_run("b" * 32)
    # The serving thread is busy with the run (here: this test waiting);
    # the beats come from the channel's own thread.
    beats = [next_message(socket)[1] for _ in range(2)]
    assert beats == [Heartbeat(pid=os.getpid(), run="b" * 32)] * 2
    channel.finish()
    while socket.poll(0):  # a beat sent before finish() returned
        socket.recv_multipart()
    assert not socket.poll(1_500)  # stopped: none after finish() returned


def test_an_idle_channel_sends_heartbeats_while_it_waits_for_a_message(started):
    socket, channel, identity = started
    received: list[object] = []
    waiting = threading.Thread(target=lambda: received.append(channel.receive()))
    waiting.start()
    beats = [next_message(socket)[1] for _ in range(2)]
    assert beats == [Heartbeat(pid=os.getpid())] * 2  # no run named: it has none yet
    socket.send_multipart([identity, pack(Check(manifest="m.json", tool="noop"))])
    waiting.join(BOUND_MS / 1000)
    assert received == [Check(manifest="m.json", tool="noop")]


def test_a_channel_finished_before_any_run_stops_its_heartbeat_thread_which_sent_nothing(started):
    socket, channel, _ = started
    channel.finish()  # returns only once the heartbeat thread has returned
    assert not socket.poll(1_500)  # and it sent nothing


def test_a_frame_that_is_not_a_message_is_refused_by_name_and_the_channel_still_closes(started):
    socket, channel, identity = started
    socket.send_multipart([identity, b"not json"])
    with pytest.raises(StaalError, match="a message frame is not JSON"):
        channel.receive()
