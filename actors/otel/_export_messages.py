"""The messages of the live span exporter (`TraceExporter`): start it, stop it, ask for
its counters, and their replies; with the defaults of its queue and batches."""

from __future__ import annotations

from typing import Any

import attrs

#: Spans held for export at most; past it new spans are dropped and counted.
DEFAULT_MAX_QUEUE = 4096
#: Spans per OTLP request at most.
DEFAULT_BATCH = 512
#: Seconds between two exports when fewer than a batch are waiting.
DEFAULT_INTERVAL = 0.5
#: Seconds an OTLP request may take before it counts as failed.
DEFAULT_TIMEOUT = 5.0


@attrs.frozen(kw_only=True)
class StartExport:
    """Start exporting: register with ``runner`` as a sink, send spans to ``endpoint`` (the
    collector's OTLP/HTTP traces URL, e.g. ``http://127.0.0.1:4318/v1/traces``)."""

    request_id: str
    runner: Any
    #: Who replaces a dead Runner: asked after a quiet spell where the Runner is now, so
    #: the sink is registered again with a new one (None: never asked).
    guardian: Any = None
    #: Empty: fold only, export nothing (spans are counted as queued and discarded), the
    #: baseline of the exporter's benchmark.
    endpoint: str
    capture_content: bool = False
    #: Where the spine is (``spine_spec(data_dir, spine)``): a gap in what the sink
    #: delivers is read back from it, so a batch the sink lost loses no span. Empty
    #: ``data_dir``: no read-back.
    data_dir: str = ""
    spine: str = ""
    max_queue: int = DEFAULT_MAX_QUEUE
    batch: int = DEFAULT_BATCH
    interval: float = DEFAULT_INTERVAL
    timeout: float = DEFAULT_TIMEOUT
    #: ``json`` (OTLP/JSON, the default: about a quarter of the CPU per span) or
    #: ``protobuf`` (the SDK's OTLP exporter).
    encoding: str = "json"


@attrs.frozen(kw_only=True)
class ExportStarted:
    request_id: str
    sink_id: str


@attrs.frozen(kw_only=True)
class StopExport:
    """Leave the Runner's sinks and send what is queued; answered `ExportStopped` once the
    Runner has removed the sink, so no batch is sent to an exporter that has exited."""

    request_id: str


@attrs.frozen(kw_only=True)
class ExportStopped:
    request_id: str
    counters: dict[str, int]


@attrs.frozen(kw_only=True)
class GetExportStats:
    request_id: str


@attrs.frozen(kw_only=True)
class ExportStats:
    """``folded`` events, spans ``queued``, ``exported``, ``dropped`` (queue full) and
    ``failed`` (the collector refused or did not answer), ``requests`` sent, the queue's
    current ``depth``, and how often the sink was ``reregistered`` with a new Runner."""

    request_id: str
    counters: dict[str, int]
