"""Operational figures folded from the log: turns and their latency, tokens by type,
model and tool calls, governance decisions and lifecycle outcomes, over every session.

`MetricsFolder` is fed rows in commit order (any number of sessions interleaved) and keeps
only counters and each session's open turn, so it can follow the whole log incrementally;
`actors.otel.prometheus_text` renders it with the Runner's counters.
"""

from __future__ import annotations

from datetime import datetime

import attrs

from spine import Event, Kind, Phase

#: Upper bounds (seconds) of the turn latency histogram's buckets; +Inf is implied.
LATENCY_BUCKETS: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
#: The token types, as the seed's usage fields name them.
TOKEN_TYPES: tuple[str, ...] = ("input", "output", "cache_read", "cache_write", "reasoning")


@attrs.define
class MetricsFolder:
    """Counters over every event folded so far; ``position`` is the last global position
    folded (for an incremental reader)."""

    position: int = 0
    events: int = 0
    sessions: set[str] = attrs.Factory(set)
    turns: dict[str, int] = attrs.Factory(lambda: {"completed": 0, "cancelled": 0, "error": 0})
    latency_buckets: list[int] = attrs.Factory(lambda: [0] * len(LATENCY_BUCKETS))
    latency_sum: float = 0.0
    latency_count: int = 0
    tokens: dict[str, int] = attrs.Factory(lambda: dict.fromkeys(TOKEN_TYPES, 0))
    model_calls: int = 0
    model_faults: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    actions: dict[str, int] = attrs.Factory(lambda: {"admitted": 0, "rejected": 0, "pending": 0})
    egress: dict[str, int] = attrs.Factory(lambda: {"allowed": 0, "blocked": 0})
    lifecycle: dict[str, int] = attrs.Factory(dict)
    _open: dict[str, datetime | None] = attrs.Factory(dict)

    def feed(self, session_id: str, ev: Event, position: int = 0) -> None:
        self.events += 1
        if position > self.position:
            self.position = position
        self.sessions.add(session_id)
        if ev.goal and ev.goal != session_id:
            # A child's events mirrored onto its parent's stream: counted on the child's own.
            return
        kind = ev.kind
        if kind == Kind.TURN_STARTED:
            self._open[session_id] = ev.time
        elif kind in (Kind.TURN_COMPLETED, Kind.TURN_CANCELLED):
            self._end_turn(session_id, ev)
        elif kind == Kind.ACTION_ADMITTED:
            self.actions["admitted"] += 1
            if ev.action == "model" and not ev.tool_use_id:
                self.model_calls += 1
        elif kind == Kind.ACTION_COMPLETED:
            if ev.fault and ev.action == "model":
                self.model_faults += 1
        elif kind == Kind.ACTION_REJECTED:
            self.actions["rejected"] += 1
        elif kind == Kind.ACTION_PENDING:
            self.actions["pending"] += 1
        elif kind == Kind.TOOL_CALL:
            self.tool_calls += 1
        elif kind == Kind.TOOL_RESULT:
            if ev.is_error:
                self.tool_errors += 1
        elif kind == Kind.EGRESS:
            if ev.host:
                self.egress["allowed" if ev.allowed else "blocked"] += 1
        elif kind == Kind.LIFECYCLE and ev.phase and ev.phase != Phase.DONE:
            self.lifecycle[ev.phase] = self.lifecycle.get(ev.phase, 0) + 1

    def _end_turn(self, session_id: str, ev: Event) -> None:
        if ev.kind == Kind.TURN_CANCELLED:
            self.turns["cancelled"] += 1
        elif ev.stop_reason == "error":
            self.turns["error"] += 1
        else:
            self.turns["completed"] += 1
        u = ev.usage
        if u is not None:
            self.tokens["input"] += u.input_tokens
            self.tokens["output"] += u.output_tokens
            self.tokens["cache_read"] += u.cache_read_tokens
            self.tokens["cache_write"] += u.cache_write_tokens
            self.tokens["reasoning"] += u.reasoning_tokens
        start = self._open.pop(session_id, None)
        if start is None or ev.time is None:
            return
        seconds = max((ev.time - start).total_seconds(), 0.0)
        self.latency_sum += seconds
        self.latency_count += 1
        for i, bound in enumerate(LATENCY_BUCKETS):
            if seconds <= bound:
                self.latency_buckets[i] += 1

    @property
    def open_turns(self) -> int:
        return len(self._open)
