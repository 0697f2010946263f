"""How a Host talks to its actor system: one interface, one class per kind of base.

On multiproc bases every thread gets its own private endpoint (a shared one would deliver
replies to the wrong thread) and a pump thread with its own endpoint receives sink
batches. On ``simpleSystemBase``, where ``private()`` hangs and actors run only inside
the caller's ask/tell/listen, calls are serialised by a lock over the one endpoint and a
pump thread keeps listening, so turn workers' messages to their sessions are handled and
sink batches are delivered between requests.

Both acknowledge every sink batch they deliver (`SinkAck`): the Runner sends a sink at
most ``max_pending`` unacknowledged batches and drops the rest.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, Protocol

from thespian.actors import ActorSystem

from .. import messages as m
from .._runtime.system import log_defs, processes_in_session
from .._runtime.transport_auth import keyed, load_secret
from .replies import ReplyMatcher, request_id

log = logging.getLogger("vertebra.host")

#: Seconds `reap_system` gives the actor processes to exit before it kills them.
SHUTDOWN_GRACE = 10.0
#: How long a pump waits for a message before it looks at its stop flag again.
PUMP_LISTEN = 0.1
SIMPLE_PUMP_LISTEN = 0.002
#: Seconds without a batch after which the pump checks that its Runner is still the Runner.
SINK_CHECK = 0.5

OnBatch = Callable[[m.SinkBatch], None]


class Transport(Protocol):
    """The Host's view of an actor system: requests matched to replies by id, and sinks.

    ``ask`` and ``wait`` return the reply carrying the request's ``request_id`` (a failure
    reply too: the caller turns it into an error), or None when none arrived in time;
    whatever else arrives meanwhile is kept for its own wait or handled as a push. Sink
    batches go to the ``on_batch`` given at construction, each acknowledged after it.
    """

    system: Any

    def ask(self, to: Any, msg: Any, timeout: float, request_id: str | None = None) -> Any:
        """Send ``msg`` and wait for the reply with ``request_id`` (default: the one
        ``msg`` carries)."""
        ...

    def wait(self, request_id: str, timeout: float) -> Any:
        """Go on waiting for the reply to an earlier `ask` from this thread."""
        ...

    def tell(self, to: Any, msg: Any) -> None:
        """Send without waiting."""
        ...

    def add_sink(self, runner: Any, timeout: float) -> bool:
        """Register this host as a sink of ``runner`` (once); False if it got no answer."""
        ...

    def stop(self) -> None:
        """Stop the pump and release endpoints; the system keeps running. Idempotent."""
        ...

    def shutdown(self) -> None:
        """`stop`, then shut the actor system down (unless attached to someone else's)."""
        ...


class SimpleTransport:
    """``simpleSystemBase``: one endpoint under a lock, kept turning by a pump thread."""

    def __init__(self, data_dir: str, on_batch: OnBatch) -> None:
        self.system = ActorSystem(
            "simpleSystemBase", logDefs=log_defs(data_dir), transientUnique=True
        )
        self._on_batch = on_batch
        self._lock = threading.RLock()
        self._matcher = ReplyMatcher(self._push)
        self._runner: Any = None
        self._stop = threading.Event()
        self._pump = threading.Thread(target=self._pump_loop, name="vertebra-pump", daemon=True)
        self._pump.start()

    def ask(self, to: Any, msg: Any, timeout: float, request_id: str | None = None) -> Any:
        rid = msg.request_id if request_id is None else request_id
        deadline = time.monotonic() + timeout
        with self._lock:
            first = self.system.ask(to, msg, timeout)
            left = max(0.0, deadline - time.monotonic())
            return self._matcher.wait(self.system.listen, rid, left, first)

    def wait(self, request_id: str, timeout: float) -> Any:
        with self._lock:
            return self._matcher.wait(self.system.listen, request_id, timeout)

    def tell(self, to: Any, msg: Any) -> None:
        with self._lock:
            self.system.tell(to, msg)

    def add_sink(self, runner: Any, timeout: float) -> bool:
        with self._lock:
            if self._runner is not None:
                return True
            # Known before the reply: a batch may arrive in the same wait, right after it.
            self._runner = runner
            reply = self.ask(runner, m.AddSink(request_id=request_id()), timeout)
            if not isinstance(reply, m.SinkReply):
                self._runner = None
                return False
            return True

    def _push(self, msg: Any) -> None:
        # Called under the lock, from whichever thread listened: the pump or a request.
        if isinstance(msg, m.SinkBatch):
            deliver_and_ack(msg, self._on_batch, self.system.tell, self._runner)

    def _pump_loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                msg = self.system.listen(SIMPLE_PUMP_LISTEN)
                self._matcher.offer(msg)
            if msg is None:
                self._stop.wait(SIMPLE_PUMP_LISTEN)

    def stop(self) -> None:
        self._stop.set()
        if self._pump.is_alive() and self._pump is not threading.current_thread():
            self._pump.join(timeout=5)

    def shutdown(self) -> None:
        # The pump goes first: nothing may listen on a system that is shutting down.
        self.stop()
        with self._lock:
            self.system.shutdown()


class MultiprocTransport:
    """Multiproc bases: a private endpoint per thread, and a pump endpoint for sinks."""

    def __init__(
        self,
        data_dir: str,
        on_batch: OnBatch,
        admin_port: int,
        attach: bool,
        capabilities: dict[str, Any] | None = None,
    ) -> None:
        # Never the class-wide system Thespian caches: a second Host of this process, on
        # another port, would reach the first one's system (and data directory).
        # ``capabilities``: more of the system's own (a convention leader's address).
        with keyed(load_secret(data_dir), data_dir):
            self.system = ActorSystem(
                "multiprocTCPBase",
                {**(capabilities or {}), "Admin Port": admin_port},
                logDefs=log_defs(data_dir),
                transientUnique=True,
            )
        self._attach = attach
        self._on_batch = on_batch
        self._local = threading.local()
        self._contexts: list[Any] = []
        self._ctx_lock = threading.Lock()
        self._sink_lock = threading.Lock()
        self._pump: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop = threading.Event()
        #: Where the Runner is now (asks the guardian): set by the Host so that the pump
        #: registers again with a Runner the guardian started after a crash.
        self.current_runner: Callable[[], Any] | None = None

    def _endpoint(self) -> tuple[Any, ReplyMatcher]:
        """This thread's private endpoint and its matcher, opened on first use."""
        ep: tuple[Any, ReplyMatcher] | None = getattr(self._local, "endpoint", None)
        if ep is None:
            cm = self.system.private()
            ctx = cm.__enter__()
            with self._ctx_lock:
                self._contexts.append(cm)
            # Only the pump's endpoint is a sink: pushes anywhere else are stray.
            ep = self._local.endpoint = (ctx, ReplyMatcher(lambda msg: None))
        return ep

    def ask(self, to: Any, msg: Any, timeout: float, request_id: str | None = None) -> Any:
        rid = msg.request_id if request_id is None else request_id
        deadline = time.monotonic() + timeout
        ctx, matcher = self._endpoint()
        first = ctx.ask(to, msg, timeout)
        left = max(0.0, deadline - time.monotonic())
        return matcher.wait(ctx.listen, rid, left, first)

    def wait(self, request_id: str, timeout: float) -> Any:
        ctx, matcher = self._endpoint()
        return matcher.wait(ctx.listen, request_id, timeout)

    def tell(self, to: Any, msg: Any) -> None:
        self._endpoint()[0].tell(to, msg)

    def add_sink(self, runner: Any, timeout: float) -> bool:
        with self._sink_lock:
            if self._pump is None:
                self._pump = threading.Thread(
                    target=self._pump_loop, args=(runner, timeout), name="vertebra-pump"
                )
                self._pump.daemon = True
                self._pump.start()
            pump = self._pump
        return self._ready.wait(timeout) and pump.is_alive()

    def _pump_loop(self, runner: Any, timeout: float) -> None:
        ctx = self._endpoint()[0]

        def push(msg: Any) -> None:
            if isinstance(msg, m.SinkBatch):
                deliver_and_ack(msg, self._on_batch, ctx.tell, runner)

        # Batches arriving while the pump waits for a reply (a registration) are delivered,
        # not dropped as strays.
        self._local.endpoint = (ctx, ReplyMatcher(push))
        reply = self.ask(runner, m.AddSink(request_id=request_id()), timeout)
        if not isinstance(reply, m.SinkReply):
            log.error("sink registration got no reply")
            return
        sink_id = reply.sink_id
        self._ready.set()
        quiet_since = time.monotonic()
        while not self._stop.is_set():
            msg = ctx.listen(PUMP_LISTEN)
            if isinstance(msg, m.SinkBatch):
                push(msg)
                quiet_since = time.monotonic()
                continue
            if self.current_runner is None or time.monotonic() - quiet_since < SINK_CHECK:
                continue
            # Quiet for a while: is the Runner we registered with still the Runner? A new
            # one (the guardian restarts a dead one) knows no sinks until told.
            quiet_since = time.monotonic()
            try:
                now = self.current_runner()
            except Exception:
                continue
            if now is None or now == runner:
                continue
            again = self.ask(now, m.AddSink(request_id=request_id()), timeout)
            if isinstance(again, m.SinkReply):
                log.info("sinks registered again with a new Runner")
                runner, sink_id = now, again.sink_id
        with contextlib.suppress(Exception):
            ctx.tell(runner, m.RemoveSink(request_id=request_id(), sink_id=sink_id))

    def stop(self) -> None:
        self._stop.set()
        if self._pump is not None and self._pump is not threading.current_thread():
            self._pump.join(timeout=5)
        with self._ctx_lock:
            cms, self._contexts = self._contexts, []
        for cm in cms:
            with contextlib.suppress(Exception):
                cm.__exit__(None, None, None)

    def shutdown(self) -> None:
        self.stop()
        if not self._attach:
            self.system.shutdown()
            return
        # Attached: the daemon runs on; only this process's endpoint (a listener) goes.
        base = getattr(self.system, "_systemBase", None)
        with contextlib.suppress(Exception):
            if base is not None:
                base.transport.close()


def deliver_and_ack(
    batch: m.SinkBatch, on_batch: OnBatch, tell: Callable[[Any, Any], None], runner: Any
) -> None:
    """Hand ``batch`` on, then acknowledge it, even when delivery failed: an unacknowledged
    batch counts against the sink's ``max_pending`` for good."""
    try:
        on_batch(batch)
    except Exception:
        # Formatted here rather than passed as exc_info: a kept log record would pin the
        # pump's frame and with it its actor-system endpoint.
        log.error("sink batch delivery failed\n%s", traceback.format_exc())
    finally:
        if runner is not None:
            tell(runner, m.SinkAck(sink_id=batch.sink_id))


def reap_system(session_id: int) -> None:
    """Make sure no process of the actor system in OS session ``session_id`` outlives its
    shutdown: wait `SHUTDOWN_GRACE`, then kill what is left."""
    deadline = time.monotonic() + SHUTDOWN_GRACE
    left = processes_in_session(session_id)
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = processes_in_session(session_id)
    for pid in left:
        log.warning("actor process %d outlived the shutdown; killing it", pid)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
