"""What several rules read off the folded state or an append's rows (pure). Kept below
`decide`, `gate`, `goals` and `turns` so that none of them imports another only for a
query: the rules stack without cycles."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from projections import SettingsError, context_settings
from spine import Kind

from ...agents.context import chars_of, estimate, model_view
from ...spec import AgentSpec, ContextView, TurnInput, window_key
from .state import SessionState

__all__ = ["context_of", "context_report", "history_before", "ingress_seq"]


def ingress_seq(records: Sequence[tuple[int, str]]) -> int:
    """The seq an `Ack` names for an append given as ``(seq, kind)`` rows: its last event
    before the turn start the decider may have added (its last event if none)."""
    for i, (_, kind) in enumerate(records):
        if kind == Kind.TURN_STARTED and i > 0:
            return records[i - 1][0]
    return records[-1][0] if records else 0


def history_before(st: SessionState) -> tuple[tuple[str, str], ...]:
    """The conversation an agent sees for the next waiting message: everything said so
    far except the messages still waiting for their turns, itself included (a message
    queued behind a running turn sees that turn's answer, stored after it)."""
    waiting = {at for at, _ in st.pending}
    return tuple((role, text) for role, text, at in st.history if at not in waiting)


def context_of(st: SessionState, spec: AgentSpec) -> ContextView | None:
    """What the next turn's agent needs to manage its context, aligned with
    `history_before`; None when there is nothing to manage (the scripted model without
    ``ore.model.context_window``). `SettingsError` names a context setting that cannot be
    used."""
    settings = context_settings(st.metadata)
    if not settings.window and spec.provider == "scripted":
        return None
    waiting = {at for at, _ in st.pending}
    c = st.context
    key = window_key(spec)
    window, source = settings.window, "setting"
    if not window and c.window_key == key:
        window, source = c.window, c.window_source
    elif not window:
        source = ""
    cur = c.current
    return ContextView(
        seqs=tuple(at for _, _, at in st.history if at not in waiting),
        summary=cur.summary if cur is not None else "",
        covered=(cur.first, cur.last) if cur is not None else (0, 0),
        window=window,
        window_source=source,
        window_key=key,
        compact_at=settings.compact_at,
        keep_recent=settings.keep_recent,
        summary_model=settings.summary_model,
        calibration=c.calibration,
        force=c.requested,
    )


def context_report(st: SessionState) -> dict[str, Any]:
    """Where the session's context stands, for status displays: the window and where it
    came from, the estimate of the next request (the history as the next turn would
    send it, without a new message), the last request the provider counted, and the last
    compaction. Empty when there is nothing to manage."""
    try:
        spec = AgentSpec.from_metadata(st.metadata)
        ctx = context_of(st, spec)
    except SettingsError as exc:
        return {"error": str(exc)}
    if ctx is None:
        return {}
    ti = TurnInput(session_id=st.session_id, turn=0, text="", history=history_before(st), spec=spec)
    system, msgs, _ = model_view(attrs.evolve(ti, context=ctx), spec.system)
    est = estimate(ctx, chars_of(system, msgs))
    out: dict[str, Any] = {
        "window": ctx.window,
        "windowSource": ctx.window_source or "not asked yet",
        "estimate": est,
        "compactAt": ctx.compact_at,
        "lastInputTokens": ctx.calibration[1],
        "compactions": len(st.context.compactions),
    }
    if ctx.window:
        out["used"] = round(est / ctx.window, 4)
    cur = st.context.current
    if cur is not None:
        out["lastCompaction"] = {"seq": cur.seq, "fromSeq": cur.first, "toSeq": cur.last}
    return out
