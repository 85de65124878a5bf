"""The run context: every action and value of a run passes through here.

A new op is checked (deadline, then the grant's limits), its intent is made
durable, it is performed, and its outcome is made durable before the
program sees it. On resume the program runs again from the start and each
op the journal already holds is replayed instead of performed; an op whose
intent has no outcome is in doubt and is sent again only when that is safe
(a read, or a keyed request inside the service's retention), otherwise the
run stops and waits for an operator (DESIGN.md section 5).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

from staal.journal.reader import JournalState, OpEntry
from staal.journal.records import End, Intent, OutcomeRecord, Print, Stopped, Value
from staal.journal.writer import JournalWriter, resolve_hint
from staal.program import CapabilityRefused, RunFailed
from staal.records.messages import ActionOutcome
from staal.records.outcomes import CANCELLED, Failure, Usage
from staal.records.runconfig import DEFAULT_WAIT_MS
from staal.runtime.clock import Clock
from staal.runtime.killpoints import kill_point
from staal.runtime.redaction import redact
from staal.worker.runs.actions import (
    ActionSpec,
    Performed,
    RunOutcome,
    RunStopped,
    answer_of,
    args_hash,
    count_use,
    deliver,
    failure_of,
    frames_of,
    print_to_stderr,
    redact_value,
    safe_to_resend,
    timed,
    url_of,
)
from staal.worker.runs.broker import GrantState
from staal.worker.runs.refusal import broker_section
from staal.worker.runs.resend import InDoubt, NotSent, Sleep, resend_bound, send_keyed
from staal.worker.runs.spans import ActionNote, RunRecorder


class RunContext:
    def __init__(
        self,
        run_id: str,
        writer: JournalWriter,
        clock: Clock,
        started_ms: int,
        deadline_ms: int | None = None,
        replay: JournalState | None = None,
        secrets: tuple[str, ...] = (),
        on_print: Callable[[str], None] | None = None,
        program_dir: Path | None = None,
        on_op: Callable[[int, str], None] | None = None,
        spans: RunRecorder | None = None,
        wait_ms: int = DEFAULT_WAIT_MS,
        sleep: Sleep = time.sleep,
        cancelled: Callable[[], bool] | None = None,
    ) -> None:
        self.run_id = run_id
        # Where the program's own frames are, for a failure's traceback.
        self.program_dir = program_dir
        self.writer = writer
        self.clock = clock
        self.deadline_ms = deadline_ms
        self.deadline_at = None if deadline_ms is None else started_ms + deadline_ms
        # Without a deadline, how long a keyed request is sent again (max_wait);
        # `sleep` waits between its attempts, on `clock`'s time.
        self.wait_ms = wait_ms
        self.sleep = sleep
        self.cancelled = cancelled or (lambda: False)  # its task's (worker/processes/cancel.py)
        self.replay = replay
        self.secrets = tuple(s for s in secrets if s)
        self.on_print = on_print or print_to_stderr
        # Told when a new action begins (op, what it is): the call's progress.
        self.on_op = on_op or (lambda op, what: None)
        self.params: dict[str, GrantState] = {}
        self.op = 0
        self.prints = 0
        self.stop: Stopped | None = None
        self.violation: str | None = None
        self.ended: RunFailed | None = None
        # Told how long each action took (its time is the action's own
        # timeout's to bound, not the run's bound on waiting outside them).
        self.after_action: Callable[[float], None] | None = None
        # Records each action's span when traces are exported (worker/runs/spans.py).
        self.spans: RunRecorder | None = spans
        self.note: ActionNote | None = None

    # -- what capabilities call ----------------------------------------

    def act(self, state: GrantState, spec: ActionSpec,
            perform: Callable[[str | None], Performed]) -> Any:
        began = time.monotonic()
        if self.spans is None:
            try:
                return self._act(state, spec, perform)
            finally:
                if self.after_action is not None:
                    self.after_action(time.monotonic() - began)
        return self._traced(self.spans, state, spec, perform, began)

    def _traced(self, spans: RunRecorder, state: GrantState, spec: ActionSpec,
                perform: Callable[[str | None], Performed], began: float) -> Any:
        """`_act`, with the action's span recorded: what became of it is
        read from how `_act` ended."""
        start_ns, self.note = spans.now(), None
        outcome: ActionOutcome = "failed"
        try:
            result = self._act(state, spec, perform)
            outcome = "ok"
            return result
        except RunStopped:
            outcome = "stopped"
            raise
        except RunFailed:  # a refusal by a limit, or the deadline: it did not happen
            outcome = "refused"
            raise
        finally:
            if self.after_action is not None:
                self.after_action(time.monotonic() - began)
            if self.note is not None:  # None: refused before it got an op
                spans.action(self.note, spec.cap, spec.action, state.param, outcome, start_ns)

    def _act(self, state: GrantState, spec: ActionSpec,
             perform: Callable[[str | None], Performed]) -> Any:
        with broker_section():
            self._guard()
            self.op += 1
            op = self.op
            if self.spans is not None:
                self.note = ActionNote(op)
            key = f"{self.run_id}-{op}" if spec.keyed else None
            entry = self._journaled(op)
            if entry is not None:
                return self._replay_action(op, entry, state, spec, perform, key)
            self._check_stop(op)
            self._check_grant(state, spec)
            written = self._write_intent(op, state, spec, key)
            self.on_op(op, f"op {op}: {spec.describe(state.param)}")
            return self._perform(op, state, spec, self._until_settled(spec, perform, written), key)

    def _write_intent(self, op: int, state: GrantState, spec: ActionSpec, key: str | None) -> int:
        """The intent's time: a keyed request's window counts from it."""
        # Durable before the action, except for a read: a read whose intent
        # is lost in a power cut is simply read again by the resumed program,
        # which is what a read in doubt gets anyway. A keyed request needs its
        # intent on disk: the key's retention window is counted from it.
        written = self.writer.now()
        self.writer.write(Intent(
            op=op, param=state.param, cap=spec.cap, action=spec.action,
            args_sha256=args_hash(spec.args), time=written, idempotency_key=key,
            read=spec.resend == "always",
        ), sync=spec.resend != "always")
        kill_point("worker", "intent")
        return written

    def value(self, state: GrantState, produce: Callable[[], Any]) -> Any:
        """A clock or random value: journaled, so a resumed run sees the same."""
        with broker_section():
            self._guard()
            self.op += 1
            op = self.op
            entry = self._journaled(op)
            if entry is not None:
                if entry.value is None or entry.value.cap != state.cap:
                    self._mismatch(op, entry, f"a {state.cap} value through '{state.param}'")
                state.count(None, ())
                return entry.value.value
            self._check_grant(state, ActionSpec(state.cap, "value", None))
            self.on_op(op, f"op {op}: a {state.cap} value through '{state.param}'")
            value = produce()
            # Lost in a power cut, a value is simply drawn again: nothing that
            # depended on it can have been durable (the next record syncs it).
            self.writer.write(Value(op=op, cap=state.cap, value=value, time=self.writer.now(),
                                    param=state.param), sync=False)
            state.count(None, ())
            return value

    def print_line(self, text: str) -> None:
        with broker_section():
            self.prints += 1
            if self.replay is not None and self.prints <= self.replay.prints:
                return  # journaled and shown when the run first got here
            text = self.redact(text)
            self.writer.write(Print(seq=self.prints, text=text, time=self.writer.now()), sync=False)
            self.on_print(text)

    def refuse(self, message: str) -> NoReturn:
        """A capability refusal: the run fails as `capability`, even if the
        program catches the exception."""
        message = self.redact(message)
        if self.violation is None:
            self.violation = message
        raise CapabilityRefused(message)

    def redact(self, text: str) -> str:
        return redact(text, self.secrets)

    # -- one op --------------------------------------------------------

    def _guard(self) -> None:
        """Once a run has stopped or been refused, nothing more happens."""
        if self.stop is not None:
            raise RunStopped(self.stop.message)
        if self.violation is not None:
            raise CapabilityRefused(self.violation)
        if self.ended is not None:
            raise self.ended

    def _journaled(self, op: int) -> OpEntry | None:
        if self.replay is None:
            return None
        return self.replay.ops.get(op)

    def _check_stop(self, op: int) -> None:
        """No new action starts once the run's task is cancelled or its deadline passed."""
        if self.cancelled():
            self.ended = RunFailed(CANCELLED, f"the run's task was cancelled before op {op} could start")
        elif self.deadline_at is not None and self.clock.now_ms() >= self.deadline_at:
            self.ended = RunFailed("deadline", f"the run's deadline ({self.deadline_ms} ms from its "
                                   f"start) passed before op {op} could start")
        if self.ended is not None:
            raise self.ended

    def _check_grant(self, state: GrantState, spec: ActionSpec) -> None:
        try:
            state.check(money=spec.money, url=url_of(spec))
            for need, url in spec.through:
                need.check(url=url)
        except CapabilityRefused as exc:
            self.refuse(exc.message)

    def _perform(self, op: int, state: GrantState, spec: ActionSpec,
                 perform: Callable[[str | None], Performed], key: str | None) -> Any:
        if self.note is not None:
            self.note.key = key
        try:
            done = timed(spec.cap, perform, key)
        except InDoubt as exc:
            count_use(state, spec, ())
            self._stop(op, f"op {op} ({spec.describe(state.param)}) may or may not have "
                       f"happened: {self.redact(str(exc))}")
        except Exception as exc:  # noqa: BLE001 - any error here is data
            # Not the Performed/InDoubt contract: whether it was sent is unknown.
            # A read is safe to call failed; anything else is in doubt. Either
            # way the op is settled or stopped, so the journal stays one story.
            reason = self.redact(f"{type(exc).__name__}: {exc}")
            if spec.resend != "always":
                count_use(state, spec, ())
                self._stop(op, f"op {op} ({spec.describe(state.param)}) may or may not have "
                           f"happened: {reason}")
            done = Performed(failure=reason)
        result = redact_value(self.secrets, done.result)
        failure = Failure(done.failure_kind, self.redact(done.failure)) if done.failure else None
        # The outcome of an op that is safe to send again may wait for the next
        # synced record: lost in a power cut, the op is in doubt and is resent,
        # and nothing after it can have been durable either. An op that can
        # never be resent would then need an operator, so its outcome is synced.
        self.writer.write(OutcomeRecord(
            op=op, ok=failure is None, time=self.writer.now(), result=result, failure=failure,
            charged=done.charged,
        ), sync=spec.resend == "never")
        kill_point("worker", "outcome")
        count_use(state, spec, done.charged)
        return deliver(result, failure)

    def _replay_action(self, op: int, entry: OpEntry, state: GrantState, spec: ActionSpec,
                       perform: Callable[[str | None], Performed], key: str | None) -> Any:
        intent = entry.intent
        if (intent is None or intent.cap != spec.cap or intent.action != spec.action
                or intent.param != state.param or intent.args_sha256 != args_hash(spec.args)):
            self._mismatch(op, entry, spec.describe(state.param))
        if entry.outcome is not None:
            outcome = entry.outcome
            if self.note is not None:
                self.note.key, self.note.replayed = intent.idempotency_key, True
            count_use(state, spec, outcome.charged)
            return deliver(outcome.result, outcome.failure)
        if entry.resolved is not None:
            if entry.resolved.happened:
                # What it charged was recorded with the operator's answer.
                count_use(state, spec, entry.resolved.charged)
                return entry.resolved.result
            # It did not happen: do it now, under a new intent, so that if this
            # attempt's answer is lost too the op is in doubt again, not resent.
            # A new attempt is a new request with a key of its own: a service
            # keeps the first key's answer (Stripe replays even a 500 to it
            # for 24 hours), which would make the operator's answer useless.
            key = None if key is None else f"{key}-{entry.attempts + 1}"
            written = self._write_intent(op, state, spec, key)
            return self._perform(op, state, spec, self._until_settled(spec, perform, written), key)
        if safe_to_resend(spec, intent, self.clock.now_ms()):
            # Sent again as it was first sent: under the key its intent records.
            doubt = "the attempt sent before the run stopped may have happened"
            again = self._until_settled(spec, perform, intent.time, doubt)
            return self._perform(op, state, spec, again, intent.idempotency_key)
        count_use(state, spec, ())
        self._stop(op, self._in_doubt_message(op, spec.describe(state.param)))

    def _until_settled(self, spec: ActionSpec, perform: Callable[[str | None], Performed],
                       key_since_ms: int, doubt: str | None = None,
                       ) -> Callable[[str | None], Performed]:
        """`perform`, for a keyed request sent again until an answer settles
        it (worker/runs/resend.py); any other action is performed once."""
        if spec.resend != "keyed":
            return perform

        def keyed(key: str | None) -> Performed:
            bound = resend_bound(self.clock.now_ms(), key_since_ms, self.deadline_at,
                                 self.deadline_ms, self.wait_ms)
            try:
                return send_keyed(lambda: perform(key), doubt, bound, self.clock, self.sleep)
            except NotSent as exc:  # nothing happened: it failed, as a request that never left
                return Performed(failure=str(exc))
        return keyed

    def _in_doubt_message(self, op: int, what: str) -> str:
        return (f"op {op} ({what}) may or may not have happened and cannot safely be sent "
                "again; " + resolve_hint(self.writer.log.path, op))

    def _mismatch(self, op: int, entry: OpEntry, now: str) -> NoReturn:
        if entry.intent is not None:
            had = f"{entry.intent.cap} {entry.intent.action} through '{entry.intent.param}'"
        elif entry.value is not None:
            had = f"a {entry.value.cap} value"
        else:  # an entry is made by its intent or its value: not reached
            had = "nothing"
        if had == now:
            now = "the same with other arguments (their SHA-256 differs from the journal's)"
        self._stop(op, f"journal mismatch at op {op}: the journal has {had}; the program "
                   f"now asks for {now}")

    def _stop(self, op: int, message: str) -> NoReturn:
        current = self.replay.stopped if self.replay is not None else None
        if current is None or current.op != op or current.message != message:
            self.writer.write(Stopped(op=op, message=message, time=self.writer.now()))
        self.stop = Stopped(op=op, message=message, time=self.writer.now())
        raise RunStopped(message)

    # -- the end -------------------------------------------------------

    def finish(self, returned: Any = None, error: BaseException | None = None) -> RunOutcome:
        """Decide the outcome, and journal its end unless the run stopped."""
        with broker_section():
            # Also after an error: ending before an op the journal holds is a
            # mismatch, and an end over an op in doubt would abandon it.
            if self.stop is None and self.replay is not None:
                self._check_nothing_left(self.replay)
            if self.ended is None and self.cancelled():  # it ends cancelled, its result unseen
                self.ended = RunFailed(CANCELLED, "the run's task was cancelled")
            outcome = self._decide(returned, error)
            if outcome.outcome != "stopped":
                self.writer.write(End(
                    outcome=outcome.outcome, time=self.writer.now(), result=outcome.result,
                    failure=outcome.failure, usage=outcome.usage, content=outcome.content,
                ))
            return outcome

    def _check_nothing_left(self, replay: JournalState) -> None:
        later = replay.ops.get(self.op + 1)
        if later is None:
            return
        try:
            self._mismatch(self.op + 1, later, "nothing more: it ended")
        except RunStopped:
            pass

    def usage(self) -> dict[str, Usage]:
        return {name: state.usage.frozen() for name, state in self.params.items()}

    def _decide(self, returned: Any, error: BaseException | None) -> RunOutcome:
        outcome = partial(RunOutcome, run=self.run_id, usage=self.usage())
        if self.stop is not None:
            return outcome("stopped", op=self.stop.op, message=self.stop.message)
        frames = frames_of(error, self.program_dir, self.redact)
        if self.violation is not None:
            failure = Failure("capability", self.violation, frames)
            return outcome("failed", failure=failure)
        if self.ended is not None:
            error = self.ended
        if error is not None:
            kind, message = failure_of(error, self.redact)
            return outcome("failed", failure=Failure(kind, message, frames))
        answer = answer_of(returned, self.secrets)
        if isinstance(answer, Failure):
            return outcome("failed", failure=answer)
        return outcome("done", result=answer[0], content=answer[1])
