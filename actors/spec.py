"""The model configuration of one turn, read from session metadata (pure).

The keys and their one parser live with the metadata fold (`projections.model_settings`).

A turn's agent is built from this spec, so replaying the stream (metadata changes are
events) reproduces every turn's exact model configuration.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs

from projections import (
    LEGACY_PREFIX,
    MODEL_MAX_OUTPUT_TOKENS,
    MODEL_NAME,
    MODEL_TEMPERATURE,
    MODEL_THINKING_LEVEL,
    PARSERS,
    THINKING_LEVELS,
    SettingsError,
    model_settings,
    parse_temperature,
)
from projections import window_key as _window_key

__all__ = [
    "LEGACY_PREFIX",
    "MCP_SERVERS",
    "MODEL_MAX_OUTPUT_TOKENS",
    "MODEL_NAME",
    "MODEL_TEMPERATURE",
    "MODEL_THINKING_LEVEL",
    "PARSERS",
    "THINKING_LEVELS",
    "AgentSpec",
    "ContextView",
    "SettingsError",
    "TurnInput",
    "parse_temperature",
]


_T = TypeVar("_T")


def per_metadata(
    parse: Callable[[Any, Mapping[str, str]], _T],
) -> Callable[[Any, Mapping[str, str]], _T]:
    """Remember the last parse of a metadata mapping by identity.

    A session's fold makes a new mapping whenever the metadata changes and never changes
    one in place, so the same object means the same answer; a turn asked it several times
    (its start, the gate, each model call). Failures are not remembered: they raise again.
    """
    last: tuple[Mapping[str, str], Any] | None = None

    def parsed(cls: Any, metadata: Mapping[str, str]) -> _T:
        nonlocal last
        seen = last  # one read: a turn thread may replace it meanwhile
        if seen is not None and seen[0] is metadata:
            return seen[1]  # type: ignore[no-any-return]
        out = parse(cls, metadata)
        last = (metadata, out)
        return out

    return parsed


@attrs.frozen(kw_only=True)
class AgentSpec:
    """The model configuration of one turn, parsed once from session metadata."""

    model: str = "scripted"
    #: The operator's provider profile (``ore.model.profile``): when set, it decides the
    #: wire format, server and key, and which models ``model`` may name.
    profile: str | None = None
    thinking_level: str = "off"
    temperature: float | None = None
    max_output_tokens: int | None = None
    #: The wire format (a name in `actors.agents.providers.PROVIDERS`); ``scripted`` runs
    #: offline.
    provider: str = "scripted"
    base_url: str | None = None
    #: The name of the environment variable holding the API key (read when the turn runs).
    api_key_env: str | None = None
    #: Ask an OpenAI-compatible server for usage (``stream_options.include_usage``).
    include_usage: bool = True
    #: Idle seconds allowed between chunks.
    timeout: float = 60.0
    system: str | None = None
    max_tool_rounds: int = 8
    #: The operator-configured MCP servers whose tools the session uses (``mcp.servers``).
    mcp_servers: tuple[str, ...] = ()

    @classmethod
    @per_metadata
    def from_metadata(cls, metadata: Mapping[str, str]) -> AgentSpec:
        """The spec the metadata describes; `SettingsError` names a value that cannot be
        used (the turn then ends with that error, the session serves on)."""
        s = model_settings(metadata).check()
        return cls(
            model=s.name or "scripted",
            profile=s.profile,
            thinking_level=s.thinking_level or "off",
            temperature=s.temperature,
            max_output_tokens=s.max_output_tokens,
            provider=s.provider or "scripted",
            base_url=s.base_url,
            api_key_env=s.api_key_env,
            include_usage=True if s.include_usage is None else s.include_usage,
            timeout=60.0 if s.timeout is None else s.timeout,
            system=s.system,
            max_tool_rounds=8 if s.max_tool_rounds is None else s.max_tool_rounds,
            mcp_servers=mcp_servers(metadata),
        )


#: The session's pick among the operator's MCP servers: names, comma- or space-separated.
MCP_SERVERS = "mcp.servers"


def mcp_servers(metadata: Mapping[str, str]) -> tuple[str, ...]:
    """The server names ``mcp.servers`` lists, in order, each once."""
    raw = metadata.get(MCP_SERVERS) or ""
    names = [n for n in raw.replace(",", " ").split() if n]
    return tuple(dict.fromkeys(names))


def window_key(spec: AgentSpec) -> str:
    """Which model a ``context.window`` answer is about: another model or server asks again."""
    return _window_key(spec.provider, spec.base_url or "", spec.model)


@attrs.frozen(kw_only=True)
class ContextView:
    """What the session's log says about the model's context when a turn starts (folded,
    so a replay gives the same): the seq of each history entry, the summary in force and
    the seqs it covers, the window and its source, the settings, and the calibration
    (request characters and the input tokens the provider reported for them)."""

    seqs: tuple[int, ...] = ()
    summary: str = ""
    covered: tuple[int, int] = (0, 0)
    #: Tokens; 0: unknown, the agent asks the server and stores its answer.
    window: int = 0
    window_source: str = ""
    window_key: str = ""
    compact_at: float = 0.8
    keep_recent: int = 2
    summary_model: str = ""
    calibration: tuple[int, int] = (0, 0)
    #: ``/compact`` asked for a summary whether or not one is due.
    force: bool = False


@attrs.frozen(kw_only=True)
class TurnInput:
    """What an agent gets: the message that opened the turn and the conversation so far.

    ``history`` is ``(role, text)`` pairs, oldest first, rebuilt from the session's own
    events: ``user`` and ``assistant`` carry text; ``tool.call`` and ``tool.result`` carry
    a JSON object (``id``, ``name``, ``input`` / ``result``, ``isError``).
    """

    session_id: str
    turn: int
    text: str
    history: tuple[tuple[str, str], ...] = ()
    spec: AgentSpec = AgentSpec()
    #: The turn was paused for an approval and resumes: ``text`` is empty and the tool
    #: calls at the end of ``history`` that have no result yet are to be answered first.
    resume: bool = False
    #: Destinations egress may reach although not public (``governance.egress_allow``).
    egress_allow: tuple[str, ...] = ()
    #: The call id of the turn's first model call, admitted when the turn started (0: ask).
    model_call: int = 0
    #: The turn belongs to a goal run that ends with the ``finish`` tool (``goal.finish``
    #: = ``tool``): the tool is offered, and a call of it that ran ends the turn.
    finish: bool = False
    #: The context to manage (None: send the history as it is, the scripted model's case
    #: without ``ore.model.context_window``).
    context: ContextView | None = None
    #: A replay's turn (`replay_of`): the replayed session and the seq of the user message
    #: this turn answers again there (None: not a replay).
    replay: tuple[str, int] | None = None
    #: The tool calls that turn made, as stored: (tool, input JSON, result, is_error), in
    #: order, read by the session before the turn runs. A call is answered from here, and
    #: never run (a replay has no side effect); one not among them is refused.
    recorded: tuple[tuple[str, str, str, bool], ...] | None = None
    #: The human decisions that turn's calls waited for: (tool, input JSON, approved,
    #: note), in order. An equal call is decided as the human decided then, not asked again.
    approvals: tuple[tuple[str, str, bool, str], ...] = ()


#: A replay's metadata: the session replayed and the seq of its user message whose turn the
#: next turn re-runs (`TurnInput.replay`).
REPLAY_OF = "replay.of"
REPLAY_TURN = "replay.turn"


def replay_of(metadata: Mapping[str, str]) -> tuple[str, int] | None:
    """The turn a replay's next turn re-runs, from the session's metadata (None: none)."""
    parent, turn = metadata.get(REPLAY_OF), metadata.get(REPLAY_TURN, "")
    if not parent or not turn.isdigit() or int(turn) < 1:
        return None
    return parent, int(turn)
