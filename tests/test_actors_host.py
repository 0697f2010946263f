"""The actor runtime through the embedding Host, on real actor systems and a real SQLite file."""

from __future__ import annotations

import pathlib
import threading

import pytest
from actor_helpers import CountingBoom, CountingFactory
from conftest import wait_for

from actors.errors import (
    InterceptorError,
    InvalidRequest,
    Rejected,
    SessionAlreadyExists,
    SessionClosed,
    SessionNotFound,
)
from actors.host import Host
from actors.interceptors import SlashCommands
from spine import Kind, Phase


@pytest.fixture(params=["simpleSystemBase", "multiprocTCPBase"])
def host(request, tmp_path: pathlib.Path, no_leftover_processes):  # type: ignore[no-untyped-def]
    """A Host on each base over a fresh data directory, shut down after the test."""
    h = Host(tmp_path / "data", base=request.param, timeout=20)
    try:
        yield h
    finally:
        h.close()


def _kinds(h: Host, sid: str) -> list[str]:
    return [e.kind for e in h.history(sid)]


def test_create_then_create_again_fails_and_leaves_the_session_untouched(host: Host) -> None:
    """create on an existing id raises SessionAlreadyExists; the first session is unchanged."""
    sid = host.create("dup", metadata={"model.name": "a"})
    before = host.history(sid)
    with pytest.raises(SessionAlreadyExists):
        host.create("dup", metadata={"model.name": "b"})
    assert host.history(sid) == before
    assert host.get(sid).metadata == {"model.name": "a"}


def test_get_of_an_unknown_session_raises_session_not_found(host: Host) -> None:
    """get on an id that was never created raises SessionNotFound."""
    with pytest.raises(SessionNotFound):
        host.get("nobody")


def test_a_bad_session_id_is_refused_with_a_clear_error(host: Host) -> None:
    """Ids with dots, whitespace or wildcards are refused before anything is stored."""
    for bad in ("a.b", "a b", "a*", "a>", ""):
        with pytest.raises(InvalidRequest):
            host.create(bad)


def test_a_message_is_acknowledged_after_commit_and_answered_by_a_turn(host: Host) -> None:
    """send returns the committed seq; the scripted agent answers with the session's model."""
    sid = host.create(metadata={"ore.model.name": "echo-1"})
    ack = host.send(sid, "hello there")
    assert ack.seq > 0 and not ack.duplicate
    assert host.history(sid)[ack.seq - 1].text == "hello there"
    done = host.wait_turn(sid, ack.seq, timeout=20)
    assert done.kind == Kind.TURN_COMPLETED and done.stop_reason == "end_turn"
    assert done.usage is not None and done.usage.output_tokens > 0
    texts = [e.text for e in host.history(sid) if e.kind == Kind.ASSISTANT]
    assert texts == ["[echo-1] hello there"]
    last = host.history(sid)[-1]
    assert last.kind == Kind.LIFECYCLE and last.phase == Phase.DONE


@pytest.mark.parametrize("base", ["simpleSystemBase", "multiprocTCPBase"])
@pytest.mark.parametrize("contended", [True, False])
def test_an_instant_answer_shares_its_messages_append_while_commits_wait(
    base: str,
    contended: bool,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    no_leftover_processes: None,
) -> None:
    """While appends wait (the threshold at 0 stands for a contended log), an agent that
    answers without waiting has its turn stored in the append that stores the message:
    when the ack arrives the answer is there, every event of the turn with the append's
    one time stamp. On a log that commits at once the message is acked after its own
    commit and the answer follows in a second. A turn that must wait (a tool call) ends
    in an append of its own either way."""
    from actors.session.shell import execution

    monkeypatch.setattr(execution, "GROUP_AFTER", 0.0 if contended else 3600.0)
    h = Host(tmp_path / "data", base=base, timeout=20)  # its processes fork the setting
    try:
        sid = h.create()
        start = h.history(sid)[-1].seq
        ack = h.send(sid, "hello")
        h.wait_turn(sid, ack.seq, timeout=20)
        turn = [e for e in h.history(sid) if e.seq > start]
        assert [str(e.kind) for e in turn] == [
            "user.message",
            "turn.started",
            "action.admitted",
            "assistant.message",
            "action.completed",
            "turn.completed",
            "session.lifecycle",
        ]
        assert ack.seq == turn[0].seq
        assert len({e.time for e in turn}) == (1 if contended else 2)
        assert len({e.time for e in turn[:3]}) == 1
        tool = h.send(sid, '!tool calculator {"expression": "2+3"}')
        done = h.wait_turn(sid, tool.seq, timeout=20)
        assert done.kind == Kind.TURN_COMPLETED
        later = [e for e in h.history(sid) if e.seq > tool.seq]
        assert any(e.kind == Kind.TOOL_RESULT and "5" in e.result for e in later)
        assert len({e.time for e in h.history(sid) if e.seq >= tool.seq}) > 1
    finally:
        h.close()


@pytest.mark.parametrize("base", ["simpleSystemBase", "multiprocTCPBase"])
@pytest.mark.parametrize("fail", [False, True])
@pytest.mark.parametrize("contended", [True, False])
def test_each_turn_builds_its_agent_once_whether_it_answers_at_once_or_waits(
    base: str,
    fail: bool,
    contended: bool,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    no_leftover_processes: None,
) -> None:
    """Trying an instant answer builds the turn's agent; a turn that then must wait runs
    that same agent, and a factory that fails is called once and fails the turn once,
    whether the answer is tried ahead of the message's append or after it."""
    from actors.session.shell import execution

    monkeypatch.setattr(execution, "GROUP_AFTER", 0.0 if contended else 3600.0)
    builds = tmp_path / "builds"
    factory = CountingFactory(str(builds), fail=fail)
    h = Host(tmp_path / "data", base=base, timeout=20, factory=factory)
    try:
        sid = h.create()
        for text in ("hello", '!tool calculator {"expression": "2+3"}'):
            done = h.wait_turn(sid, h.send(sid, text).seq, timeout=20)
            assert done.kind == Kind.TURN_COMPLETED
            assert done.error.startswith("agent factory failed") if fail else not done.error
        assert builds.read_text().splitlines() == ["build", "build"]
    finally:
        h.close()


def test_a_redelivered_key_is_acknowledged_again_without_a_second_event(host: Host) -> None:
    """The same idempotency key twice stores one user message and acks both times."""
    sid = host.create()
    a = host.send(sid, "once", key="k-1")
    b = host.send(sid, "once", key="k-1")
    assert b.duplicate and b.seq == a.seq
    host.wait_turn(sid, a.seq)
    assert [e.text for e in host.history(sid) if e.kind == Kind.USER_MESSAGE] == ["once"]


def test_slash_commands_change_metadata_and_the_next_turn_uses_it(host: Host) -> None:
    """/model is stored as a properties event and the next turn's agent is built from it."""
    sid = host.create()
    ack = host.send(sid, "/model sonnet-9")
    assert ack.consumed and ack.notices[0][0] == "success"
    bad = host.send(sid, "/temperature 7")
    assert bad.consumed and bad.seq == 0 and bad.notices[0][0] == "error"
    props = [e.properties for e in host.history(sid) if e.kind == Kind.PROPERTIES]
    assert props == [{"ore.model.name": "sonnet-9"}]
    a = host.send(sid, "hi")
    host.wait_turn(sid, a.seq)
    assert [e.text for e in host.history(sid) if e.kind == Kind.ASSISTANT] == ["[sonnet-9] hi"]


def test_set_metadata_emits_a_properties_event_and_ends_with_done(host: Host) -> None:
    """SetMetadata stores the change and a lifecycle done; a no-op change stores nothing new."""
    sid = host.create()
    a = host.set_metadata(sid, {"model.thinking_level": "high"})
    evs = host.history(sid)
    assert [e.kind for e in evs[-2:]] == [Kind.PROPERTIES, Kind.LIFECYCLE]
    assert host.get(sid).metadata == {"model.thinking_level": "high"}
    assert a.seq == evs[-1].seq


def test_an_interrupt_overtakes_a_hanging_turn_and_keeps_partial_output(host: Host) -> None:
    """A turn blocked in its model call is cancelled at once with its partial text."""
    sid = host.create()
    a = host.send(sid, "!hang")
    with host.subscribe(sid, a.seq, kinds=[Kind.TURN_STARTED]) as sub:
        assert sub.get(20) is not None
    # The partial text is streamed to the actor in batches; wait until it has arrived.
    seen = threading.Event()
    host.add_sink(lambda s, ev, live: seen.set() if live and live[2] == "thinking" else None)
    host.send(sid, "!slow 0.01 warm up")  # queued behind the hanging turn
    interrupt = host.interrupt(sid, reason="user pressed stop")
    assert interrupt.seq > a.seq
    ended = host.wait_turn(sid, a.seq)
    assert ended.kind == Kind.TURN_CANCELLED and ended.reason == "user pressed stop"
    kinds = _kinds(host, sid)
    assert Kind.INTERRUPT in kinds
    # The queued message still runs after the interrupt.
    nxt = host.wait_turn(sid, ended.seq)
    assert nxt.kind == Kind.TURN_COMPLETED


def test_interrupt_with_no_turn_running_stores_nothing(host: Host) -> None:
    """Interrupting an idle session is acknowledged with nothing to do."""
    sid = host.create()
    before = len(host.history(sid))
    ack = host.interrupt(sid)
    assert ack.seq == 0 and len(host.history(sid)) == before


def test_close_records_closed_and_refuses_further_ingress(host: Host) -> None:
    """A closed session has a closed lifecycle event and rejects messages with SessionClosed."""
    sid = host.create()
    host.close_session(sid)
    assert host.history(sid)[-1].phase == Phase.CLOSED
    with pytest.raises(SessionClosed):
        host.send(sid, "anyone?")
    assert host.get(sid).state == "closed"
    host.close_session(sid)  # closing twice is harmless


def test_a_closed_sessions_subscription_ends(host: Host) -> None:
    """A subscription iterating a session ends once the session is closed... via the spine."""
    sid = host.create()
    host.close_session(sid)
    with host.subscribe(sid) as sub:
        kinds = [e.kind for e in sub.drain()]
    assert kinds[0] == Kind.SESSION_STARTED and kinds[-1] == Kind.LIFECYCLE


def test_sinks_get_live_events_and_notices_filtered_by_kind(host: Host) -> None:
    """A sink registered for some kinds sees only those; notices reach sinks but not the log."""
    got: list[str] = []
    notices: list[str] = []
    done = threading.Event()

    def sink(sid: str, ev, live) -> None:  # type: ignore[no-untyped-def]
        if ev is not None:
            got.append(ev.kind)
            if ev.kind == Kind.TURN_COMPLETED:
                done.set()

    host.add_sink(sink, kinds=[Kind.USER_MESSAGE, Kind.TURN_COMPLETED])
    host.add_sink(lambda s, ev, live: notices.append(live[2]) if live else None, kinds=["notice"])
    sid = host.create()
    host.send(sid, "/help")
    host.send(sid, "hi")
    assert done.wait(20)
    assert got == [Kind.USER_MESSAGE, Kind.TURN_COMPLETED]
    # Notices travel apart from the log's events: the turn's end may reach its sink first.
    wait_for(lambda: any("/model" in n for n in notices), timeout=20)
    assert "notice" not in _kinds(host, sid)


def test_a_raising_sink_is_isolated_from_the_others(host: Host) -> None:
    """One sink raising on every event does not stop another sink from seeing all events."""
    done = threading.Event()
    host.add_sink(lambda s, ev, live: 1 / 0)
    host.add_sink(lambda s, ev, live: done.set() if ev and ev.kind == Kind.TURN_COMPLETED else None)
    sid = host.create()
    host.send(sid, "hi")
    assert done.wait(20)
    assert host.stats()["host_sink_failures"] > 0


def test_a_session_switch_is_recorded_for_the_conduit(host: Host) -> None:
    """/switch ID stores a session.switch event naming the target."""
    sid = host.create()
    host.send(sid, "/switch elsewhere")
    sw = [e for e in host.history(sid) if e.kind == Kind.SESSION_SWITCH]
    assert [e.session for e in sw] == ["elsewhere"]


def test_register_inserts_without_checking(host: Host) -> None:
    """register of an unknown id puts it in the registry; of a known one, returns it."""
    info = host.register("reg-1")
    assert info.session_id == "reg-1"
    sid = host.create("reg-2")
    assert host.register(sid).session_id == sid


def test_close_all_closes_every_session(host: Host) -> None:
    """close_all appends a closed event to every live session."""
    a, b = host.create(), host.create()
    host.close_all()
    for sid in (a, b):
        with host.subscribe(sid, kinds=[Kind.LIFECYCLE]) as sub:
            ev = None
            while True:
                nxt = sub.get(10)
                assert nxt is not None, "no closed event"
                if nxt.phase == Phase.CLOSED:
                    ev = nxt
                    break
        assert ev is not None


@pytest.mark.parametrize("policy", ["reject", "interrupt"])
def test_the_mid_turn_policy_rejects_or_interrupts(
    tmp_path: pathlib.Path, policy: str, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """Under reject a message mid-turn is refused; under interrupt it supersedes the turn."""
    h = Host(tmp_path, base="simpleSystemBase", busy_policy=policy)
    try:
        sid = h.create()
        a = h.send(sid, "!hang")
        with h.subscribe(sid, a.seq, kinds=[Kind.TURN_STARTED]) as sub:
            assert sub.get(20) is not None
        if policy == "reject":
            with pytest.raises(Rejected):
                h.send(sid, "second")
            h.interrupt(sid)
        else:
            b = h.send(sid, "second")
            ended = h.wait_turn(sid, a.seq)
            assert ended.kind == Kind.TURN_CANCELLED and ended.reason == "superseded"
            assert h.wait_turn(sid, b.seq).kind == Kind.TURN_COMPLETED
    finally:
        h.close()


@pytest.mark.parametrize("base", ["simpleSystemBase", "multiprocTCPBase"])
def test_an_interceptor_that_raises_is_called_once_and_its_error_reaches_the_caller(
    tmp_path: pathlib.Path, base: str, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """No retry runs the interceptor again; the caller gets InterceptorError, nothing is
    stored, and the session serves on."""
    calls = tmp_path / "calls"
    h = Host(tmp_path / "data", base=base, interceptors=(CountingBoom(str(calls)), SlashCommands()))
    try:
        sid = h.create()
        before = len(h.history(sid))
        with pytest.raises(InterceptorError, match="boom"):
            h.send(sid, "/boom")
        assert calls.read_text().count("call") == 1
        assert len(h.history(sid)) == before
        a = h.send(sid, "still here?")
        assert h.wait_turn(sid, a.seq).kind == Kind.TURN_COMPLETED
        assert h.stats()["poisoned"] == 0
    finally:
        h.close()


def test_a_stalled_conduit_sink_is_bounded_and_does_not_hold_back_others(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """A conduit that never acknowledges gets max_pending batches, then drops are counted,
    while another sink sees every event."""
    from actors import messages as msgs

    h = Host(tmp_path, base="multiprocTCPBase", timeout=20)
    try:
        with h._asys.private() as stalled:
            reply = stalled.ask(h._runner, msgs.AddSink(request_id="stall", max_pending=2), 10)
            assert isinstance(reply, msgs.SinkReply)
            done = threading.Event()
            count = [0]

            def sink(sid: str, ev, live) -> None:  # type: ignore[no-untyped-def]
                if ev is not None and ev.kind == Kind.TURN_COMPLETED:
                    count[0] += 1
                    if count[0] == 5:
                        done.set()

            h.add_sink(sink)
            sid = h.create()
            for i in range(5):
                a = h.send(sid, f"m{i}")
                h.wait_turn(sid, a.seq)
            assert done.wait(20)
            stats = h.stats()
            assert stats["sink_dropped"] > 0
    finally:
        h.close()


def test_the_host_is_usable_from_asyncio_through_an_executor(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """Concurrent coroutines drive several sessions through run_in_executor."""
    import asyncio

    h = Host(tmp_path, base="multiprocTCPBase", timeout=20)
    try:

        async def chat(loop: asyncio.AbstractEventLoop, n: int) -> str:
            sid = await loop.run_in_executor(None, h.create)
            ack = await loop.run_in_executor(None, h.send, sid, f"hi {n}")
            ev = await loop.run_in_executor(None, h.wait_turn, sid, ack.seq)
            return str(ev.kind)

        async def main() -> list[str]:
            loop = asyncio.get_running_loop()
            return list(await asyncio.gather(*(chat(loop, n) for n in range(4))))

        assert asyncio.run(main()) == [Kind.TURN_COMPLETED] * 4
    finally:
        h.close()


def test_a_closed_session_can_still_be_replayed_through_the_protocol(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """Subscribe to a closed session: its backlog then a final closed batch; its process
    then stops again."""
    from conftest import wait_for

    from actors import messages as msgs
    from actors._runtime.system import processes_in_session

    h = Host(tmp_path, base="multiprocTCPBase", timeout=20)
    try:
        base_processes = len(processes_in_session(h.system_session))
        sid = h.create()
        a = h.send(sid, "hi")
        h.wait_turn(sid, a.seq)
        h.close_session(sid)
        n = len(h.history(sid))
        with h._asys.private() as ctx:
            reply = ctx.ask(h._runner, msgs.Subscribe(request_id="r", session_id=sid), 10)
            assert isinstance(reply, msgs.SubscribeReply), reply
            seqs: list[int] = []
            closed = False
            while not closed:
                batch = ctx.listen(10)
                assert isinstance(batch, msgs.EventBatch), batch
                seqs.extend(r[0] for r in batch.records)
                closed = batch.closed
        assert seqs == list(range(1, n + 1))
        wait_for(lambda: len(processes_in_session(h.system_session)) == base_processes, 10)
        assert h.get(sid).state == "closed"
    finally:
        h.close()


def test_sealing_a_live_session_goes_through_the_session_and_tampering_is_found(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """seal/verify run in the session (its stream's only writer), so the conversation goes
    on unharmed; the badge moves sealed -> verified; a flipped byte is located by seq."""
    import sqlite3

    h = Host(tmp_path, base="multiprocTCPBase", timeout=20)
    try:
        sid = h.create()
        a = h.send(sid, "first")
        h.wait_turn(sid, a.seq)
        sealed = h.seal(sid)
        assert sealed.seq > 0 and sealed.first == 1 and sealed.last == sealed.seq - 1
        assert h.status(sid).record == "sealed"
        b = h.send(sid, "after the seal")  # the session's next append must not conflict
        assert h.wait_turn(sid, b.seq).kind == Kind.TURN_COMPLETED
        assert h.seal(sid).first == sealed.seq  # the next seal starts where the last ended
        ok = h.verify(sid)
        assert ok.ok and ok.seq > 0 and h.status(sid).record == "verified"
        assert h.get(sid).restarts == 0

        db = sqlite3.connect(tmp_path / "spine.db")
        try:
            db.execute("DROP TRIGGER events_append_only_update")
            db.execute(
                "UPDATE events SET payload = replace(payload, 'first', 'fir5t') "
                "WHERE stream = ? AND seq = ?",
                (sid, a.seq),
            )
            db.commit()
        finally:
            db.close()
        bad = h.verify(sid)
        assert not bad.ok and f"seq {a.seq}" in bad.summary
    finally:
        h.close()
