"""Interceptors: the chain that sees ingress before it reaches the session, and the slash
commands.

Every ingress goes through the chain: user messages, interrupts, metadata changes and
session switches (the seed's ``Runner.Run``). The chain runs in registration order. An
interceptor returns the event to pass on (the same one, or a replacement: the first
replacement wins), or ``None`` to consume it, which stops the chain. It gets an `Emitter`
(the seed's ``Session.Emitter()``) to publish while it runs: notices (live, never stored)
and stored events, both delivered in the order they were emitted. Notices in the result
are emitted after the chain.

Interceptors travel to the session processes inside `RunnerConfig`: they must pickle. One
that raises is called once; its error reaches the caller as `InterceptorError` and the
session serves on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

import attrs

from projections import (
    CONTEXT_PARSERS,
    MODEL_BASE_URL,
    MODEL_PROVIDER,
    parse_base_url,
    secret_problem,
)
from spine import EPHEMERAL_KINDS, Event, InvalidStreamIdError, Kind, Severity, validate_session_id

from .agents.providers import known_providers
from .authority import NO_SERVERS, Authority, refusal
from .errors import InvalidRequest
from .model_servers import ModelServers
from .spec import (
    MODEL_MAX_OUTPUT_TOKENS,
    MODEL_NAME,
    MODEL_TEMPERATURE,
    MODEL_THINKING_LEVEL,
    PARSERS,
    THINKING_LEVELS,
    SettingsError,
    parse_temperature,
)


@attrs.frozen(kw_only=True)
class Ingress:
    """One ingress as interceptors see it. ``kind`` is a `spine.Kind` of the session
    vocabulary (user message, interrupt, properties, session switch)."""

    kind: str
    key: str
    text: str = ""
    target: str = ""
    properties: Mapping[str, str | None] = attrs.field(factory=dict)
    #: On whose behalf a properties ingress comes (`actors.authority.Authority`).
    authority: str = "operator"
    #: A user message's own busy policy ("": the session's; see `actors.policy.BusyPolicy`).
    mode: str = ""
    #: A user message that starts a branch: the seq of the past user message it replaces,
    #: or that it answers again (-1: the latest on the active path).
    edits: int = 0
    regenerates: int = 0
    #: A branch switch: the turn (its user message's seq) the active path goes through.
    turn: int = 0


@attrs.frozen
class NoticeItem:
    severity: str
    text: str


@attrs.frozen(kw_only=True)
class InterceptResult:
    """``event`` None means consumed. ``notices`` are emitted after the chain."""

    event: Ingress | None
    notices: tuple[NoticeItem, ...] = ()


class SessionView:
    """What an interceptor may see and do: read the session, change its metadata.

    Metadata changes are collected and stored by the session as one properties event after
    the chain, so an interceptor never writes to the log itself.
    """

    def __init__(
        self,
        session_id: str,
        metadata: Mapping[str, str],
        last_seq: int,
        turns: int,
        running: bool,
        *,
        model_servers: ModelServers = NO_SERVERS,
    ) -> None:
        self.session_id = session_id
        #: The model servers the operator lets the session name (`actors.model_servers`).
        self.model_servers = model_servers
        self._metadata = dict(metadata)
        self.last_seq = last_seq
        self.turns = turns
        self.running = running
        self.changes: dict[str, str | None] = {}

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self._metadata)

    def get_metadata(self, key: str) -> str | None:
        return self._metadata.get(key)

    def set_metadata(self, key: str, value: str | None) -> None:
        if value is None:
            self._metadata.pop(key, None)
        else:
            self._metadata[key] = value
        self.changes[key] = value


#: Kinds only the session's own decisions write: an interceptor may not emit them.
RESERVED_KINDS = frozenset(
    {
        Kind.USER_MESSAGE,
        Kind.INTERRUPT,
        Kind.SESSION_STARTED,
        Kind.TURN_STARTED,
        Kind.TURN_COMPLETED,
        Kind.TURN_CANCELLED,
        Kind.LIFECYCLE,
        Kind.RECORD_SEALED,
        Kind.RECORD_VERIFIED,
        Kind.STEER_DELIVERED,
        Kind.STEER_DROPPED,
        Kind.BRANCH_SWITCHED,
        Kind.SESSION_FORKED,
    }
)


class Emitter:
    """Publishes while an interceptor runs: notices go live to sinks, events are stored
    with the ingress (before its own events), all in the order they were emitted."""

    def __init__(self) -> None:
        self.items: list[Event | NoticeItem] = []

    def notice(self, severity: str, text: str) -> None:
        self.items.append(NoticeItem(str(Severity(severity)), str(text)))

    def emit(self, event: Event) -> None:
        """Store ``event`` on the session's stream (a notice event is only pushed live)."""
        if not isinstance(event, Event):
            raise InvalidRequest(f"an interceptor emits spine.Event, not {type(event).__name__}")
        if event.kind in EPHEMERAL_KINDS:
            self.items.append(NoticeItem(event.severity or Severity.INFO, event.text))
            return
        if event.kind in RESERVED_KINDS:
            raise InvalidRequest(f"an interceptor may not emit {event.kind} events")
        self.items.append(event)


@runtime_checkable
class Interceptor(Protocol):
    def intercept(
        self, event: Ingress, session: SessionView, emitter: Emitter
    ) -> InterceptResult: ...


def run_chain(
    interceptors: Sequence[Interceptor], event: Ingress, session: SessionView, emitter: Emitter
) -> InterceptResult:
    """Run the chain in order: first replacement wins, a consumed event stops it.

    Exceptions propagate: the caller answers them and no interceptor is called twice.
    """
    current = event
    replaced = False
    notices: list[NoticeItem] = []
    for icpt in interceptors:
        res = icpt.intercept(current, session, emitter)
        notices.extend(res.notices)
        if res.event is None:
            return InterceptResult(event=None, notices=tuple(notices))
        if not replaced and res.event is not current:
            current = res.event
            replaced = True
    return InterceptResult(event=current, notices=tuple(notices))


def _ok(text: str) -> InterceptResult:
    return InterceptResult(event=None, notices=(NoticeItem(Severity.SUCCESS, text),))


def _err(text: str) -> InterceptResult:
    return InterceptResult(event=None, notices=(NoticeItem(Severity.ERROR, text),))


_HELP = """\
/model NAME         model for the next turns
/provider NAME [URL [MODEL]]  wire format ({providers}),
                    server URL and model
/temperature X      sampling temperature, 0 to 2
/thinking LEVEL     thinking level: off, low, medium, high
/max-tokens N       maximum output tokens per turn (positive integer)
/set KEY VALUE      any metadata key (no VALUE deletes it)
/switch ID          move the conduit to session ID
/compact            summarise the older conversation before the next turn
/uncompact          take the last summary back (the model sees those events again)
/status             this session's state
/help               this list"""


class SlashCommands:
    """The built-in slash commands. A bad argument gets an error notice; nothing is stored."""

    def intercept(self, event: Ingress, session: SessionView, emitter: Emitter) -> InterceptResult:
        if event.kind != Kind.USER_MESSAGE or not event.text.startswith("/"):
            return InterceptResult(event=event)
        parts = event.text.strip().split(maxsplit=2)
        cmd, args = parts[0], parts[1:]
        if cmd in ("/compact", "/uncompact"):
            return _context_command(cmd, emitter) if len(parts) == 1 else _err(f"usage: {cmd}")
        handler = _COMMANDS.get(cmd)
        if handler is None:
            return _err(f"unknown command {cmd}; /help lists the commands")
        return handler(event, session, args)


def _context_command(cmd: str, emitter: Emitter) -> InterceptResult:
    if cmd == "/compact":
        emitter.emit(Event(kind=Kind.CONTEXT_COMPACT))
        return _ok("the next turn starts by summarising the older conversation")
    emitter.emit(Event(kind=Kind.CONTEXT_UNCOMPACTED))
    return _ok("the last summary is taken back, if there was one")


def _model(event: Ingress, s: SessionView, args: list[str]) -> InterceptResult:
    if len(args) != 1:
        return _err("usage: /model NAME")
    s.set_metadata(MODEL_NAME, args[0])
    return _ok(f"model set to {args[0]}")


def _provider(event: Ingress, s: SessionView, args: list[str]) -> InterceptResult:
    known = known_providers()
    usage = f"usage: /provider NAME [BASE_URL [MODEL]], NAME one of {', '.join(known)}"
    words = args[:1] + (args[1].split() if len(args) > 1 else [])
    if not 1 <= len(words) <= 3 or words[0] not in known:
        return _err(usage)
    url = None
    if len(words) >= 2:
        try:
            url = parse_base_url(words[1])
        except SettingsError as exc:
            return _err(str(exc))
    asked: dict[str, str | None] = {MODEL_PROVIDER: words[0]}
    if url is not None:
        asked[MODEL_BASE_URL] = url
    problem = refusal(asked, s.metadata, Authority.SESSION, s.model_servers)
    if problem is not None:
        return _err(problem)
    s.set_metadata(MODEL_PROVIDER, words[0])
    text = f"provider set to {words[0]}"
    if url is not None:
        s.set_metadata(MODEL_BASE_URL, url)
        text += f" at {url}"
    if len(words) == 3:
        s.set_metadata(MODEL_NAME, words[2])
        text += f", model {words[2]}"
    return _ok(text)


def _temperature(event: Ingress, s: SessionView, args: list[str]) -> InterceptResult:
    if len(args) != 1:
        return _err("usage: /temperature X (0 to 2)")
    try:
        x = parse_temperature(args[0])
    except SettingsError as exc:
        return _err(str(exc))
    s.set_metadata(MODEL_TEMPERATURE, repr(x))
    return _ok(f"temperature set to {x}")


def _thinking(event: Ingress, s: SessionView, args: list[str]) -> InterceptResult:
    if len(args) != 1 or args[0] not in THINKING_LEVELS:
        return _err(f"usage: /thinking LEVEL, one of {', '.join(THINKING_LEVELS)}")
    s.set_metadata(MODEL_THINKING_LEVEL, args[0])
    return _ok(f"thinking level set to {args[0]}")


def _max_tokens(event: Ingress, s: SessionView, args: list[str]) -> InterceptResult:
    if len(args) != 1 or not args[0].isdigit() or int(args[0]) <= 0:
        return _err("usage: /max-tokens N, N a positive integer")
    s.set_metadata(MODEL_MAX_OUTPUT_TOKENS, str(int(args[0])))
    return _ok(f"max output tokens set to {int(args[0])}")


def _set(event: Ingress, s: SessionView, args: list[str]) -> InterceptResult:
    if not args:
        return _err("usage: /set KEY [VALUE]")
    key = args[0]
    value = args[1] if len(args) > 1 else None
    problem = secret_problem({key: value}) or refusal(
        {key: value}, s.metadata, Authority.SESSION, s.model_servers
    )
    if problem is not None:
        return _err(problem)
    parse = PARSERS.get(key) or CONTEXT_PARSERS.get(key)
    if parse is not None and value is not None:
        try:
            parse(value, key)
        except SettingsError as exc:
            return _err(str(exc))
    s.set_metadata(key, value)
    return _ok(f"{key} deleted" if value is None else f"{key} set")


def _switch(event: Ingress, s: SessionView, args: list[str]) -> InterceptResult:
    if len(args) != 1:
        return _err("usage: /switch ID")
    try:
        validate_session_id(args[0])
    except InvalidStreamIdError as exc:
        return _err(str(exc))
    return InterceptResult(
        event=Ingress(kind=Kind.SESSION_SWITCH, key=event.key, target=args[0]),
        notices=(NoticeItem(Severity.INFO, f"switching to {args[0]}"),),
    )


def _status(event: Ingress, s: SessionView, args: list[str]) -> InterceptResult:
    meta = ", ".join(f"{k}={v}" for k, v in sorted(s.metadata.items())) or "none"
    state = "running a turn" if s.running else "idle"
    text = f"session {s.session_id}: {state}, {s.turns} turns, seq {s.last_seq}, metadata {meta}"
    return InterceptResult(event=None, notices=(NoticeItem(Severity.INFO, text),))


def _help_text() -> str:
    return _HELP.format(providers=", ".join(known_providers()))


def _help(event: Ingress, s: SessionView, args: list[str]) -> InterceptResult:
    return InterceptResult(event=None, notices=(NoticeItem(Severity.INFO, _help_text()),))


_COMMANDS = {
    "/model": _model,
    "/provider": _provider,
    "/temperature": _temperature,
    "/thinking": _thinking,
    "/max-tokens": _max_tokens,
    "/set": _set,
    "/switch": _switch,
    "/status": _status,
    "/help": _help,
}
