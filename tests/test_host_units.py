"""The Host's pure parts, without an actor system: the sink merge order, the reply
matcher, failure replies, and session subscriptions that end when the session closes."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from actors import messages as m
from actors.errors import ActorsError, HostTimeout, SessionClosed
from actors.host import SessionSubscription, merge
from actors.host.reading import pending_actions
from actors.host.replies import ReplyMatcher, raise_failed
from actors.messages import Ack, RequestFailed, SinkBatch
from actors.session.protocol import WAITING, FindRequest, RequestWhere
from projections import ProjectionFailed, QueryIndex
from spine import Event, Kind, MemoryLog, Phase

R1 = (1, "user.message", b"{}")
R2 = (2, "turn.started", b"{}")
R3 = (3, "assistant.message", b"{}")


def _shape(items: list[Any]) -> list[Any]:
    """Each merged item as the record's seq or the live item's text."""
    return [r[0] if r is not None else lv[2] for _, r, lv in items]


@pytest.mark.parametrize(
    ("records", "live", "expected"),
    [
        ((), (), []),
        ((R1, R2), (), [1, 2]),
        ((), ((0, "notice", "info", "a"), (0, "notice", "warn", "b")), ["a", "b"]),
        ((R1, R2, R3), ((1, "notice", "info", "n"),), [1, "n", 2, 3]),
        ((R2, R3), ((1, "notice", "info", "before"),), ["before", 2, 3]),
        ((R1, R2), ((2, "text", "", "after"),), [1, 2, "after"]),
        ((R1, R2), ((7, "text", "", "later"),), [1, 2, "later"]),
        (
            (R1, R2, R3),
            ((2, "text", "", "x"), (1, "notice", "info", "y"), (2, "text", "", "z")),
            [1, "y", 2, "x", "z", 3],
        ),
        ((R1, R3), ((1, "a", "", "p"), (1, "b", "", "q")), [1, "p", "q", 3]),
    ],
    ids=[
        "empty",
        "records only",
        "live only keeps its order",
        "a notice between the records it falls between",
        "a live item before the first record of the batch",
        "a live item after the last record",
        "a live item past every record goes last",
        "live items out of order are placed by after_seq, ties keep their order",
        "several live items after one record",
    ],
)
def test_merge_places_each_live_item_after_the_record_it_follows(
    records: tuple[Any, ...], live: tuple[Any, ...], expected: list[Any]
) -> None:
    """A live item (after_seq, kind, severity, text) lands after record after_seq and
    before after_seq + 1; records keep seq order."""
    assert _shape(merge(records, live)) == expected


def test_merge_hands_sinks_the_kind_and_a_three_field_live_item() -> None:
    """The user-facing live item is (kind, severity, text); the kind drives filtering."""
    out = merge((R1,), ((1, "notice", "warn", "careful"),))
    assert out == [("user.message", R1, None), ("notice", None, ("notice", "warn", "careful"))]


def test_a_sink_batch_with_four_field_live_items_pickles() -> None:
    """The live items the Host merges cross processes inside a SinkBatch."""
    import pickle

    batch = SinkBatch(session_id="s", records=(R1,), live=((1, "notice", "info", "hi"),))
    assert pickle.loads(pickle.dumps(batch)) == batch


def _listen_from(queue: list[Any]) -> Any:
    def listen(timeout: float) -> Any:
        return queue.pop(0) if queue else None

    return listen


def test_the_matcher_keeps_other_replies_for_their_own_wait_and_hands_pushes_on() -> None:
    """Replies arriving out of order are each found by their request id; a message with
    no request id is a push."""
    pushes: list[Any] = []
    matcher = ReplyMatcher(pushes.append)
    push = SinkBatch(session_id="s")
    b = Ack(request_id="b", session_id="s", key="k")
    a = Ack(request_id="a", session_id="s", key="k")
    assert matcher.wait(_listen_from([push, a]), "a", 1.0, first=b) is a
    assert pushes == [push]
    assert matcher.wait(_listen_from([]), "b", 0.0) is b
    assert matcher.wait(_listen_from([]), "b", 0.0) is None


def test_the_matcher_matches_projection_replies_like_any_other() -> None:
    """Projection replies carry request ids too: no accepting by type."""
    matcher = ReplyMatcher(lambda msg: None)
    failed = ProjectionFailed(request_id="p", reason="not started")
    other = ProjectionFailed(request_id="q", reason="late")
    assert matcher.wait(_listen_from([other, failed]), "p", 1.0) is failed
    assert QueryIndex(request_id="p").request_id == "p"


def test_the_matcher_forgets_the_oldest_unclaimed_replies_beyond_its_limit() -> None:
    """Late replies nobody waits for do not pile up for ever."""
    matcher = ReplyMatcher(lambda msg: None, limit=2)
    for rid in "abc":
        matcher.offer(Ack(request_id=rid, session_id="s", key="k"))
    assert matcher.take("a") is None
    assert matcher.take("b") is not None and matcher.take("c") is not None


def test_failure_replies_become_errors_of_the_named_class() -> None:
    """RequestFailed names its error class; ProjectionFailed is an ActorsError."""
    with pytest.raises(SessionClosed) as info:
        raise_failed(
            RequestFailed(request_id="r", error="SessionClosed", message="closed", session_id="s")
        )
    assert info.value.session_id == "s"
    with pytest.raises(ActorsError, match="not started"):
        raise_failed(ProjectionFailed(request_id="r", reason="not started"))
    ok = Ack(request_id="r", session_id="s", key="k")
    assert raise_failed(ok) is ok


# -- subscriptions that end ----------------------------------------------------------------


def _session(log: MemoryLog, sid: str = "s1", *, closed: bool) -> int:
    events = [
        Event(kind=Kind.SESSION_STARTED),
        Event(kind=Kind.USER_MESSAGE, text="hi"),
        Event(kind=Kind.LIFECYCLE, phase=Phase.DONE),
    ]
    if closed:
        events.append(Event(kind=Kind.LIFECYCLE, phase=Phase.CLOSED))
    return log.append(sid, events).last_seq


def test_subscribing_to_a_closed_session_hands_out_the_backlog_then_ends() -> None:
    """The backlog ends with the closing lifecycle event; get then answers None at once."""
    log = MemoryLog()
    _session(log, closed=True)
    with SessionSubscription(log, "s1") as sub:
        kinds = [e.kind for e in sub.drain()]
        assert kinds[-1] == Kind.LIFECYCLE and len(kinds) == 4
        assert sub.closed and sub.get(30) is None


def test_a_kinds_filter_applies_but_the_closing_event_is_still_observed() -> None:
    """Filtered to user messages, the subscription delivers only those and still ends."""
    log = MemoryLog()
    _session(log, closed=True)
    with SessionSubscription(log, "s1", kinds=[Kind.USER_MESSAGE]) as sub:
        assert [e.text for e in sub.drain()] == ["hi"]
        assert sub.closed and sub.last_seq == 2


def test_subscribing_after_the_closing_seq_ends_at_once() -> None:
    """A subscription starting past the close (nothing left to hand out) ends immediately."""
    log = MemoryLog()
    last = _session(log, closed=True)
    with SessionSubscription(log, "s1", after_seq=last) as sub:
        assert sub.get(30) is None and sub.closed
    with SessionSubscription(log, "s1", after_seq=1, kinds=[Kind.TURN_COMPLETED]) as sub:
        assert sub.drain() == [] and sub.closed


def test_a_subscription_to_an_open_session_waits_for_more() -> None:
    """No close: get times out with None and the subscription stays open."""
    log = MemoryLog()
    last = _session(log, closed=False)
    with SessionSubscription(log, "s1", after_seq=last) as sub:
        assert sub.get(0.05) is None and not sub.closed
    with SessionSubscription(log, "s1", after_seq=1) as sub:
        assert len(sub.drain()) == 2 and not sub.closed


def test_a_session_closing_while_subscribed_ends_the_iteration() -> None:
    """A reader blocked in iteration gets the closing event, then its loop ends."""
    log = MemoryLog()
    last = _session(log, closed=False)
    sub = SessionSubscription(log, "s1", after_seq=last, kinds=[Kind.USER_MESSAGE])
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.extend(e.text for e in sub), daemon=True)
    reader.start()
    try:
        log.append("s1", [Event(kind=Kind.USER_MESSAGE, text="bye")])
        log.append("s1", [Event(kind=Kind.LIFECYCLE, phase=Phase.CLOSED)])
        reader.join(10)
        assert not reader.is_alive()
        assert got == ["bye"] and sub.closed
    finally:
        sub.close()


def test_a_failed_session_is_not_a_closed_one() -> None:
    """Failed can be restarted: only the closed phase ends a subscription."""
    log = MemoryLog()
    last = _session(log, closed=False)
    log.append("s1", [Event(kind=Kind.LIFECYCLE, phase=Phase.FAILED)])
    with SessionSubscription(log, "s1", after_seq=last) as sub:
        assert sub.get(0) is not None and sub.get(0.05) is None and not sub.closed


class _LossyTransport:
    """Loses the first delivery of every request; answers the second. Asked where a
    request stands, it answers ``where`` as the Runner would (``""``: it never got it),
    or, ``where=None``, never (a session too busy to reach the question)."""

    def __init__(self, where: str | None = "") -> None:
        self.sent: list[object] = []
        self.where = where
        self.answers: dict[str, object] = {}
        self.asked = 0

    def ask(self, to: object, msg: object, timeout: float, request_id: str | None = None) -> object:
        if isinstance(msg, m.GetRunner):
            return m.RunnerAddress(request_id=msg.request_id, address="runner", generation=1)
        self.sent.append(msg)
        return None

    def tell(self, to: object, msg: object) -> None:
        if isinstance(msg, FindRequest):
            self.asked += 1
            if self.where is not None:
                self.answers[msg.request_id] = RequestWhere(
                    request_id=msg.request_id, where=self.where
                )
            return
        self.sent.append(msg)

    def wait(self, request_id: str, timeout: float) -> object:
        if request_id in self.answers:
            return self.answers.pop(request_id)
        if len(self.sent) >= 2 and not request_id.startswith("find"):
            return m.Done(request_id=request_id)
        time.sleep(min(timeout, 0.01))
        return None


def _runtime(t: _LossyTransport, monkeypatch: pytest.MonkeyPatch, timeout: float) -> Any:
    from actors.host import runtime

    monkeypatch.setattr(runtime, "RESEND_AFTER", 0.02)
    monkeypatch.setattr(runtime, "RUNNER_CHECK", 0.01)
    ids = iter(range(10**6))
    monkeypatch.setattr(runtime, "request_id", lambda: f"find-{next(ids)}")
    rt = runtime.Runtime(t, timeout=timeout, follow_restarts=True)  # type: ignore[arg-type]
    rt.runner, rt.generation = "runner", 1
    return rt


def test_an_idempotent_request_lost_in_transit_is_sent_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Thespian delivers at most once: a keyed send the Runner holds nothing of goes out
    again, once."""
    t = _LossyTransport()
    rt = _runtime(t, monkeypatch, 5.0)
    msg = m.SendMessage(request_id="r1", session_id="s", key="k", text="hi")
    assert isinstance(rt.request(msg, 5.0), m.Done)
    assert t.sent == [msg, msg] and t.asked == 1 and rt.resent == 1


@pytest.mark.parametrize("where", [WAITING, None])
def test_a_request_waiting_for_a_loading_or_busy_session_is_not_sent_again(
    monkeypatch: pytest.MonkeyPatch, where: str | None
) -> None:
    """The Runner says it holds the request for a session still loading, or the session
    it went to has not reached the question yet: the Host asks again later instead of
    sending a copy, however long that takes."""
    t = _LossyTransport(where=where)
    rt = _runtime(t, monkeypatch, 5.0)
    msg = m.SendMessage(request_id="r1", session_id="s", key="k", text="hi")
    with pytest.raises(HostTimeout):
        rt.request(msg, 0.3)
    assert t.sent == [msg] and t.asked >= 3 and rt.resent == 0


def test_a_request_to_no_session_is_sent_again_without_asking(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only the Runner holds a list request: nobody to ask, it goes out again."""
    t = _LossyTransport()
    rt = _runtime(t, monkeypatch, 5.0)
    msg = m.ListSessions(request_id="r1")
    assert isinstance(rt.request(msg, 5.0), m.Done)
    assert t.sent == [msg, msg] and t.asked == 0 and rt.resent == 1


def test_a_create_is_never_sent_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second create would report the session it made as already existing."""
    t = _LossyTransport()
    rt = _runtime(t, monkeypatch, 0.2)
    with pytest.raises(HostTimeout):
        rt.request(m.CreateSession(request_id="r2", session_id="s"), 0.2)
    assert len(t.sent) == 1 and t.asked == 0


def test_a_childs_mirrored_admission_and_turn_leave_the_parents_waiting_action_listed() -> None:
    """pending() keys on the run's own calls and turns: a child's events mirrored onto
    the parent with the same call or turn number do not answer the parent's approval."""
    log = MemoryLog()
    waiting = Event(kind=Kind.ACTION_PENDING, turn=1, action="deploy", call=4)
    log.append("p", [Event(kind=Kind.TURN_STARTED, turn=1), waiting])
    log.append(
        "p",
        [
            Event(kind=Kind.ACTION_ADMITTED, goal="p-k", action="model", call=4),
            Event(kind=Kind.TURN_COMPLETED, goal="p-k", turn=1),
        ],
    )
    assert [(e.call, e.action) for e in pending_actions(log, "p")] == [(4, "deploy")]
    log.append("p", [Event(kind=Kind.ACTION_ADMITTED, action="deploy", call=4)])
    assert pending_actions(log, "p") == []


@pytest.mark.parametrize(
    ("kinds", "cut_off"),
    [
        (["session.started"], False),
        (["session.started", "user.message", "turn.started"], True),
        (["turn.started", "tool.call", "record.sealed", "user.message"], True),
        (["turn.started", "turn.completed", "user.message", "record.sealed"], False),
        (["turn.started", "action.pending"], False),  # waits for a human, not cut off
        (["turn.started", "turn.cancelled", "session.lifecycle"], False),
    ],
)
def test_a_stream_that_ends_inside_a_turn_is_told_from_its_last_rows(
    kinds: list[str], cut_off: bool
) -> None:
    """The daemon's start brings back a session only when its newest rows, seals and
    ingress aside, belong to a turn."""
    from actors.host.commands import _ends_in_a_turn
    from spine import Event, MemoryLog

    log = MemoryLog()
    events = [
        Event(kind=k, turn=1, phase="done" if k == "session.lifecycle" else "") for k in kinds
    ]
    res = log.append("s", events)
    assert _ends_in_a_turn(log, "s", res.last_seq) is cut_off
