"""The status projection's context part: the window in force, the last request's input
tokens, the compactions and the span the summary in force covers, folded from the stream
(so a status report never folds it again), alike on the Event path, the dict-row path, a
checkpoint and a rebuild; and the same as the session's own fold says."""

from __future__ import annotations

import pathlib

import orjson
from hypothesis import given
from hypothesis import strategies as st
from test_projections_status import SETTINGS, fold_rows, status_events, stored

from actors.session.rules.state import SessionState, fold
from actors.session.rules.views import context_report
from projections import (
    KEPT_COMPACTIONS,
    ContextStatus,
    StatusFolder,
    StatusReducer,
    project,
    window_key,
)
from spine import Event, Kind, SqliteLog, encode_event

MODEL = {
    "ore.model.provider": "openai",
    "ore.model.base_url": "http://127.0.0.1:9/v1",
    "ore.model.name": "m",
}
KEY = window_key("openai", "http://127.0.0.1:9/v1", "m")


def _window(tokens: int, key: str = KEY, source: str = "llama.cpp /props") -> Event:
    return Event(kind=Kind.CONTEXT_WINDOW, extra={"tokens": tokens, "source": source, "key": key})


def _compacted(first: int, last: int) -> Event:
    return Event(kind=Kind.CONTEXT_COMPACTED, text="sum", extra={"fromSeq": first, "toSeq": last})


def _measured(tokens: int, goal: str = "") -> Event:
    extra = {"context": {"chars": tokens * 4, "inputTokens": tokens}}
    return Event(kind=Kind.ACTION_COMPLETED, action="model", call=1, goal=goal, extra=extra)


def _ctx(events: list[Event]) -> ContextStatus:
    evs = stored(events)
    c = project(evs).context
    assert fold_rows(evs).context == c
    return c


def test_a_new_session_knows_no_window_and_reports_nothing() -> None:
    c = _ctx([Event(kind=Kind.USER_MESSAGE, text="hi")])
    assert c == ContextStatus()
    assert (c.remaining, c.fill) == (0, 0.0)
    assert c.report()["covered"] is None


def test_the_window_is_the_setting_else_the_servers_answer_for_the_model_named() -> None:
    meta = Event(kind=Kind.PROPERTIES, properties=MODEL)
    assert _ctx([meta, _window(4096)]).window == 4096
    assert _ctx([meta, _window(4096)]).source == "llama.cpp /props"
    # An answer about another model or server is not this one's.
    assert _ctx([meta, _window(4096, key="openai||other")]).window == 0
    # The model changes: the answer no longer applies; changing back brings it back.
    other = Event(kind=Kind.PROPERTIES, properties={"ore.model.name": "n"})
    assert _ctx([meta, _window(4096), other]).window == 0
    back = Event(kind=Kind.PROPERTIES, properties={"ore.model.name": "m"})
    assert _ctx([meta, _window(4096), other, back]).window == 4096
    # The setting wins over any answer, and unset gives the answer back.
    setting = Event(kind=Kind.PROPERTIES, properties={"ore.model.context_window": "2048"})
    c = _ctx([meta, _window(4096), setting])
    assert (c.window, c.source) == (2048, "setting")
    unset = Event(kind=Kind.PROPERTIES, properties={"ore.model.context_window": None})
    assert _ctx([meta, _window(4096), setting, unset]).window == 4096
    # A setting no turn can use: no window, as the turn would fail on it.
    bad = Event(kind=Kind.PROPERTIES, properties={"ore.model.context_window": "big"})
    assert _ctx([meta, _window(4096), bad]).window == 0


def test_used_is_the_last_measured_request_of_the_sessions_own_calls() -> None:
    meta = Event(kind=Kind.PROPERTIES, properties={**MODEL, "ore.model.context_window": "1000"})
    c = _ctx([meta, _measured(300), _measured(250)])
    assert (c.used, c.remaining, c.fill) == (250, 750, 0.25)
    # A child's call (mirrored onto this stream) is its own, not this session's request.
    spawn = Event(kind=Kind.CHILD_SPAWNED, child="c1")
    assert _ctx([meta, spawn, _measured(300), _measured(900, goal="c1")]).used == 300
    # A call that measured nothing (no usage reported) changes nothing.
    plain = Event(kind=Kind.ACTION_COMPLETED, action="model", call=2)
    assert _ctx([meta, _measured(300), plain]).used == 300
    over = _ctx([meta, _measured(1500)])
    assert (over.remaining, over.fill) == (0, 1.0)


def test_compactions_count_and_the_one_in_force_names_its_span() -> None:
    c = _ctx([_compacted(1, 10), _compacted(1, 30)])
    assert (c.compactions, c.covered) == (2, (1, 30))
    assert c.report()["covered"] == {"fromSeq": 1, "toSeq": 30}
    # A range no view can use is not a compaction.
    assert _ctx([_compacted(1, 10), _compacted(9, 3)]).covered == (1, 10)
    assert _ctx([_compacted(0, 0)]).compactions == 0


def test_taking_a_compaction_back_restores_the_earlier_span() -> None:
    head = [_compacted(1, 10), _compacted(1, 30)]  # stored at seqs 1 and 2
    latest = Event(kind=Kind.CONTEXT_UNCOMPACTED)
    c = _ctx([*head, latest])
    assert (c.covered, c.compactions) == ((1, 10), 2)
    assert _ctx([*head, latest, latest]).covered == (0, 0)
    named = Event(kind=Kind.CONTEXT_UNCOMPACTED, call=1)
    assert _ctx([*head, named]).covered == (1, 30)
    assert _ctx([*head, Event(kind=Kind.CONTEXT_UNCOMPACTED, call=99)]).covered == (1, 30)


def test_only_the_latest_compactions_can_be_taken_back() -> None:
    many = [_compacted(1, 10 + i) for i in range(KEPT_COMPACTIONS + 4)]
    c = _ctx(many)
    assert len(c.kept) == KEPT_COMPACTIONS and c.compactions == KEPT_COMPACTIONS + 4
    back = [Event(kind=Kind.CONTEXT_UNCOMPACTED)] * KEPT_COMPACTIONS
    assert _ctx([*many, *back]).covered == (0, 0)


def test_the_status_says_what_the_sessions_own_fold_says() -> None:
    """The projection and the session's fold (``context_report``) read the same events
    to the same window, source, last measure and span in force."""
    events = stored(
        [
            Event(kind=Kind.PROPERTIES, properties=MODEL),
            Event(kind=Kind.USER_MESSAGE, text="one"),
            _window(4096),
            _measured(120),
            Event(kind=Kind.ASSISTANT, text="reply"),
            _compacted(2, 5),
            _compacted(2, 8),
            Event(kind=Kind.CONTEXT_UNCOMPACTED),
            _measured(80),
        ]
    )
    report = context_report(fold(SessionState(session_id="s"), events))
    c = project(events).context
    assert (c.window, c.source, c.used) == (
        report["window"],
        report["windowSource"],
        report["lastInputTokens"],
    )
    last = report["lastCompaction"]
    assert c.covered == (last["fromSeq"], last["toSeq"])


_context_kinds = st.sampled_from(
    [
        str(Kind.CONTEXT_WINDOW),
        str(Kind.CONTEXT_COMPACTED),
        str(Kind.CONTEXT_UNCOMPACTED),
        str(Kind.ACTION_COMPLETED),
        str(Kind.PROPERTIES),
        str(Kind.CHILD_SPAWNED),
    ]
)
context_lists = st.lists(status_events(_context_kinds), max_size=40)


@SETTINGS
@given(context_lists, context_lists)
def test_both_fold_paths_and_a_checkpoint_agree_on_the_context(
    a: list[Event], b: list[Event]
) -> None:
    evs = stored(a + b)
    want = project(evs)
    assert fold_rows(evs) == want
    head, tail = evs[: len(a)], evs[len(a) :]
    assert fold_rows(tail, project(head)) == want
    f = StatusFolder()
    for e in head:
        f.feed(_row(e))
    g = StatusFolder.load(orjson.loads(orjson.dumps(f.dump())))
    for e in tail:
        g.feed(_row(e))
    assert g.freeze() == want


def _row(e: Event) -> dict[str, object]:
    return orjson.loads(encode_event(e))  # type: ignore[no-any-return]


def test_a_checkpoint_from_before_the_context_loads_empty() -> None:
    f = StatusFolder()
    f.feed(_row(stored([_compacted(1, 4)])[0]))
    d = f.dump()
    del d["context"]
    assert StatusFolder.load(d).freeze().context == ContextStatus()


def test_the_reducer_checkpoints_the_context_and_a_rebuild_gives_it_again(
    tmp_path: pathlib.Path,
) -> None:
    """Folded into checkpoints, resumed by a new reducer, rebuilt from zero: the same."""
    with SqliteLog(tmp_path / "spine.db") as log:
        first = [Event(kind=Kind.PROPERTIES, properties=MODEL), _window(4096), _measured(100)]
        log.append("s", first)
        log.append("s", [_compacted(1, 2)])
        r = StatusReducer(log, tmp_path / "ck.db")
        r.catch_up()
        assert r.status("s").context.covered == (1, 2)
        r.close()
        log.append("s", [_measured(150), _compacted(1, 4)])
        again = StatusReducer(log, tmp_path / "ck.db")
        assert not again.rebuilding  # resumed from its checkpoint
        again.catch_up()
        want = project([rec.event() for rec in log.read("s", 0, None)]).context
        got = again.status("s").context
        assert got == want and (got.window, got.used, got.covered) == (4096, 150, (1, 4))
        again.request_rebuild()
        again.catch_up()
        assert again.status("s").context == want
        again.close()
