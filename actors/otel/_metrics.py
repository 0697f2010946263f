"""Metrics in the Prometheus text exposition format (version 0.0.4): the log's figures
(`projections.MetricsFolder`, followed incrementally) with the Runner's counters and the
sessions' states. Served by the gateway's ``GET /metrics`` and printed by
``vertebra stats``; no client library needed.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from projections import LATENCY_BUCKETS, TOKEN_TYPES, MetricsFolder
from spine import decode_event

#: The content type Prometheus expects for the text format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_PAGE = 5000

# Runner counter -> (metric, help). Counters only ever grow within one Runner's life.
_RUNNER: dict[str, tuple[str, str]] = {
    "created": ("vertebra_sessions_created_total", "Sessions created."),
    "restarts": ("vertebra_session_restarts_total", "Session processes restarted after a crash."),
    "passivated": ("vertebra_sessions_passivated_total", "Sessions passivated when idle."),
    "rehydrated": ("vertebra_sessions_rehydrated_total", "Passivated sessions brought back."),
    "poisoned": ("vertebra_sessions_poisoned_total", "Ingress dropped after crashing twice."),
    "failed": ("vertebra_sessions_failed_total", "Sessions past their restart budget."),
    "redelivered": ("vertebra_redelivered_total", "Requests redelivered after a crash."),
    "sink_delivered": ("vertebra_sink_delivered_total", "Batches delivered to sinks."),
    "sink_dropped": ("vertebra_sink_dropped_total", "Batches dropped for slow sinks."),
    "sink_failures": ("vertebra_sink_failures_total", "Sink deliveries that failed."),
}
# Runner gauge -> (metric, labels, help): what waits right now.
_QUEUES: dict[str, tuple[str, dict[str, str], str]] = {
    "ingress_pending": (
        "vertebra_ingress_depth",
        {"queue": "pending"},
        "Ingress by queue: pending at the Runner for a live session process, in_flight "
        "forwarded to one and not committed, queued stored and waiting for a turn.",
    ),
    "ingress_in_flight": ("vertebra_ingress_depth", {"queue": "in_flight"}, ""),
    "ingress_queued": ("vertebra_ingress_depth", {"queue": "queued"}, ""),
}
_QUEUE_NAMES = ("pending", "in_flight", "queued")


class LogMetrics:
    """A `MetricsFolder` kept up to date with a log, one page of rows at a time; safe to
    call from several threads."""

    def __init__(self) -> None:
        self.folder = MetricsFolder()
        self._lock = threading.Lock()

    def update(self, log: Any) -> MetricsFolder:
        with self._lock:
            while rows := log.read_rows(self.folder.position, _PAGE):
                for stream, _seq, position, _kind, _version, payload in rows:
                    self.folder.feed(stream, decode_event(payload), position)
                if len(rows) < _PAGE:
                    break
            return self.folder


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
    return "{" + inner + "}"


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


class _Text:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def metric(
        self, name: str, kind: str, help_: str, samples: Sequence[tuple[dict[str, str], float]]
    ) -> None:
        self.lines.append(f"# HELP {name} {help_}")
        self.lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            self.lines.append(f"{name}{_labels(labels)} {_num(value)}")

    def raw(self, line: str) -> None:
        self.lines.append(line)


def metrics_figures(
    folder: MetricsFolder,
    runner: Mapping[str, int] | None = None,
    states: Mapping[str, int] | None = None,
    runtime: Any = None,
) -> dict[str, Any]:
    """The same figures as a JSON-ready mapping (``vertebra stats --json``); ``runtime``
    is the Runner's `RunnerStats` (its gauges: queues and the append latency)."""
    out: dict[str, Any] = {
        "events": folder.events,
        "position": folder.position,
        "sessions_seen": len(folder.sessions),
        "turns": dict(folder.turns),
        "turns_running": folder.open_turns,
        "turn_seconds_sum": round(folder.latency_sum, 6),
        "turn_seconds_count": folder.latency_count,
        "tokens": dict(folder.tokens),
        "model_calls": folder.model_calls,
        "model_faults": folder.model_faults,
        "tool_calls": folder.tool_calls,
        "tool_errors": folder.tool_errors,
        "actions": dict(folder.actions),
        "egress": dict(folder.egress),
        "lifecycle": dict(folder.lifecycle),
    }
    if states is not None:
        out["sessions"] = dict(states)
    if runner is not None:
        out["runner"] = dict(runner)
    if runtime is not None:
        out["queues"] = {
            sid: dict(zip(_QUEUE_NAMES, q, strict=True)) for sid, q in runtime.queues.items()
        }
        out["sink_pending"] = dict(runtime.sinks)
        out["spine_append"] = {
            "bounds": list(runtime.append_bounds),
            "counts": list(runtime.append_counts),
            "seconds_sum": round(runtime.append_seconds, 6),
            "count": sum(runtime.append_counts),
        }
    return out


def prometheus_text(
    folder: MetricsFolder,
    runner: Mapping[str, int] | None = None,
    states: Mapping[str, int] | None = None,
    exporter: Mapping[str, int] | None = None,
    runtime: Any = None,
) -> str:
    """The exposition text. ``runner`` is the Runner's counters (`Host.stats`), ``states``
    the number of sessions in each registry state, ``exporter`` the span exporter's,
    ``runtime`` the Runner's `RunnerStats` (`Host.runner_stats`: queue depths per session
    and sink, the spine append latency histogram)."""
    t = _Text()
    _runner_metrics(t, runner, states)
    if runtime is not None:
        _runtime_gauges(t, runtime)
    _log_metrics(t, folder)
    if exporter is not None:
        _exporter_metrics(t, exporter)
    return "\n".join(t.lines) + "\n"


def _runner_metrics(
    t: _Text, runner: Mapping[str, int] | None, states: Mapping[str, int] | None
) -> None:
    """The sessions by state and the Runner's counters and queue gauges."""
    if states is not None:
        t.metric(
            "vertebra_sessions",
            "gauge",
            "Sessions by state (live, passivated, closed, failed).",
            [({"state": k}, v) for k, v in sorted(states.items())],
        )
    for key, (name, help_) in _RUNNER.items():
        if runner is not None and key in runner:
            t.metric(name, "counter", help_, [({}, runner[key])])
    if runner is not None and "ingress_pending" in runner:
        name, _, help_ = _QUEUES["ingress_pending"]
        samples = [(labels, runner.get(key, 0)) for key, (_, labels, _) in _QUEUES.items()]
        t.metric(name, "gauge", help_, samples)
    if runner is not None and "sink_pending" in runner:
        t.metric(
            "vertebra_sink_pending_batches",
            "gauge",
            "Batches sent to sinks and not acknowledged yet, all sinks.",
            [({}, runner["sink_pending"])],
        )


def _log_metrics(t: _Text, folder: MetricsFolder) -> None:
    """The figures folded from the log: events, turns and their latency, tokens, model
    and tool calls, governance and egress decisions, lifecycle phases."""
    t.metric(
        "vertebra_log_events_total", "counter", "Events folded from the log.", [({}, folder.events)]
    )
    t.metric(
        "vertebra_log_position",
        "gauge",
        "The last global log position folded.",
        [({}, folder.position)],
    )
    _turn_metrics(t, folder)
    t.metric(
        "vertebra_tokens_total",
        "counter",
        "Tokens spent, by type (input includes the cached part).",
        [({"type": k}, folder.tokens[k]) for k in TOKEN_TYPES],
    )
    _call_metrics(t, folder)
    t.metric(
        "vertebra_actions_total",
        "counter",
        "Governance decisions, by decision.",
        [({"decision": k}, v) for k, v in folder.actions.items()],
    )
    t.metric(
        "vertebra_egress_total",
        "counter",
        "Egress decisions, by decision.",
        [({"decision": k}, v) for k, v in folder.egress.items()],
    )
    t.metric(
        "vertebra_lifecycle_total",
        "counter",
        "Session lifecycle events, by phase.",
        [({"phase": k}, v) for k, v in sorted(folder.lifecycle.items())],
    )


def _turn_metrics(t: _Text, folder: MetricsFolder) -> None:
    """Turns ended by outcome, turns running, and the turn latency histogram."""
    t.metric(
        "vertebra_turns_total",
        "counter",
        "Turns ended, by outcome.",
        [({"outcome": k}, v) for k, v in folder.turns.items()],
    )
    t.metric(
        "vertebra_turns_running",
        "gauge",
        "Turns started and not ended yet.",
        [({}, folder.open_turns)],
    )
    name = "vertebra_turn_duration_seconds"
    t.raw(f"# HELP {name} Turn latency, turn.started to its end, from event times.")
    t.raw(f"# TYPE {name} histogram")
    for bound, count in zip(LATENCY_BUCKETS, folder.latency_buckets, strict=True):
        t.raw(f'{name}_bucket{{le="{_num(bound)}"}} {count}')
    t.raw(f'{name}_bucket{{le="+Inf"}} {folder.latency_count}')
    t.raw(f"{name}_sum {_num(round(folder.latency_sum, 6))}")
    t.raw(f"{name}_count {folder.latency_count}")


def _call_metrics(t: _Text, folder: MetricsFolder) -> None:
    """Model calls and their faults, tool calls and their errors."""
    t.metric(
        "vertebra_model_calls_total", "counter", "Model calls admitted.", [({}, folder.model_calls)]
    )
    t.metric(
        "vertebra_model_call_faults_total",
        "counter",
        "Model calls that failed.",
        [({}, folder.model_faults)],
    )
    t.metric(
        "vertebra_tool_calls_total", "counter", "Tool calls asked for.", [({}, folder.tool_calls)]
    )
    t.metric(
        "vertebra_tool_errors_total",
        "counter",
        "Tool results that were errors.",
        [({}, folder.tool_errors)],
    )


def _exporter_metrics(t: _Text, exporter: Mapping[str, int]) -> None:
    """The span exporter's counters and its queue depth."""
    for key in ("exported", "dropped", "failed"):
        t.metric(
            f"vertebra_otel_spans_{key}_total",
            "counter",
            f"Spans {key}.",
            [({}, exporter.get(key, 0))],
        )
    t.metric(
        "vertebra_otel_queue_depth",
        "gauge",
        "Spans waiting for export.",
        [({}, exporter.get("depth", 0))],
    )


def _runtime_gauges(t: _Text, runtime: Any) -> None:
    """Per-session and per-sink queue depths and the spine append latency histogram."""
    t.metric(
        "vertebra_session_ingress_depth",
        "gauge",
        "Ingress per session with any waiting, by queue (see vertebra_ingress_depth).",
        [
            ({"session": sid, "queue": name}, n)
            for sid, q in sorted(runtime.queues.items())
            for name, n in zip(_QUEUE_NAMES, q, strict=True)
        ],
    )
    t.metric(
        "vertebra_sink_queue_depth",
        "gauge",
        "Unacknowledged batches of each actor sink (the sink drops past its bound).",
        [({"sink": k}, v) for k, v in sorted(runtime.sinks.items())],
    )
    counts = list(runtime.append_counts)
    bounds = list(runtime.append_bounds)
    if len(counts) != len(bounds) + 1:
        return
    name = "vertebra_spine_append_duration_seconds"
    t.raw(f"# HELP {name} Spine append latency in session processes and the Runner.")
    t.raw(f"# TYPE {name} histogram")
    running = 0
    for bound, n in zip(bounds, counts, strict=False):
        running += n
        t.raw(f'{name}_bucket{{le="{_num(bound)}"}} {running}')
    total = sum(counts)
    t.raw(f'{name}_bucket{{le="+Inf"}} {total}')
    t.raw(f"{name}_sum {_num(round(runtime.append_seconds, 6))}")
    t.raw(f"{name}_count {total}")


def session_states(infos: Any) -> dict[str, int]:
    """Counts of `SessionInfo.state` over ``infos``."""
    out: dict[str, int] = {}
    for info in infos:
        out[str(info.state)] = out.get(str(info.state), 0) + 1
    return out
