"""`TraceExporter`: the live exporter, an actor fed by the Runner's sink.

It registers as a sink (`AddSink`), folds every stored event of every session through that
session's `projections.SpanFolder`, and puts each finished span on a bounded queue; a thread
of its own drains the queue in batches to the OTLP/HTTP endpoint. The actor acknowledges a
batch as soon as it is folded and never waits for the network, so a slow or down collector
costs sessions nothing: when the queue is full new spans are dropped and counted.

Spans are folded from what the sink sees: a turn already running when the exporter starts
exports the spans that finish after that point. `vertebra trace` re-exports any session
exactly from its log.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

from thespian.actors import ActorExitRequest, ActorTypeDispatcher, WakeupMessage

from projections import SpanFolder, SpanRecord, spawn_links
from spine import Event, Kind, Phase, decode_event, open_log

from .. import messages as m
from ..host.replies import request_id
from ..session.rules.state import GOAL_PARENT
from ._export_messages import (
    DEFAULT_BATCH,
    DEFAULT_INTERVAL,
    DEFAULT_MAX_QUEUE,
    DEFAULT_TIMEOUT,
    ExportStarted,
    ExportStats,
    ExportStopped,
    GetExportStats,
    StartExport,
    StopExport,
)
from ._export_pump import ExportPump

log = logging.getLogger("actors.otel")

#: Events read back to prime the fold of a session first seen mid-stream.
PRIME_EVENTS = 2000
#: Seconds without a batch after which the exporter asks the guardian whether its Runner
#: is still the Runner (the Host's sink pump does the same).
SINK_CHECK = 0.5


_FINAL = frozenset({Phase.CLOSED, Phase.FAILED})


class TraceExporter(ActorTypeDispatcher):  # type: ignore[misc]
    """Folds the Runner's live events into GenAI spans and exports them over OTLP/HTTP."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pump: ExportPump | None = None
        #: The spans folded so far (None until started).
        self._folds: SpanFolds | None = None
        self._sink_id = ""
        #: Who waits for the start and the stop to be answered: "start"/"stop" ->
        #: (address, request id).
        self._waiting: dict[str, tuple[Any, str]] = {}
        self._runner: Any = None
        self._remove_id = ""
        self._guardian: Any = None
        self._batch_at = 0.0
        self._asking = ""
        #: Sinks registered again with a replacement Runner.
        self._reregistered = 0

    def receiveMsg_StartExport(self, msg: StartExport, sender: Any) -> None:
        # Answered inside: a raise would make Thespian deliver the message again.
        if self._folds is not None:
            self.send(sender, ExportStarted(request_id=msg.request_id, sink_id=self._sink_id))
            return
        try:
            self._pump = ExportPump(msg)
        except Exception as exc:
            log.exception("cannot start the span exporter")
            self.send(
                sender,
                m.RequestFailed(
                    request_id=msg.request_id, error="InvalidRequest", message=str(exc)
                ),
            )
            return
        spine = None
        if msg.data_dir:
            try:
                from ..runner import spine_spec

                spine = open_log(spine_spec(msg.data_dir, msg.spine))
            except Exception:
                log.exception("the span exporter cannot read the spine; gaps stay gaps")
        self._folds = SpanFolds(spine, msg.capture_content)
        self._waiting["start"] = (sender, msg.request_id)
        self._runner = msg.runner
        self._guardian = msg.guardian
        self.send(msg.runner, m.AddSink(request_id=request_id(), max_pending=64))
        if self._guardian is not None:
            self._batch_at = time.monotonic()
            self.wakeupAfter(timedelta(seconds=SINK_CHECK), "sink-check")

    def receiveMsg_SinkReply(self, msg: m.SinkReply, sender: Any) -> None:
        if sender != self._runner:
            return  # from a Runner replaced before it answered
        self._sink_id = msg.sink_id
        started = self._waiting.pop("start", None)
        if started is not None:
            to, rid = started
            self.send(to, ExportStarted(request_id=rid, sink_id=msg.sink_id))

    def receiveMsg_SinkBatch(self, msg: m.SinkBatch, sender: Any) -> None:
        self._batch_at = time.monotonic()
        try:
            if self._pump is not None and self._folds is not None and msg.records:
                n, spans = self._folds.fold(msg)
                with self._pump.lock:
                    self._pump.counters["folded"] += n
                if spans:
                    self._pump.offer(spans)
        except Exception:
            log.exception("folding a sink batch into spans failed")
        finally:
            self.send(sender, m.SinkAck(sink_id=msg.sink_id))

    def receiveMsg_WakeupMessage(self, msg: WakeupMessage, sender: Any) -> None:
        # Quiet for a while: is the Runner this sink is registered with still the Runner?
        # The guardian starts a new one after a crash, and a new Runner knows no sinks.
        if msg.payload != "sink-check" or self._pump is None or self._guardian is None:
            return
        if time.monotonic() - self._batch_at >= SINK_CHECK and not self._asking:
            self._asking = request_id()
            self.send(self._guardian, m.GetRunner(request_id=self._asking))
        self.wakeupAfter(timedelta(seconds=SINK_CHECK), "sink-check")

    def receiveMsg_RunnerAddress(self, msg: m.RunnerAddress, sender: Any) -> None:
        if msg.request_id != self._asking:
            return
        self._asking = ""
        self._batch_at = time.monotonic()
        if self._pump is None or msg.address is None or msg.address == self._runner:
            return
        log.info("span exporter: registering its sink again with a new Runner")
        self._runner = msg.address
        self._reregistered += 1
        self.send(self._runner, m.AddSink(request_id=request_id(), max_pending=64))

    def receiveMsg_RequestFailed(self, msg: m.RequestFailed, sender: Any) -> None:
        if msg.request_id == self._asking:
            self._asking = ""

    def receiveMsg_StopExport(self, msg: StopExport, sender: Any) -> None:
        self._waiting["stop"] = (sender, msg.request_id)
        if self._runner is None or not self._sink_id:
            self._stopped()
            return
        self._remove_id = request_id()
        self.send(self._runner, m.RemoveSink(request_id=self._remove_id, sink_id=self._sink_id))

    def receiveMsg_Done(self, msg: m.Done, sender: Any) -> None:
        if msg.request_id == self._remove_id:
            self._sink_id = ""
            self._stopped()

    def _stopped(self) -> None:
        if self._pump is not None:
            self._pump.stop(2.0)
        counters = self._pump.stats() if self._pump is not None else {}
        self._pump = None
        if self._folds is not None:
            self._folds.close()
        stopped = self._waiting.pop("stop", None)
        if stopped is not None:
            to, rid = stopped
            self.send(to, ExportStopped(request_id=rid, counters=counters))

    def receiveMsg_GetExportStats(self, msg: GetExportStats, sender: Any) -> None:
        counters = self._pump.stats() if self._pump is not None else {}
        counters["reregistered"] = self._reregistered
        self.send(sender, ExportStats(request_id=msg.request_id, counters=counters))

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: Any) -> None:
        if self._runner is not None and self._sink_id:
            self.send(self._runner, m.RemoveSink(request_id=request_id(), sink_id=self._sink_id))
        if self._pump is not None:
            self._pump.stop(2.0)
            self._pump = None


class SpanFolds:
    """The span fold of every session the sink has shown, and the spine to read gaps and
    a child's parent back from (None: gaps stay gaps)."""

    def __init__(self, spine: Any, capture_content: bool) -> None:
        self._log = spine
        self._capture = capture_content
        self._folders: dict[str, SpanFolder] = {}
        self._last: dict[str, int] = {}

    def fold(self, msg: m.SinkBatch) -> tuple[int, list[SpanRecord]]:
        """Fold a batch; how many events were folded and the spans they finished."""
        sid = msg.session_id
        folder = self._folders.get(sid)
        last = self._last.get(sid, 0)
        spans: list[SpanRecord] = []
        if folder is None:
            folder = SpanFolder(sid, capture_content=self._capture)
            self._folders[sid] = folder
            # Prime the fold with what came before (bounded), exporting nothing of it, so a
            # turn already running when this session was first seen still gets its spans.
            first = msg.records[0][0]
            last = max(first - 1 - PRIME_EVENTS, 0)
            for ev in self._read(sid, last, first - 1):
                self._feed(sid, folder, ev)
            last = first - 1
        n = 0
        for seq, _kind, payload in msg.records:
            if seq <= last:
                continue  # delivered twice
            if seq > last + 1:
                # The sink lost a batch: read the gap back from the spine.
                for ev in self._read(sid, last, seq - 1):
                    spans.extend(self._feed(sid, folder, ev))
                    n += 1
            ev = decode_event(payload)
            spans.extend(self._feed(sid, folder, ev))
            n += 1
            last = seq
            if ev.kind == Kind.LIFECYCLE and ev.phase in _FINAL:
                # A closed session writes no more turns: forget its fold.
                self._folders.pop(sid, None)
                self._last.pop(sid, None)
                last = -1
                break
        if last >= 0:
            self._last[sid] = last
        return n, spans

    def _feed(self, sid: str, folder: SpanFolder, ev: Event) -> list[SpanRecord]:
        if ev.kind == Kind.TURN_STARTED and folder.parent is None:
            folder.parent = self._spawn_of(sid, folder)
        return folder.feed(ev)

    def _spawn_of(self, sid: str, folder: SpanFolder) -> tuple[str, str] | None:
        """The spawn span of a child session's parent, which each of its turns links to,
        as `vertebra trace` links them: from the parent's fold while the spawn is open,
        else from the parent's stream (its ``child.spawned`` is stored before the child
        exists)."""
        parent = folder.metadata.get(GOAL_PARENT, "")
        if not parent:
            return None
        found = self._folders.get(parent)
        if found is not None and (span := found.spawn_span(sid)) is not None:
            return span
        if self._log is None:
            return None
        try:
            upto = self._log.last_seq(parent)
        except Exception:
            log.exception("reading %s back from the spine failed", parent)
            return None
        return spawn_links(self._read(parent, 0, upto), parent).get(sid)

    def _read(self, sid: str, after: int, upto: int) -> list[Event]:
        """Events ``after`` < seq <= ``upto`` of ``sid`` from the spine (none without it)."""
        if self._log is None or upto <= after:
            return []
        out: list[Event] = []
        try:
            while after < upto:
                page = self._log.read(sid, after, min(upto - after, 1000))
                if not page:
                    break
                out.extend(r.event() for r in page if r.seq <= upto)
                after = page[-1].seq
        except Exception:
            log.exception("reading %s back from the spine failed", sid)
        return out

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def start_trace_export(
    host: Any,
    endpoint: str,
    *,
    capture_content: bool = False,
    spine: str = "",
    max_queue: int = DEFAULT_MAX_QUEUE,
    batch: int = DEFAULT_BATCH,
    interval: float = DEFAULT_INTERVAL,
    timeout: float = DEFAULT_TIMEOUT,
    encoding: str = "json",
) -> Any:
    """Start a `TraceExporter` beside ``host``'s Runner; returns its address (stop it with
    `stop_trace_export`). ``spine`` is the host's spine URL when it is not the data
    directory's SQLite file; ``encoding`` is ``json`` (OTLP/JSON) or ``protobuf``."""
    from ..errors import ActorsError

    asys = host._asys
    addr = asys.createActor(TraceExporter)
    rid = request_id()
    msg = StartExport(
        request_id=rid,
        runner=host._runner,
        guardian=host._runtime.guardian if not host._simple else None,
        endpoint=endpoint,
        data_dir=host.data_dir,
        spine=spine,
        capture_content=capture_content,
        max_queue=max_queue,
        batch=batch,
        interval=interval,
        timeout=timeout,
        encoding=encoding,
    )
    reply = host._transport.ask(addr, msg, host.timeout)
    if not isinstance(reply, ExportStarted):
        asys.tell(addr, ActorExitRequest())
        raise ActorsError(f"the trace exporter did not start: {reply!r}")
    return addr


def export_stats(host: Any, addr: Any) -> dict[str, int]:
    """The exporter's counters (`ExportStats`)."""
    reply = host._transport.ask(addr, GetExportStats(request_id=request_id()), host.timeout)
    return dict(reply.counters) if isinstance(reply, ExportStats) else {}


def stop_trace_export(host: Any, addr: Any) -> dict[str, int]:
    """Stop the exporter: it leaves the Runner's sinks, sends what is queued (bounded),
    and exits. Returns its last counters (empty if it did not answer in time)."""
    reply = host._transport.ask(addr, StopExport(request_id=request_id()), host.timeout)
    host._asys.tell(addr, ActorExitRequest())
    return dict(reply.counters) if isinstance(reply, ExportStopped) else {}
