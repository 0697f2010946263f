"""Span records (`projections.SpanRecord`) in OTLP's shapes: the OTLP/JSON document that
`vertebra trace --otlp-json` writes, and the SDK's `ReadableSpan` that its exporters take.

The JSON form needs no OpenTelemetry package; the SDK form imports it (the ``otel`` extra).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from projections import SpanRecord

from .._version import __version__

#: The standard switch for recording message content in GenAI spans.
CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
SERVICE_NAME = "vertebra"
SCOPE_NAME = "vertebra"

_KINDS = {"INTERNAL": 1, "SERVER": 2, "CLIENT": 3, "PRODUCER": 4, "CONSUMER": 5}
_STATUS = {"UNSET": 0, "OK": 1, "ERROR": 2}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def capture_content(environ: Any = None) -> bool:
    """Whether the standard capture switch is on (``true``, case-insensitive)."""
    env = os.environ if environ is None else environ
    return str(env.get(CAPTURE_ENV, "")).strip().lower() == "true"


def nanos(t: datetime | None) -> int:
    """Unix nanoseconds of an event time, exact to the microsecond it was stored with."""
    if t is None:
        return 0
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    d = t - _EPOCH
    return (d.days * 86_400 + d.seconds) * 1_000_000_000 + d.microseconds * 1000


def _any_value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, (tuple, list)):
        return {"arrayValue": {"values": [_any_value(x) for x in v]}}
    return {"stringValue": str(v)}


def _attributes(pairs: Iterable[tuple[str, Any]]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _any_value(v)} for k, v in pairs]


def span_json(s: SpanRecord) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": s.trace_id,
        "spanId": s.span_id,
        "name": s.name,
        "kind": _KINDS.get(s.kind, 1),
        "startTimeUnixNano": str(nanos(s.start)),
        "endTimeUnixNano": str(nanos(s.end)),
        "attributes": _attributes(s.attributes),
        "status": {"code": _STATUS.get(s.status, 0)},
    }
    if s.parent_span_id:
        out["parentSpanId"] = s.parent_span_id
    if s.status_message:
        out["status"]["message"] = s.status_message
    if s.events:
        out["events"] = [
            {
                "timeUnixNano": str(nanos(e.time)),
                "name": e.name,
                "attributes": _attributes(e.attributes),
            }
            for e in s.events
        ]
    if s.links:
        out["links"] = [
            {"traceId": lk.trace_id, "spanId": lk.span_id, "attributes": _attributes(lk.attributes)}
            for lk in s.links
        ]
    return out


def otlp_json(spans: Sequence[SpanRecord]) -> dict[str, Any]:
    """An OTLP/JSON ``ExportTraceServiceRequest`` holding ``spans`` (ids as hex, as the
    OTLP/JSON encoding asks)."""
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _attributes((("service.name", SERVICE_NAME),))},
                "scopeSpans": [
                    {
                        "scope": {"name": SCOPE_NAME, "version": __version__},
                        "spans": [span_json(s) for s in spans],
                    }
                ],
            }
        ]
    }


_sdk_parts: tuple[Any, Any] | None = None


def readable_spans(spans: Sequence[SpanRecord]) -> list[Any]:
    """The SDK's `ReadableSpan` for each record (needs the ``otel`` extra)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

    global _sdk_parts
    if _sdk_parts is None:
        # Resource.create runs the resource detectors: once per process is enough.
        _sdk_parts = (
            Resource.create({"service.name": SERVICE_NAME}),
            InstrumentationScope(SCOPE_NAME, __version__),
        )
    resource, scope = _sdk_parts
    sampled = TraceFlags(TraceFlags.SAMPLED)

    def ctx(trace_id: str, span_id: str) -> Any:
        return SpanContext(
            int(trace_id, 16), int(span_id, 16), is_remote=False, trace_flags=sampled
        )

    out = []
    for s in spans:
        parent = ctx(s.trace_id, s.parent_span_id) if s.parent_span_id else None
        out.append(
            ReadableSpan(
                name=s.name,
                context=ctx(s.trace_id, s.span_id),
                parent=parent,
                resource=resource,
                attributes=dict(s.attributes),
                events=[Event(e.name, dict(e.attributes), nanos(e.time)) for e in s.events],
                links=[Link(ctx(lk.trace_id, lk.span_id), dict(lk.attributes)) for lk in s.links],
                kind=SpanKind[s.kind],
                status=Status(StatusCode[s.status], s.status_message or None),
                start_time=nanos(s.start),
                end_time=nanos(s.end),
                instrumentation_scope=scope,
            )
        )
    return out
