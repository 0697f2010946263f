"""The context part of the status (pure): where a session's context window stands, folded
from the stream so that a status report never folds the stream again.

The rules are those of the session's own fold (``actors/session/rules/context.py``) as far
as a status needs them: the window in force (the setting, else the server's stored answer
for the model the metadata names), the input tokens the provider counted for the last
measured model request, the compactions stored and the span the summary in force stands
for. Each rule is a function of plain values, so the `Event` path and the dict-row path
(`projections._status_row_handlers`) call the same code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ._context import context_settings, window_key
from ._metadata import SettingsError, model_settings

#: Compactions kept for taking one back (``context.uncompacted``), as the session keeps
#: them; older ones are still in the log, and a newer compaction covers what they did.
KEPT_COMPACTIONS = 16


@attrs.frozen(kw_only=True)
class ContextStatus:
    """Where the session's context stands.

    ``window`` in tokens (0: not known yet) and ``source`` (``setting``, or where the
    server said it, e.g. ``llama.cpp /props``); ``used``: the input tokens the provider
    counted for the last measured model request; ``compactions``: the ``context.compacted``
    events stored (none is ever removed); ``covered``: the first and last seq of the span
    the summary in force stands for ((0, 0): none). ``answered`` (the server's last
    stored answer: tokens, source, model key) and ``kept`` (compactions that may be taken
    back: seq, first, last; oldest first) are what the fold needs to follow later events.
    """

    window: int = 0
    source: str = ""
    used: int = 0
    compactions: int = 0
    covered: tuple[int, int] = (0, 0)
    answered: tuple[int, str, str] = (0, "", "")
    kept: tuple[tuple[int, int, int], ...] = ()

    @property
    def remaining(self) -> int:
        """Tokens left in the window after the last request (0 when the window is unknown)."""
        return max(0, self.window - self.used) if self.window else 0

    @property
    def fill(self) -> float:
        """The last request's share of the window (the seed's context-fill), 0 if unknown."""
        return round(min(1.0, self.used / self.window), 4) if self.window else 0.0

    def report(self) -> dict[str, Any]:
        """The JSON form status reports give (the HTTP status, ``vertebra status --json``)."""
        a, b = self.covered
        return {
            "window": self.window,
            "source": self.source,
            "used": self.used,
            "remaining": self.remaining,
            "fill": self.fill,
            "compactions": self.compactions,
            "covered": {"fromSeq": a, "toSeq": b} if b else None,
        }


def as_int(x: Any) -> int:
    return int(x) if isinstance(x, int | float) and not isinstance(x, bool) else 0


#: (metadata items, answered) -> `window_in_force`'s answer. It is a pure function of
#: them, and a rebuild asks it on every ``session.properties`` event, mostly with metadata
#: it has seen (parsing every model and context setting again cost about 20 us a time).
_WINDOWS: dict[tuple[Any, ...], tuple[int, str]] = {}


def window_in_force(metadata: Mapping[str, str], answered: tuple[int, str, str]) -> tuple[int, str]:
    """The window the next turn works with and where it came from, as the session's
    ``context_of`` decides it; (0, "") when a setting cannot be used or none is known."""
    key = (*metadata.items(), answered)
    try:
        hit = _WINDOWS.get(key)
    except TypeError:  # a value that is not text: nothing to share
        return _window_in_force(metadata, answered)
    if hit is None:
        hit = _window_in_force(metadata, answered)
        if len(_WINDOWS) >= 4096:
            _WINDOWS.clear()
        _WINDOWS[key] = hit
    return hit


def _window_in_force(
    metadata: Mapping[str, str], answered: tuple[int, str, str]
) -> tuple[int, str]:
    try:
        settings = context_settings(metadata)
        model = model_settings(metadata).check()
    except SettingsError:
        return 0, ""
    if settings.window:
        return settings.window, "setting"
    tokens, source, key = answered
    if tokens and key == window_key(model.provider or "", model.base_url or "", model.name or ""):
        return tokens, source
    return 0, ""


def rewindowed(c: ContextStatus, metadata: Mapping[str, str]) -> ContextStatus:
    """``c`` after the metadata changed (the window setting or the model may have)."""
    window, source = window_in_force(metadata, c.answered)
    if (window, source) == (c.window, c.source):
        return c
    return attrs.evolve(c, window=window, source=source)


def answered(
    c: ContextStatus, metadata: Mapping[str, str], tokens: Any, source: Any, key: Any
) -> ContextStatus:
    """``c`` after a ``context.window`` event (the server's answer)."""
    n = as_int(tokens)
    if n <= 0:
        return c
    c = attrs.evolve(c, answered=(n, str(source or ""), str(key or "")))
    return rewindowed(c, metadata)


def measured(c: ContextStatus, context: Any) -> ContextStatus:
    """``c`` after a model call's ``action.completed`` (its ``context`` field, if any)."""
    if not isinstance(context, Mapping):
        return c
    chars, tokens = as_int(context.get("chars")), as_int(context.get("inputTokens"))
    if chars <= 0 or tokens <= 0 or tokens == c.used:
        return c
    return attrs.evolve(c, used=tokens)


def compacted(c: ContextStatus, seq: int, first: Any, last: Any) -> ContextStatus:
    """``c`` after a ``context.compacted`` event; a range no view can use changes nothing."""
    a, b = as_int(first), as_int(last)
    if b <= 0 or a > b:
        return c
    kept = (*c.kept, (seq, a, b))[-KEPT_COMPACTIONS:]
    return attrs.evolve(c, compactions=c.compactions + 1, covered=(a, b), kept=kept)


def uncompacted(c: ContextStatus, call: Any) -> ContextStatus:
    """``c`` after a ``context.uncompacted`` event: the compaction it names (``call``, else
    the one in force) is taken back, the earlier one is in force again."""
    gone = as_int(call) or (c.kept[-1][0] if c.kept else 0)
    kept = tuple(k for k in c.kept if k[0] != gone)
    if len(kept) == len(c.kept):
        return c
    covered = (kept[-1][1], kept[-1][2]) if kept else (0, 0)
    return attrs.evolve(c, covered=covered, kept=kept)


def context_dump(c: ContextStatus) -> dict[str, Any]:
    """A JSON-ready form of ``c`` for checkpoints."""
    return {
        "window": c.window,
        "source": c.source,
        "used": c.used,
        "compactions": c.compactions,
        "covered": list(c.covered),
        "answered": list(c.answered),
        "kept": [list(k) for k in c.kept],
    }


def context_load(d: Mapping[str, Any] | None) -> ContextStatus:
    """The `ContextStatus` a `context_dump` describes (none, from an older checkpoint: the
    empty one; a rebuild replaces that checkpoint anyway)."""
    if not d:
        return ContextStatus()
    a, b = d["covered"]
    n, source, key = d["answered"]
    return ContextStatus(
        window=d["window"],
        source=d["source"],
        used=d["used"],
        compactions=d["compactions"],
        covered=(a, b),
        answered=(n, source, key),
        kept=tuple((s, f, t) for s, f, t in d["kept"]),
    )
