"""staal.worker.processes.serve.Channel: a worker's one ZeroMQ socket, used by the
thread that serves the run, with heartbeats from its own thread once the
run began (issue 12 item 3). The supervisor's side is played by a real
ROUTER on a real ipc endpoint; every wait is a bounded poll."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
import zmq

from staal.errors import StaalError
from staal.journal.reader import read_journal
from staal.journal.records import JOURNAL, End, Header
from staal.journal.writer import close_unfinished
from staal.records.messages import (
    Check,
    Ended,
    Heartbeat,
    PrintLine,
    Retire,
    Run,
    Started,
    pack,
    unpack,
)
from staal.supervisor.calls.run_logs import failure_fields
from staal.worker.processes import serve
from staal.worker.processes.binding import Binding
from staal.worker.processes.serve import Channel
from staal.worker.runs.run import ResumeRefused

BOUND_MS = 20_000  # what a message may take to arrive on a loaded machine
SHA = "0" * 64


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


def test_after_end_run_the_channel_receives_the_next_run_and_beats_without_naming_the_last(started):
    socket, channel, identity = started
    first = Run(run="e" * 32, tool="noop", journal="j", inputs="i", last=False)
    socket.send_multipart([identity, pack(first)])
    assert channel.receive() == first
    channel.begin_run(first.run)
    channel.send(Ended(run=first.run, outcome="done", result=1, stays=True))
    channel.end_run()
    got = next_message(socket)[1]
    while isinstance(got, Heartbeat):
        got = next_message(socket)[1]
    assert got == Ended(run=first.run, outcome="done", result=1, stays=True)
    second = Run(run="f" * 32, tool="noop", journal="j", inputs="i")
    received: list[object] = []
    waiting = threading.Thread(target=lambda: received.append(channel.receive()))
    waiting.start()
    # Idle again: the main thread's own beats, naming no run.
    beat = next_message(socket)[1]
    while beat != Heartbeat(pid=os.getpid()):
        assert beat == Heartbeat(pid=os.getpid(), run=first.run)  # one sent before end_run
        beat = next_message(socket)[1]
    socket.send_multipart([identity, pack(second)])
    waiting.join(BOUND_MS / 1000)
    assert received == [second]


def test_serving_ends_when_retire_comes_between_runs(router, monkeypatch):
    socket, endpoint = router
    monkeypatch.setattr(serve, "rehearse", lambda *_: None)
    # Only the main thread takes signals; this serve runs in another.
    monkeypatch.setattr(serve.cancel, "listen", lambda: None)
    code: list[int] = []
    serving = threading.Thread(target=lambda: code.append(serve.serve(endpoint, {}, {}, {})))
    serving.start()
    identity, ready = next_message(socket)
    assert ready == Heartbeat(pid=os.getpid())
    socket.send_multipart([identity, pack(Retire())])
    serving.join(BOUND_MS / 1000)
    assert code == [0] and not serving.is_alive()


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


# -- a refusal's kind crosses as data -----------------------------------------------------


def refuse_the_resume(*_args: object, **_kwargs: object) -> object:
    raise ResumeRefused("j.journal: cannot resume run: the program changed since the run began")


def test_a_refusal_in_the_worker_reaches_the_supervisor_with_its_kind(started, monkeypatch, tmp_path):
    socket, channel, _ = started
    monkeypatch.setattr(serve, "execute", refuse_the_resume)
    run = Run(run="c" * 32, tool="noop", journal=str(tmp_path / "none.journal"), inputs="i")
    channel.begin_run(run.run)
    stays = serve.serve_run(channel, run, {}, Binding({}, {}, {}))
    got = next_message(socket)[1]
    while isinstance(got, (Heartbeat, Started)):
        got = next_message(socket)[1]
    # What the supervisor decoded from the frame: the failure the run ends
    # with, and the kind of the refusal behind it.
    assert isinstance(got, Ended) and got.failure is not None
    assert (got.failure.kind, got.failure.cause) == ("internal", "resume_refused")
    assert "ResumeRefused" in got.failure.message
    assert failure_fields(got.failure)["cause"] == "resume_refused"
    assert stays is False and got.stays is False  # a worker whose engine failed never stays


def test_a_journal_closed_after_a_refusal_keeps_the_refusals_kind_in_its_end(tmp_path):
    path = tmp_path / f"{'d' * 32}.journal"
    header = Header(run="d" * 32, tool="t", program="/p.py", program_sha256=SHA,
                    config_sha256=SHA, inputs_sha256=SHA, runtime="staal 0.1.0", time=1)
    path.write_bytes(json.dumps(JOURNAL.encode(header)).encode() + b"\n")
    end = close_unfinished(path, (), "the worker failed", cause="journal_refused")
    assert isinstance(end, End) and end.failure is not None
    assert end.failure.cause == "journal_refused"
    assert read_journal(path).end == end
