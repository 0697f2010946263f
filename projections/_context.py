"""The context-window settings of a session (session metadata, pure), and the
context state its status reports.

All of the session-settable keys of context management are here, in one table
(`CONTEXT_PARSERS`), so that whoever decides who may set which key finds them together.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs

from ._metadata import SettingsError, model_value

#: The model's context window in tokens. Unset: the server is asked (llama.cpp's
#: ``/props``, vLLM's and Ollama's model listings), else a table of known models, else
#: `DEFAULT_WINDOW`; the answer is stored as a ``context.window`` event.
CONTEXT_WINDOW = "ore.model.context_window"
#: The fraction of the window past which the older conversation is summarised.
CONTEXT_COMPACT_AT = "context.compact_at"
#: User turns always sent verbatim (never summarised).
CONTEXT_KEEP_RECENT = "context.keep_recent"
#: The model that writes summaries (default: the session's own).
CONTEXT_SUMMARY_MODEL = "context.summary_model"

DEFAULT_COMPACT_AT = 0.8
DEFAULT_KEEP_RECENT = 2
#: The window assumed when neither the setting, the server nor the table says: small
#: enough for any model a session may be pointed at.
DEFAULT_WINDOW = 8192


def parse_window(value: str, key: str = CONTEXT_WINDOW) -> int:
    text = value.strip()
    if not text.isdigit() or not 256 <= int(text) <= 100_000_000:
        raise SettingsError(f"{key} must be a number of tokens from 256 up, got {value!r}")
    return int(text)


def parse_compact_at(value: str, key: str = CONTEXT_COMPACT_AT) -> float:
    try:
        x = float(value)
    except ValueError:
        x = math.nan
    if not 0.1 <= x <= 0.95:
        raise SettingsError(
            f"{key} must be a fraction of the window from 0.1 to 0.95, got {value!r}"
        )
    return x


def parse_keep_recent(value: str, key: str = CONTEXT_KEEP_RECENT) -> int:
    text = value.strip()
    if not text.isdigit() or int(text) > 1000:
        raise SettingsError(f"{key} must be a number of turns from 0 to 1000, got {value!r}")
    return int(text)


def parse_summary_model(value: str, key: str = CONTEXT_SUMMARY_MODEL) -> str:
    if not value.strip():
        raise SettingsError(f"{key} must name a model")
    return value.strip()


#: The parser of every context key (``/set`` validates with it).
CONTEXT_PARSERS = {
    CONTEXT_WINDOW: parse_window,
    CONTEXT_COMPACT_AT: parse_compact_at,
    CONTEXT_KEEP_RECENT: parse_keep_recent,
    CONTEXT_SUMMARY_MODEL: parse_summary_model,
}


@attrs.frozen(kw_only=True)
class ContextSettings:
    """What the metadata asks of context management; ``window`` 0: not set."""

    window: int = 0
    compact_at: float = DEFAULT_COMPACT_AT
    keep_recent: int = DEFAULT_KEEP_RECENT
    summary_model: str = ""


def context_settings(metadata: Mapping[str, str]) -> ContextSettings:
    """The context settings of ``metadata``; `SettingsError` names a value that cannot be
    used (the turn then ends with that error, the session serves on)."""
    _, raw_window = model_value(metadata, CONTEXT_WINDOW)
    raw = {k: metadata.get(k) for k in CONTEXT_PARSERS if k != CONTEXT_WINDOW}
    raw[CONTEXT_WINDOW] = raw_window
    parsed = {k: CONTEXT_PARSERS[k](v, k) for k, v in raw.items() if v}
    return ContextSettings(
        window=int(parsed.get(CONTEXT_WINDOW, 0)),  # type: ignore[call-overload]
        compact_at=float(parsed.get(CONTEXT_COMPACT_AT, DEFAULT_COMPACT_AT)),  # type: ignore[arg-type]
        keep_recent=int(parsed.get(CONTEXT_KEEP_RECENT, DEFAULT_KEEP_RECENT)),  # type: ignore[call-overload]
        summary_model=str(parsed.get(CONTEXT_SUMMARY_MODEL, "")),
    )


def window_key(provider: str, base_url: str, model: str) -> str:
    """Which model a ``context.window`` answer is about (another model or server asks
    again); unset provider and model are the scripted model's, as the agent spec reads them."""
    return f"{provider or 'scripted'}|{base_url or ''}|{model or 'scripted'}"
