"""The exporter's queue and the thread that drains it to the collector (`ExportPump`),
with the two OTLP/HTTP encodings it can send: OTLP/JSON and the SDK's protobuf."""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any

from projections import SpanRecord

from ._export_messages import StartExport

log = logging.getLogger("actors.otel")

ENCODINGS = ("json", "protobuf")


class _JsonExporter:
    """POSTs OTLP/JSON (``application/json``, one of OTLP/HTTP's two encodings).

    Measured against the SDK's protobuf path it costs about a quarter of the CPU per span
    (the SDK builds a ReadableSpan, then a protobuf object per attribute); that CPU is
    taken from the sessions on a small machine (docs/performance.md)."""

    def __init__(self, endpoint: str, timeout: float) -> None:
        self.endpoint = endpoint
        self.timeout = timeout

    def export(self, batch: list[SpanRecord]) -> bool:
        import urllib.request

        import orjson

        from ._otlp import otlp_json

        req = urllib.request.Request(
            self.endpoint,
            data=orjson.dumps(otlp_json(batch)),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            resp.read()
            return 200 <= int(resp.status) < 300

    def shutdown(self) -> None:
        pass


class _SdkExporter:
    """The SDK's OTLP/HTTP exporter (protobuf)."""

    def __init__(self, endpoint: str, timeout: float) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        self.sdk = OTLPSpanExporter(endpoint=endpoint, timeout=timeout)

    def export(self, batch: list[SpanRecord]) -> bool:
        from opentelemetry.sdk.trace.export import SpanExportResult

        from ._otlp import readable_spans

        return bool(self.sdk.export(readable_spans(batch)) == SpanExportResult.SUCCESS)

    def shutdown(self) -> None:
        self.sdk.shutdown()  # type: ignore[no-untyped-call]


class ExportPump:
    """The queue and the thread that empties it; the only part that touches the network."""

    def __init__(self, cfg: StartExport) -> None:
        self.cfg = cfg
        self.exporter: Any = None
        if cfg.encoding not in ENCODINGS:
            raise ValueError(f"unknown OTLP encoding {cfg.encoding!r}: use json or protobuf")
        if cfg.endpoint:
            kind = _JsonExporter if cfg.encoding == "json" else _SdkExporter
            self.exporter = kind(cfg.endpoint, cfg.timeout)
        self.queue: collections.deque[SpanRecord] = collections.deque()
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.counters = dict.fromkeys(
            ("folded", "queued", "exported", "dropped", "failed", "requests"), 0
        )
        self.thread = threading.Thread(target=self._run, name="vertebra-otel", daemon=True)
        if self.exporter is not None:
            self.thread.start()

    def offer(self, spans: list[SpanRecord]) -> None:
        if self.exporter is None:
            with self.lock:
                self.counters["queued"] += len(spans)
            return
        with self.lock:
            room = self.cfg.max_queue - len(self.queue)
            take = spans[: max(room, 0)]
            self.queue.extend(take)
            self.counters["queued"] += len(take)
            self.counters["dropped"] += len(spans) - len(take)
            full = len(self.queue) >= self.cfg.batch
        if full:
            self.wake.set()

    def stats(self) -> dict[str, int]:
        with self.lock:
            return {**self.counters, "depth": len(self.queue)}

    def _take(self) -> list[SpanRecord]:
        with self.lock:
            n = min(len(self.queue), self.cfg.batch)
            return [self.queue.popleft() for _ in range(n)]

    def _run(self) -> None:
        while True:
            self.wake.wait(self.cfg.interval)
            self.wake.clear()
            while batch := self._take():
                try:
                    ok = self.exporter.export(batch)
                except Exception:
                    log.exception("span export failed")
                    ok = False
                with self.lock:
                    self.counters["requests"] += 1
                    self.counters["exported" if ok else "failed"] += len(batch)
                if self.stopping.is_set():
                    break
            if self.stopping.is_set():
                return

    def stop(self, timeout: float) -> None:
        # One last drain, bounded: a down collector must not hold the shutdown up.
        if self.exporter is None:
            return
        self.stopping.set()
        self.wake.set()
        self.thread.join(timeout)
        try:
            self.exporter.shutdown()
        except Exception:
            log.exception("span exporter shutdown failed")
