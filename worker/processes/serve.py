"""A worker: one forked process that serves runs of one grant set, one at
a time, until it is told its run is the last or its binding retires it
(worker/processes/binding.py), then exits.

It connects its own ZeroMQ DEALER to the supervisor's ROUTER and says it is
ready (a heartbeat with no run). The main thread uses the socket itself
(`Channel`): while idle it waits for a message, sending a heartbeat each
second, and answers start-up checks; during a run, a thread, started while
idle to keep it off the run's path, sends the heartbeats. Between runs it
waits again for the next run, or for `retire`. Failures leave as data
(kind, message), never as tracebacks.
"""

from __future__ import annotations

import _thread
import os
import signal
import traceback
from dataclasses import replace
from pathlib import Path

import zmq

from staal.errors import StaalError
from staal.inputs.arguments import check_arguments
from staal.inputs.schema import placeholder_arguments, to_json_schema
from staal.journal.reader import discard_unstarted, journal_started
from staal.journal.writer import JournalWriter, close_unfinished
from staal.records import kept_arguments
from staal.records.messages import (
    CANCEL_SIGNAL,
    Check,
    Checked,
    Ended,
    Heartbeat,
    PrintLine,
    Progress,
    Retire,
    Run,
    Started,
    StoppedMsg,
    pack,
    report_of,
    unpack,
)
from staal.records.outcomes import Failure
from staal.records.record import Record
from staal.records.runconfig import RunConfig, config_key
from staal.runtime.killpoints import kill_point
from staal.runtime.redaction import redact
from staal.runtime.timings import TIMINGS
from staal.worker.confinement import confine
from staal.worker.processes import cancel
from staal.worker.processes.binding import Binding
from staal.worker.runs.actions import RunOutcome
from staal.worker.runs.journal_sink import ChannelSink
from staal.worker.runs.run import Prepared, RunRequest, resume, start
from staal.worker.runs.spans import RunRecorder

HEARTBEAT_S = 1.0
# How long the main thread holds the socket per look for an answer.
REQUEST_POLL_MS = 20


class Channel:
    """Owns the worker's DEALER socket, from the main thread: it receives
    (checks, then the run) and sends (checked, started, print, progress,
    stopped, ended) itself, so a message crosses no thread inside the worker.

    Heartbeats: while idle the main thread, waiting for a message, sends one
    each second itself. Once a run is received it is busy with the run, so
    a small thread (started while idle, silent until then) sends them, until
    `end_run`. It takes the same lock as every send, so the socket is used by
    one thread at a time (ZeroMQ's rule), and it never receives: during a run
    the main thread receives only the answers to its own requests, and
    between runs the beat thread is silent. It is a bare `_thread` thread: a
    `threading.Thread` costs a forked worker several times its CPU in
    copy-on-write faults (BENCHMARKS.md, issue 12 item 3). It is a Python
    thread on purpose: a run stuck in C code holding the interpreter stops
    the heartbeats, and the supervisor kills it (supervisor/workers/pool.py)."""

    def __init__(self, endpoint: str) -> None:
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.IDENTITY, f"w{os.getpid()}".encode())
        self.socket.setsockopt(zmq.LINGER, 5_000)
        # The zygote starts before the supervisor binds (their start-ups
        # overlap): retry a refused connect every 10 ms, not every 100.
        self.socket.setsockopt(zmq.RECONNECT_IVL, 10)
        self.socket.connect(endpoint)
        self.run_id: str | None = None
        self._lock = _thread.allocate_lock()  # held for every use of the socket once the run began
        self._stop = _locked()  # released at the end: the beats stop
        self._done = _locked()  # released by the heartbeat thread as it returns
        self._beating = False

    def start(self) -> None:
        """Say this worker is ready, and start the heartbeat thread (silent
        until the run begins)."""
        self.socket.send(pack(Heartbeat(pid=os.getpid())))
        _thread.start_new_thread(self._beat, ())
        self._beating = True

    def receive(self) -> Record:
        """The next message from the supervisor (main thread, before the run
        began), sending a heartbeat each second without one."""
        while not self.socket.poll(int(HEARTBEAT_S * 1000)):
            self.socket.send(pack(Heartbeat(pid=os.getpid())))
        return unpack(self.socket.recv())

    def begin_run(self, run_id: str) -> None:
        """From here on the main thread runs the run: the heartbeat thread
        takes over the beats (and names the run in them). Called after the
        main thread's last use of the socket without the lock."""
        self.run_id = run_id

    def end_run(self) -> None:
        """The run is over and its report sent: the heartbeat thread goes
        silent again, and the main thread may use the socket without the
        lock to wait for the next run."""
        with self._lock:
            self.run_id = None

    def send(self, message: Record) -> None:
        with self._lock:
            self.socket.send(pack(message))

    def request(self, message: Record) -> Record:
        """Send `message` during the run and wait for the supervisor's
        answer (a journal record's acknowledgement). The socket is polled
        in short turns under the lock, so the heartbeats go on meanwhile."""
        with self._lock:
            self.socket.send(pack(message))
        while True:
            with self._lock:
                if self.socket.poll(REQUEST_POLL_MS):
                    return unpack(self.socket.recv())

    def _beat(self) -> None:
        # Wakes each second; sends only once the run began (before, the main
        # thread owns the socket). Waking it at the run's start instead
        # would put a lock release and a thread switch on the run's path.
        # A cancel is the main thread's to take: one taken here would not
        # wake a program asleep there.
        signal.pthread_sigmask(signal.SIG_BLOCK, {CANCEL_SIGNAL})
        try:
            while not self._stop.acquire(timeout=HEARTBEAT_S):
                with self._lock:
                    if self.run_id is not None:
                        self.socket.send(pack(Heartbeat(pid=os.getpid(), run=self.run_id)))
        finally:
            self._done.release()

    def finish(self) -> None:
        """Stop the beats, then close: what was sent is delivered first
        (LINGER), within five seconds. Finishing again does nothing."""
        if self._beating:
            self._beating = False
            self._stop.release()
            self._done.acquire()
        if not self.context.closed:
            self.socket.close()
            self.context.term()


def _locked() -> _thread.LockType:
    lock = _thread.allocate_lock()
    lock.acquire()
    return lock


def rehearse(configs: dict[str, RunConfig], prepared: dict[str, Prepared | RunOutcome]) -> None:
    """Walk the engine's path once while idle, running no program: a forked
    worker pays a page copy for every shared object it first touches, and
    paying them here keeps them off the path of the run it will serve."""
    from staal.journal.records import Header
    from staal.records.appendlog import AppendLog
    from staal.runtime.clock import SYSTEM_CLOCK
    from staal.worker.confinement.steps import StepCounter
    from staal.worker.runs.engine import RunContext

    class _NoSync:
        def sync_file(self, fd: int) -> None: ...
        def sync_dir(self, path: object) -> None: ...

    for name, loaded in prepared.items():
        if isinstance(loaded, RunOutcome):
            continue
        config = configs[name]
        inputs = loaded.info.inputs
        values = check_arguments(inputs, placeholder_arguments(inputs), tuple(loaded.info.capabilities))
        header = Header(run="0" * 32, tool=name, program=str(config.program),
                        program_sha256=loaded.program_sha256, config_sha256=loaded.config_sha256,
                        inputs_sha256="0" * 64, runtime="rehearsal", time=SYSTEM_CLOCK.now_ms())
        with confine.broker_section():
            log = AppendLog(Path(os.devnull), os.open(os.devnull, os.O_WRONLY), _NoSync())
            writer = JournalWriter(log, SYSTEM_CLOCK)
            writer.write(header)
            ctx = RunContext("0" * 32, writer, SYSTEM_CLOCK, header.time)
            counter = StepCounter(config.limits.max_steps, config.program.parent)
            counter.start()
            counter.stop()
            outcome = ctx.finish({"rehearsal": sorted(values)})
            log.close()
        if outcome.outcome != "stopped":  # a rehearsal has no op to stop at
            pack(Ended(run="0" * 32, outcome=outcome.outcome, result=outcome.result, usage={}))
        pack(Started(run="0" * 32, pid=os.getpid()))


def serve(endpoint: str, configs: dict[str, RunConfig],
          prepared: dict[str, Prepared | RunOutcome], reuse: dict[str, int]) -> int:
    """Serve checks, then runs of one grant set (`reuse`: how many runs a
    worker of each set may serve), until a run is the last or `retire` comes."""
    try:
        rehearse(configs, prepared)
    except Exception:  # noqa: BLE001 - a rehearsal is an optimisation; the run reports real problems
        pass
    channel = Channel(endpoint)
    binding = Binding(configs, prepared, reuse)
    cancel.listen()
    try:
        channel.start()
        while True:
            message = channel.receive()
            if isinstance(message, Check):
                channel.send(checked(message.tool, configs, prepared))
            elif isinstance(message, Retire):
                return 0
            elif isinstance(message, Run):
                cancel.begin(message.cancelled)
                channel.begin_run(message.run)
                if not serve_run(channel, message, configs, binding):
                    return 0
                cancel.end()
                binding.between_runs()
                channel.end_run()
    finally:
        binding.close()
        channel.finish()


def checked(tool: str, configs: dict[str, RunConfig],
            prepared: dict[str, Prepared | RunOutcome]) -> Checked:
    """The start-up check of one tool: its program's problems, or the type
    description of its inputs, validated with placeholder inputs as a run
    config would be (seed 000 section 2)."""
    loaded = prepared.get(tool)
    if loaded is None:
        return Checked(tool=tool, ok=False, problems=(f"no tool named '{tool}'",))
    if isinstance(loaded, RunOutcome):
        why = loaded.failure.message if loaded.failure is not None else "it could not be loaded"
        return Checked(tool=tool, ok=False, problems=(why,))
    inputs = loaded.info.inputs
    try:
        check_arguments(inputs, placeholder_arguments(inputs), tuple(loaded.info.capabilities))
    except StaalError as exc:
        return Checked(tool=tool, ok=False, problems=(f"placeholder inputs refused: {exc.message}",))
    return Checked(tool=tool, ok=True, inputs=inputs, schema=to_json_schema(inputs))


def serve_run(channel: Channel, message: Run, configs: dict[str, RunConfig],
              binding: Binding) -> bool:
    """Serve one run and report its end; whether the worker stays for another."""
    # Spans are recorded only when the call's span came with the run.
    spans = None if message.traceparent is None else \
        RunRecorder(message.run, message.tool, message.traceparent, message.resume)
    report: Ended | StoppedMsg
    engine_failed = False
    TIMINGS.reset()  # the run's own actions and fsyncs, not the zygote's or the rehearsal's
    try:
        channel.send(Started(run=message.run, pid=os.getpid()))
        outcome = execute(message, binding, channel, spans)
        timings = TIMINGS.snapshot() if message.timed else None
        if outcome.outcome == "stopped":
            op, why = outcome.waits_at()
            report = StoppedMsg(run=message.run, op=op, message=why, timings=timings)
        else:
            with confine.broker_section():  # the end is durable; the supervisor not yet told
                kill_point("worker", "end")
            report = Ended(run=message.run, outcome=outcome.outcome, result=outcome.result,
                           failure=outcome.failure, usage=outcome.usage, timings=timings,
                           content=outcome.content)
    except BaseException as exc:  # noqa: BLE001 - a bug in the engine: reported as data
        engine_failed = True
        detail = redact("".join(traceback.format_exception_only(type(exc), exc)).strip(),
                        message.secrets.values())
        # A refusal keeps its kind across the boundary, as data.
        cause = exc.kind if isinstance(exc, StaalError) else None
        report = last_word(message, configs, f"the worker failed: {detail}", channel, cause)
    finally:
        binding.disarm()
    try:
        stays = binding.after_run(report, engine_failed, message.last)
    except Exception as exc:  # noqa: BLE001 - the run's report goes all the same; the worker retires
        stays, binding.why_not = False, f"its retire rules failed: {type(exc).__name__}"
    if isinstance(report, Ended) and (stays or binding.retires):
        report = replace(report, stays=stays, retires=binding.retires)
    if spans is not None:
        # Before the last word: the supervisor stops listening to a run
        # once it has its end.
        channel.send(spans.finish(report))
    channel.send(report)
    return isinstance(report, Ended) and report.stays


def last_word(message: Run, configs: dict[str, RunConfig], reason: str,
              channel: Channel | None = None, cause: str | None = None) -> Ended | StoppedMsg:
    """What to report after the engine failed: the journal is the evidence.
    An end it already holds is reported as it is (the run did finish), an op
    in doubt makes the run wait, and only a run with nothing at stake fails
    as internal; the record is in the journal before the supervisor hears."""
    journal = Path(message.journal)
    try:
        with confine.broker_section():
            if journal_started(journal):
                params = tuple(configs[config_key(message.tool, message.grants)].grants)
                sink = sink_of(message, channel)
                reopen = None if sink is None else (lambda: JournalWriter(sink))
                return report_of(message.run, close_unfinished(journal, params, reason,
                                                               reopen=reopen, cause=cause))
    except BaseException as exc:  # noqa: BLE001 - the journal itself failed: say so
        reason = f"{reason}; then its journal could not be read or written: {exc}"
    return Ended(run=message.run, outcome="failed", failure=Failure("internal", reason, cause=cause))


def sink_of(message: Run, channel: Channel | None) -> ChannelSink | None:
    """The run's journal sink when its supervisor commits the records (None:
    the worker writes the journal file itself)."""
    if message.sink != "supervisor" or channel is None:
        return None
    return ChannelSink(message.run, Path(message.journal), channel.request)


def execute(message: Run, binding: Binding, channel: Channel,
            spans: RunRecorder | None = None) -> RunOutcome:
    config, loaded, fresh = binding.accept(message)
    if isinstance(loaded, RunOutcome):
        return loaded
    binding.arm(config.limits)
    with confine.broker_section():
        arguments = kept_arguments.read(Path(message.inputs))
    request = RunRequest(
        config=config, arguments=arguments, journal=Path(message.journal), run_id=message.run,
        on_print=lambda text: channel.send(PrintLine(run=message.run, text=text)),
        on_op=lambda op, what: channel.send(Progress(run=message.run, op=op, message=what)),
        # The zygote loaded the program without secrets; the run's own come
        # with its message, for its capabilities (never into os.environ).
        prepared=replace(loaded, secrets=dict(message.secrets)),
        spans=spans,
        sink=sink_of(message, channel),
        fresh=fresh,
        kept=binding.kept,
        cancelled=cancel.asked,
    )
    if message.resume:
        with confine.broker_section():
            # A journal cut during its creation (no complete header): the run
            # never started, so it starts now, as a new run would.
            discard_unstarted(request.journal)
        if request.journal.exists():
            return resume(request)
    return start(request)
