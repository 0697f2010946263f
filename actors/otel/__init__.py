"""OpenTelemetry export of the log's GenAI spans (the ``otel`` extra for the live exporter).

`projections.SpanFolder` folds a session's events into span records; this package writes
them as OTLP/JSON (`otlp_json`, used by ``vertebra trace``), hands them to the SDK's
exporters (`readable_spans`), and exports them live with `TraceExporter`, an actor fed by
the Runner's sink (`start_trace_export`). See docs/operations.md.
"""

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
from ._exporter import (
    TraceExporter,
    export_stats,
    start_trace_export,
    stop_trace_export,
)
from ._metrics import (
    CONTENT_TYPE,
    LogMetrics,
    metrics_figures,
    prometheus_text,
    session_states,
)
from ._otlp import (
    CAPTURE_ENV,
    SCOPE_NAME,
    SERVICE_NAME,
    capture_content,
    nanos,
    otlp_json,
    readable_spans,
    span_json,
)

__all__ = [
    "CAPTURE_ENV",
    "CONTENT_TYPE",
    "DEFAULT_BATCH",
    "DEFAULT_INTERVAL",
    "DEFAULT_MAX_QUEUE",
    "DEFAULT_TIMEOUT",
    "SCOPE_NAME",
    "SERVICE_NAME",
    "ExportStarted",
    "ExportStats",
    "ExportStopped",
    "GetExportStats",
    "LogMetrics",
    "StartExport",
    "StopExport",
    "TraceExporter",
    "capture_content",
    "export_stats",
    "metrics_figures",
    "nanos",
    "otlp_json",
    "prometheus_text",
    "readable_spans",
    "session_states",
    "span_json",
    "start_trace_export",
    "stop_trace_export",
]
