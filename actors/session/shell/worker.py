"""The turn worker: runs an agent on a thread of its own, off the session's mailbox, so
that an interrupt is handled while the model is still talking.

The worker never touches the actor: it hands its output to a ``send`` callable (the shell
passes one that delivers to the session's own address and goes quiet once the session has
stopped). Text is batched so that a turn costs a few messages, not one per token.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from spine import Event, Kind, Log, StreamSubscription, Usage, history, subscribe

from ...agents import Agent, TurnInput
from ...agents.egress import destination, literal, resolve
from ...agents.governance import Requirement
from ...agents.replayed import Decisions
from ..rules.commands import Finished, Govern, Progress, Spawn
from . import turn_threads
from .mirroring import MIRRORED, mirror
from .recall import recalled, rooted
from .schedule_tool import timer_of

#: Seconds between checks that the turn was not cancelled while waiting for a child.
_POLL = 0.25

_Answer = concurrent.futures.Future[Mapping[str, Any]]
#: Seconds a turn must have run before its first words are handed back at once.
FIRST_WORDS_AFTER = 0.002


class TurnWorker:
    """The `TurnOutput` an agent writes to, and the thread that runs it."""

    def __init__(
        self,
        send: Callable[[Any], None],
        turn: int,
        interval: float,
        open_log: Callable[[], Log] | None = None,
    ) -> None:
        self._send = send
        self.session_id = ""
        self._open_log = open_log
        #: The ``recall`` tool's reader of this session's events (None without a log).
        self.recall: Callable[[int], str] | None = self._recall if open_log is not None else None
        self._spawns: dict[str, concurrent.futures.Future[tuple[str, str]]] = {}
        self.turn = turn
        self.cancelled = threading.Event()
        #: Set once the turn's `Finished` has been handed back.
        self.done = threading.Event()
        self._interval = interval
        self._buf: list[str] = []
        # The first words of a turn go out at once, unless the turn is younger than
        # `FIRST_WORDS_AFTER` (an instant answer then rides on the turn's end: one message
        # fewer); later words are batched per interval.
        self._started = time.monotonic()
        self._said = False
        self._holding = False
        self._last = 0.0
        self._usage: Usage | None = None
        self._usage_sent: Usage | None = None
        self._raw: tuple[Mapping[str, Any], ...] = ()
        self._on_cancel: list[Callable[[], object]] = []
        self._events: list[Event] = []
        self._events_lock = threading.Lock()
        self._waiting: dict[tuple[str, str], concurrent.futures.Future[tuple[str, int, str]]] = {}
        self._questions: dict[str, _Answer] = {}
        self._keys: dict[tuple[str, str], str] = {}
        self._given: dict[tuple[str, str], tuple[str, bool]] = {}
        self._steers: tuple[str, ...] = ()
        #: A replay's recorded human decisions (None: not a replay, every call is asked).
        self._decisions: Decisions | None = None
        # The log the turn's children are followed on: one for all of its delegations (one
        # connection and one watcher thread polling the file, not one per child).
        self._follow_lock = threading.Lock()
        self._follow_log: Log | None = None
        self._following = 0

    def govern(
        self, action: str, tool_use_id: str, input_json: str, need: Requirement
    ) -> concurrent.futures.Future[tuple[str, int, str]]:
        """Ask the session's gate about one action; the future gets (verdict, call, fault)
        once the session has decided (and, for an approval, once a human has)."""
        fut: concurrent.futures.Future[tuple[str, int, str]] = concurrent.futures.Future()
        self._waiting[(action, tool_use_id)] = fut
        self.flush()  # what was said before the action is stored before its verdict
        cmd = Govern(
            turn=self.turn, action=action, tool_use_id=tool_use_id, input=input_json, need=need
        )
        if self._decisions is not None and action != "model":
            cmd = attrs.evolve(cmd, recorded=self._decisions.take(action, input_json))
        dest = destination(input_json, need.egress) if need.egress else None
        if dest is None or literal(dest[0]) is not None:
            self._send(cmd)
            return fut

        def look_up() -> None:
            # Off the agent's loop: the gate decides from the addresses, a lookup is I/O.
            try:
                found: tuple[str, ...] | None = tuple(str(a) for a in resolve(*dest))
            except Exception:
                found = None
            self._send(attrs.evolve(cmd, resolved=found))

        turn_threads.run(look_up)
        return fut

    def ask(self, use_id: str, q: Mapping[str, Any]) -> _Answer:
        """Put a server's question ``q`` during call ``use_id`` to a human (the session)."""
        fut: _Answer = concurrent.futures.Future()
        self._questions[use_id] = fut
        self.flush()
        self._send(Govern(turn=self.turn, action="elicitation", tool_use_id=use_id, question=q))
        return fut

    def answer(
        self,
        action: str,
        tool_use_id: str,
        verdict: str,
        call: int,
        fault: str,
        key: str = "",
        steers: tuple[str, ...] = (),
        answer: Mapping[str, Any] | None = None,
        given: tuple[str, bool] | None = None,
    ) -> None:
        """The session's verdict or a question's answer (from the session's own thread),
        with the idempotency key an admitted call runs under, the steers it delivered at
        this safe point, and the result a human gave by hand, stored already (set before
        the verdict wakes the agent)."""
        q = self._questions.pop(tool_use_id, None) if answer is not None else None
        if q is not None and not q.done():
            q.set_result(answer or {})
        if key:
            self._keys[(action, tool_use_id)] = key
        if given is not None:
            self._given[(action, tool_use_id)] = given
        fut = self._waiting.pop((action, tool_use_id), None)
        if fut is not None and not fut.done():
            if steers:
                self._steers = (*self._steers, *steers)
            fut.set_result((verdict, call, fault))

    def given_result(self, action: str, tool_use_id: str) -> tuple[str, bool] | None:
        """The result a human gave the call by hand (the session stored it), if any."""
        return self._given.pop((action, tool_use_id), None)

    def idempotency_key(self, action: str, tool_use_id: str) -> str:
        """The key the session gave the admitted call ("" if none)."""
        return self._keys.get((action, tool_use_id), "")

    def take_steers(self) -> tuple[str, ...]:
        """The steers delivered since the last call: the agent adds them to its
        conversation, as user messages, before the model call just admitted."""
        taken, self._steers = self._steers, ()
        return taken

    def answer_spawn(self, tool_use_id: str, child: str, error: str) -> None:
        """The child exists (or could not be created), from the session's thread."""
        fut = self._spawns.pop(tool_use_id, None)
        if fut is not None and not fut.done():
            fut.set_result((child, error))

    def delegate(self, tool_use_id: str, objective: str) -> tuple[str, bool]:
        """Spawn a child session on ``objective``, wait for its goal run to end, mirror
        its events onto this stream (attributed by ``goal``) and fold it back with
        ``child.completed``. Blocks (a tool's thread); gives up when the turn is cancelled."""
        fut: concurrent.futures.Future[tuple[str, str]] = concurrent.futures.Future()
        self._spawns[tool_use_id] = fut
        self._send(Spawn(turn=self.turn, tool_use_id=tool_use_id, objective=objective))
        while True:
            try:
                child, error = fut.result(timeout=_POLL)
                break
            except concurrent.futures.TimeoutError:
                if self.cancelled.is_set():
                    return "cancelled", True
        if error:
            return f"the child session could not be created: {error}", True
        if self._open_log is None:
            return "no log to follow the child on", True
        log = self._follow()
        try:
            with subscribe(log, child, 0, (Kind.CONVERGED, Kind.STALLED)) as sub:
                end = self._child_end(sub, child)
                if end is None:
                    return "cancelled", True
                mirrored = [mirror(e, child) for e in history(log, child) if e.kind in MIRRORED]
                failed = end.kind == Kind.STALLED
                result = end.error if failed else end.text
                done = Event(
                    kind=Kind.CHILD_COMPLETED,
                    goal=self.session_id,
                    child=child,
                    result=result,
                    is_error=failed,
                )
                # Handed over before the subscription and the log are closed: closing the
                # log waits for its watcher thread to notice (up to its poll interval).
                self.flush((*mirrored, done))
        finally:
            self._unfollow()
        return (f"child {child} stalled: {result}" if failed else result), failed

    def schedule(self, tool_use_id: str, args: Mapping[str, Any]) -> str:
        """The ``schedule`` tool (`schedule_tool.timer_of`): the session sets the timer."""
        cmd, said = timer_of(self.turn, tool_use_id, args, time.time())
        self._send(cmd)
        return said

    def _follow(self) -> Log:
        assert self._open_log is not None
        with self._follow_lock:
            if self._follow_log is None:
                self._follow_log = self._open_log()
            self._following += 1
            return self._follow_log

    def _unfollow(self) -> None:
        with self._follow_lock:
            self._following -= 1
            if self._following or self._follow_log is None:
                return
            log, self._follow_log = self._follow_log, None
        log.close()

    def _child_end(self, sub: StreamSubscription, child: str) -> Event | None:
        while not self.cancelled.is_set():
            ev = sub.get(_POLL)
            if ev is not None and ev.goal == child:
                return ev
        return None

    def emit(self, event: Event) -> None:
        """Store ``event`` in the turn, after what was said before it. It rides on the next
        hand-back (text, a tool call, a question to the gate, the turn's end): one message
        and one commit fewer per model call. Tools call this from their own threads."""
        if event.kind == Kind.CONTEXT_COMPACTED and self._open_log is not None:
            event = self._rooted(event)
        with self._events_lock:
            self._events.append(event)

    def _recall(self, seq: int) -> str:
        """What stored event ``seq`` of this session holds (runs on a tool's thread)."""
        log = self._follow()
        try:
            return recalled(log, self.session_id, seq)
        finally:
            self._unfollow()

    def _rooted(self, ev: Event) -> Event:
        log = self._follow()
        try:
            return rooted(log, self.session_id, ev)
        finally:
            self._unfollow()

    def _take_events(self, more: tuple[Event, ...] = ()) -> tuple[Event, ...]:
        with self._events_lock:
            if not self._events:
                return more
            taken, self._events = self._events, []
        return (*taken, *more)

    def cancel(self) -> None:
        """Stop the turn: set ``cancelled`` and run what the agent registered for it."""
        self.cancelled.set()
        for fut in list(self._waiting.values()):
            fut.cancel()
        self._waiting.clear()
        for cb in self._on_cancel:
            try:
                cb()
            except Exception:  # a cancel hook must not break the session's handler
                pass

    def on_cancel(self, callback: Callable[[], object]) -> None:
        self._on_cancel.append(callback)
        if self.cancelled.is_set():
            callback()

    def start(self, agent: Agent, turn_input: TurnInput, instant: bool = True) -> None:
        """Run the turn: here and now if the agent can answer without waiting (its
        ``instant``; not tried again with ``instant=False``), else on a turn thread;
        either way its end arrives as `Finished`."""
        if instant and self.run_instant(agent, turn_input):
            return
        self.session_id = turn_input.session_id
        if turn_input.replay is not None:
            self._decisions = Decisions(turn_input.approvals)

        def work() -> None:
            try:
                stop = agent.run(turn_input, self)
            except Exception as exc:
                self.finish("error", f"{type(exc).__name__}: {exc}")
            else:
                self.finish(stop, "")

        turn_threads.run(work)

    def run_instant(self, agent: Agent, turn_input: TurnInput) -> bool:
        """Run the turn here and now if the agent can answer without waiting (its
        ``instant``): True if it did, its `Finished` handed back before this returns. Its
        words ride on the end: one hand-back per turn. False: the agent touched nothing."""
        self.session_id = turn_input.session_id
        if turn_input.replay is not None:
            self._decisions = Decisions(turn_input.approvals)
        instant = getattr(agent, "instant", None)
        if instant is None:
            return False
        self._holding = True
        try:
            stop = instant(turn_input, self)
        except Exception as exc:
            self.finish("error", f"{type(exc).__name__}: {exc}")
            return True
        finally:
            self._holding = False
        if stop is None:
            return False
        self.finish(stop, "")
        return True

    def flush(self, events: tuple[Event, ...] = ()) -> None:
        """Hand buffered text (and ``events``, and usage that changed) to the session now."""
        events = self._take_events(events)
        if self._buf or events or self._usage is not self._usage_sent:
            text = "".join(self._buf)
            self._buf.clear()
            self._usage_sent = self._usage
            self._send(Progress(turn=self.turn, text=text, events=events, usage=self._usage))
            if text:
                # Only text is batched: a hand-back of events alone (a gate's question,
                # an action's end) must not hold back the words that follow it.
                self._last = time.monotonic()
                self._said = True

    def text(self, delta: str) -> None:
        self._buf.append(delta)
        if self._holding:
            return
        now = time.monotonic()
        if self._said:
            if now - self._last >= self._interval:
                self.flush()
        elif now - self._started >= FIRST_WORDS_AFTER:
            self.flush()

    def next_flush(self) -> float:
        """Seconds until buffered text is due (the agent arms a timer with it)."""
        if self._said:
            return self._interval
        return max(0.0, self._started + FIRST_WORDS_AFTER - time.monotonic())

    def tool_call(self, tool: str, tool_use_id: str, input_json: str) -> None:
        ev = Event(kind=Kind.TOOL_CALL, tool=tool, tool_use_id=tool_use_id, input=input_json)
        self.flush((ev,))

    def tool_result(
        self,
        tool: str,
        tool_use_id: str,
        result: str,
        is_error: bool,
        *,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        ev = Event(
            kind=Kind.TOOL_RESULT,
            tool=tool,
            tool_use_id=tool_use_id,
            result=result,
            is_error=is_error,
            extra=extra or {},
        )
        self.flush((ev,))

    def usage(self, usage: Usage, raw: tuple[Mapping[str, Any], ...] = ()) -> None:
        self._usage = usage
        self._raw = raw
        if not self._holding:
            # Handed back at once, not with the next batch of text: a turn cut off now
            # keeps the usage seen so far (a few reports per model call, so it costs little).
            self.flush()

    def finish(self, stop_reason: str, error: str) -> None:
        # The last text rides on the finish message: one hand-back fewer per turn.
        text = "".join(self._buf)
        self._buf.clear()
        self._send(
            Finished(
                turn=self.turn,
                stop_reason=stop_reason,
                text=text,
                error=error,
                usage=self._usage,
                provider_usage=self._raw,
                events=self._take_events(),
            )
        )
        self.done.set()
