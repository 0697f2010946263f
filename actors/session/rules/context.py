"""The context part of the session's fold (pure): the compactions in force, the window a
server answered, the calibration of the token estimate. Every piece comes from a stored
event, so the model's view rebuilt on a replay is the one the live session sent."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from projections import KEPT_COMPACTIONS
from spine import Event, Kind

__all__ = ["CONTEXT_HANDLERS", "Compaction", "ContextState", "calibrated"]


@attrs.frozen(kw_only=True)
class Compaction:
    """A stored ``context.compacted``: the summary of seqs ``first`` .. ``last``."""

    seq: int
    first: int
    last: int
    summary: str


@attrs.frozen(kw_only=True)
class ContextState:
    #: Oldest first; the last one is in force.
    compactions: tuple[Compaction, ...] = ()
    window: int = 0
    window_source: str = ""
    window_key: str = ""
    #: Characters of the last measured model request and its reported input tokens.
    calibration: tuple[int, int] = (0, 0)
    #: A ``context.compact`` no compaction has answered yet: the next turn compacts.
    requested: bool = False

    @property
    def current(self) -> Compaction | None:
        return self.compactions[-1] if self.compactions else None


def _int(x: Any) -> int:
    return int(x) if isinstance(x, int | float) and not isinstance(x, bool) else 0


def _compacted(c: ContextState, ev: Event, seq: int) -> ContextState:
    first, last = _int(ev.extra.get("fromSeq")), _int(ev.extra.get("toSeq"))
    if last <= 0 or first > last:
        return c  # a record no view can use: the earlier view stands
    comp = Compaction(seq=seq, first=first, last=last, summary=ev.text)
    kept = (*c.compactions, comp)[-KEPT_COMPACTIONS:]
    return attrs.evolve(c, compactions=kept, requested=False)


def _uncompacted(c: ContextState, ev: Event, seq: int) -> ContextState:
    gone = ev.call or (c.compactions[-1].seq if c.compactions else 0)
    kept = tuple(x for x in c.compactions if x.seq != gone)
    return c if len(kept) == len(c.compactions) else attrs.evolve(c, compactions=kept)


def _requested(c: ContextState, ev: Event, seq: int) -> ContextState:
    return attrs.evolve(c, requested=True)


def _window(c: ContextState, ev: Event, seq: int) -> ContextState:
    tokens = _int(ev.extra.get("tokens"))
    if tokens <= 0:
        return c
    return attrs.evolve(
        c,
        window=tokens,
        window_source=str(ev.extra.get("source", "")),
        window_key=str(ev.extra.get("key", "")),
    )


def calibrated(c: ContextState, ev: Event) -> ContextState:
    """``c`` after a model call's ``action.completed`` that measured its request."""
    m = ev.extra.get("context") if ev.extra else None
    if not isinstance(m, Mapping):
        return c
    chars, tokens = _int(m.get("chars")), _int(m.get("inputTokens"))
    if chars <= 0 or tokens <= 0:
        return c
    return attrs.evolve(c, calibration=(chars, tokens))


def _on(fold: Callable[[ContextState, Event, int], ContextState]) -> Callable[..., dict[str, Any]]:
    def handler(state: Any, ev: Event, seq: int) -> dict[str, Any]:
        return {"context": fold(state.context, ev, seq)}

    return handler


#: The session fold's handlers of the context kinds (`state._HANDLERS` takes them in).
CONTEXT_HANDLERS: dict[str, Callable[..., dict[str, Any]]] = {
    Kind.CONTEXT_COMPACTED: _on(_compacted),
    Kind.CONTEXT_UNCOMPACTED: _on(_uncompacted),
    Kind.CONTEXT_WINDOW: _on(_window),
    Kind.CONTEXT_COMPACT: _on(_requested),
}
