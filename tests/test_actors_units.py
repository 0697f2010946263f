"""Pure parts of the actor layer: messages, interceptors, the session fold, the sink router."""

from __future__ import annotations

import pickle

import attrs
import pytest

from actors import messages
from actors.interceptors import (
    Emitter,
    Ingress,
    InterceptResult,
    NoticeItem,
    SessionView,
    SlashCommands,
    run_chain,
)
from actors.runner import SinkRouter
from actors.session import protocol as _internal
from actors.session.rules.recovery import recovery_events
from actors.session.rules.state import SessionState, fold, metadata_diff
from actors.spec import MODEL_NAME, MODEL_TEMPERATURE, AgentSpec
from spine import Event, Kind, Phase, Usage

_INTERNAL = [
    getattr(_internal, n)
    for n in dir(_internal)
    if attrs.has(getattr(_internal, n)) and getattr(_internal, n).__module__ == _internal.__name__
]


def _sample(cls: type) -> object:
    """An instance of ``cls`` with every required field filled."""
    kwargs: dict[str, object] = {}
    for f in attrs.fields(cls):
        if f.default is not attrs.NOTHING:
            continue
        t = str(f.type)
        if "int" in t and "Mapping" not in t and "tuple" not in t:
            kwargs[f.name] = 1
        elif "Mapping" in t:
            kwargs[f.name] = {"k": "v"}
        elif "tuple" in t:
            kwargs[f.name] = ()
        elif "SessionInfo" in t:
            kwargs[f.name] = messages.SessionInfo(session_id="s", state="live")
        elif "Any" in t:
            kwargs[f.name] = None
        else:
            kwargs[f.name] = "x"
    return cls(**kwargs)


@pytest.mark.parametrize("cls", [*messages.ALL_MESSAGES, *_INTERNAL], ids=lambda c: c.__name__)
def test_every_protocol_message_survives_pickling(cls: type) -> None:
    """Each message class pickles and unpickles to an equal value (multiproc bases pickle)."""
    obj = _sample(cls)
    assert pickle.loads(pickle.dumps(obj)) == obj


def test_every_public_message_is_listed_and_frozen() -> None:
    """ALL_MESSAGES names every attrs class of the protocol module, all of them frozen."""
    public = {
        getattr(messages, n)
        for n in dir(messages)
        if attrs.has(getattr(messages, n)) and getattr(messages, n).__module__ == messages.__name__
    }
    assert public == set(messages.ALL_MESSAGES)
    for cls in public:
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            setattr(_sample(cls), attrs.fields(cls)[0].name, None)


class _Replace:
    def __init__(self, text: str) -> None:
        self.text = text
        self.seen: list[str] = []

    def intercept(self, event: Ingress, session: SessionView, emitter: Emitter) -> InterceptResult:
        self.seen.append(event.text)
        return InterceptResult(
            event=attrs.evolve(event, text=self.text), notices=(NoticeItem("info", self.text),)
        )


class _Consume:
    def intercept(self, event: Ingress, session: SessionView, emitter: Emitter) -> InterceptResult:
        return InterceptResult(event=None, notices=(NoticeItem("warn", "consumed"),))


def _view() -> SessionView:
    return SessionView("s", {}, 0, 0, False)


def test_the_first_replacement_event_wins_and_notices_are_collected_in_order() -> None:
    """Interceptors run in registration order; a later replacement does not override the first."""
    a, b = _Replace("first"), _Replace("second")
    res = run_chain(
        [a, b], Ingress(kind=Kind.USER_MESSAGE, key="k", text="orig"), _view(), Emitter()
    )
    assert res.event is not None and res.event.text == "first"
    assert a.seen == ["orig"] and b.seen == ["first"]
    assert [n.text for n in res.notices] == ["first", "second"]


def test_a_consumed_event_stops_the_chain() -> None:
    """An interceptor returning no event consumes it: later interceptors never run."""
    later = _Replace("never")
    res = run_chain(
        [_Consume(), later], Ingress(kind=Kind.USER_MESSAGE, key="k"), _view(), Emitter()
    )
    assert res.event is None and later.seen == []
    assert [n.severity for n in res.notices] == ["warn"]


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("/model claude-x", MODEL_NAME, "claude-x"),
        ("/temperature 0.5", MODEL_TEMPERATURE, "0.5"),
        ("/thinking high", "ore.model.thinking_level", "high"),
        ("/max-tokens 256", "ore.model.max_output_tokens", "256"),
        ("/set colour blue", "colour", "blue"),
    ],
)
def test_slash_commands_set_metadata_and_consume_the_message(
    text: str, key: str, value: str
) -> None:
    """Each model command writes its metadata key, consumes the message, reports success."""
    view = _view()
    res = SlashCommands().intercept(
        Ingress(kind=Kind.USER_MESSAGE, key="k", text=text), view, Emitter()
    )
    assert res.event is None
    assert view.changes == {key: value}
    assert res.notices[0].severity == "success"


@pytest.mark.parametrize(
    "text",
    ["/model", "/temperature hot", "/temperature 3", "/thinking extreme", "/max-tokens -1",
     "/max-tokens 0", "/switch bad.id", "/nosuch"],
)  # fmt: skip
def test_a_bad_slash_argument_gets_an_error_notice_and_changes_nothing(text: str) -> None:
    """A bad argument or unknown command: error notice, no metadata change, consumed."""
    view = _view()
    res = SlashCommands().intercept(
        Ingress(kind=Kind.USER_MESSAGE, key="k", text=text), view, Emitter()
    )
    assert res.event is None and view.changes == {}
    assert res.notices and res.notices[0].severity == "error"


def test_switch_replaces_the_message_with_a_session_switch() -> None:
    """/switch ID becomes a session switch ingress for the conduit."""
    res = SlashCommands().intercept(
        Ingress(kind=Kind.USER_MESSAGE, key="k", text="/switch other"), _view(), Emitter()
    )
    assert res.event is not None and res.event.kind == Kind.SESSION_SWITCH
    assert res.event.target == "other"


def test_plain_text_passes_through_slash_commands_unchanged() -> None:
    """A message that is not a command is passed on as the same object."""
    ev = Ingress(kind=Kind.USER_MESSAGE, key="k", text="hello")
    assert SlashCommands().intercept(ev, _view(), Emitter()).event is ev


def test_agent_spec_reads_the_metadata_keys_the_commands_write() -> None:
    """The factory's spec comes from the same keys the slash commands set."""
    spec = AgentSpec.from_metadata(
        {MODEL_NAME: "m", MODEL_TEMPERATURE: "0.5", "ore.model.thinking_level": "low",
         "ore.model.max_output_tokens": "9"}
    )  # fmt: skip
    assert spec == AgentSpec(model="m", temperature=0.5, thinking_level="low", max_output_tokens=9)


def _seqd(events: list[Event]) -> list[Event]:
    return [attrs.evolve(e, seq=i + 1) for i, e in enumerate(events)]


def test_the_fold_tracks_metadata_pending_messages_and_the_open_turn() -> None:
    """Folding a stream rebuilds metadata, queued messages and the turn in progress."""
    evs = _seqd(
        [
            Event(kind=Kind.SESSION_STARTED),
            Event(kind=Kind.PROPERTIES, properties={"a": "1", "b": "2"}),
            Event(kind=Kind.PROPERTIES, properties={"b": None}),
            Event(kind=Kind.USER_MESSAGE, text="one"),
            Event(kind=Kind.USER_MESSAGE, text="two"),
            Event(kind=Kind.TURN_STARTED, turn=1),
            Event(kind=Kind.ASSISTANT, turn=1, text="partial"),
        ]
    )
    st = fold(SessionState(session_id="s"), evs)
    assert st.metadata == {"a": "1"}
    assert st.pending == ((5, "two"),)
    assert st.open_turn is not None and st.open_turn.turn == 1 and st.last_seq == 7


def test_recovery_closes_a_turn_a_crash_left_open() -> None:
    """A turn with no end is closed with turn.cancelled (reason crash) and a done lifecycle."""
    evs = _seqd([Event(kind=Kind.USER_MESSAGE, text="x"), Event(kind=Kind.TURN_STARTED, turn=1)])
    st = fold(SessionState(session_id="s"), evs)
    rec = recovery_events(st)
    assert [e.kind for e in rec] == [Kind.TURN_CANCELLED, Kind.LIFECYCLE]
    assert rec[0].reason == "crash" and rec[1].phase == Phase.DONE
    closed = fold(st, _seqd([*evs, *rec])[2:])
    assert closed.open_turn is None and recovery_events(closed) == []


def test_metadata_diff_drops_writes_that_change_nothing() -> None:
    """Setting a key to its value or deleting a missing key stores nothing."""
    assert metadata_diff({"a": "1"}, {"a": "1", "b": None, "c": "3"}) == {"c": "3"}


def _batch_records() -> tuple[tuple[int, str, bytes], ...]:
    return ((1, Kind.USER_MESSAGE.value, b"{}"), (2, Kind.TURN_STARTED.value, b"{}"))


def test_sink_router_filters_by_kind_and_isolates_a_raising_sink() -> None:
    """A raising callable sink is counted and the others still get every batch."""
    got: list[messages.SinkBatch] = []
    router = SinkRouter(lambda to, msg: None)

    def bad(batch: messages.SinkBatch) -> None:
        raise RuntimeError("sink down")

    router.add(bad)
    router.add(got.append, kinds=(Kind.TURN_STARTED.value,))
    router.deliver("s", _batch_records(), ())
    router.deliver("s", _batch_records(), ())
    assert [r[0] for b in got for r in b.records] == [2, 2]
    st = router.stats()
    assert st["sink_failures"] == 2 and st["sink_delivered"] == 2


def test_a_slow_actor_sink_is_bounded_and_its_drops_are_counted() -> None:
    """Past max_pending unacknowledged batches, a sink's batches are dropped and counted."""
    sent: list[object] = []
    router = SinkRouter(lambda to, msg: sent.append(msg))
    sink = router.add("conduit-address", max_pending=2)
    for _ in range(5):
        router.deliver("s", _batch_records(), ())
    assert len(sent) == 2 and router.stats()["sink_dropped"] == 3
    router.ack(sink, 2)
    router.deliver("s", _batch_records(), ())
    assert len(sent) == 3


def test_usage_adds_field_by_field() -> None:
    """Cumulative usage sums every counter."""
    u = Usage(input_tokens=1, output_tokens=2, cache_read_tokens=3, cache_write_tokens=4)
    assert u + u == Usage(
        input_tokens=2, output_tokens=4, cache_read_tokens=6, cache_write_tokens=8
    )


def test_replace_copies_as_attrs_evolve_does_and_falls_back_where_it_must() -> None:
    """The fold's copies skip ``__init__`` only for plain slotted classes; every class gets
    what `attrs.evolve` gives, and a field the class lacks is refused by name."""
    from actors.session.rules import commands as c
    from actors.session.rules.replace import _plain, replace

    st = SessionState(session_id="s")
    state = fold(st, [Event(kind=Kind.USER_MESSAGE, text="hi")])
    assert replace(state, last_seq=9) == attrs.evolve(state, last_seq=9)
    copied = replace(state, turns=3, last_seq=9)
    assert (copied.turns, copied.last_seq, copied.history) == (3, 9, state.history)
    assert copied is not state and state.turns == 0
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        copied.turns = 4  # type: ignore[misc]
    session = c.Session(stored=state)
    assert replace(session, stopping=True) == attrs.evolve(session, stopping=True)
    assert _plain(SessionState) is not None and _plain(c.Session) is not None

    # Converters (the event's), a validator or a post-init hook: through attrs.evolve.
    ev = Event(kind=Kind.USER_MESSAGE, text="hi", properties={"a": "b"})
    assert _plain(Event) is None
    assert replace(ev, text="yo") == attrs.evolve(ev, text="yo")

    @attrs.frozen
    class Checked:
        n: int = attrs.field(validator=attrs.validators.instance_of(int))

    assert _plain(Checked) is None
    with pytest.raises(TypeError):
        replace(Checked(1), n="x")
    with pytest.raises(TypeError, match="nope"):
        replace(state, nope=1)


def test_only_the_queueing_kinds_can_leave_work_for_a_turn() -> None:
    """The decider skips folding a decision's events when none is of `QUEUEING_KINDS`:
    folding any other kind, with any fields a handler reads, leaves nothing pending and
    no goal run in flight."""
    from actors.session.rules.state import _HANDLERS, QUEUEING_KINDS

    sid = "s"
    for kind in _HANDLERS:
        ev = Event(kind=kind, text="x", goal=sid, turn=1, call=1, phase=Phase.DONE, child="c")
        after = fold(SessionState(session_id=sid), [ev])
        queued = bool(after.pending) or after.running_goal is not None
        assert queued == (kind in QUEUEING_KINDS), kind
