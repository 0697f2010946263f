"""Fault isolation on real processes: kills, restarts, passivation, poison, many threads."""

from __future__ import annotations

import os
import pathlib
import signal
import threading
import time

import pytest
from actor_helpers import SuicideInterceptor
from conftest import wait_for

from actors.errors import PoisonMessageError, SessionFailed
from actors.host import Host
from actors.interceptors import SlashCommands
from spine import Event, Kind, Phase

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def mp(tmp_path: pathlib.Path, no_leftover_processes):  # type: ignore[no-untyped-def]
    h = Host(tmp_path / "data", base="multiprocTCPBase", timeout=20)
    try:
        yield h
    finally:
        h.close()


def _assert_gapless(events: list[Event]) -> None:
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


def test_sigkill_mid_turn_leaves_other_sessions_serving_and_loses_nothing(mp: Host) -> None:
    """Kill a session's process mid-turn while it is tailed and others chat: it comes back
    with the same state, every acknowledged message is kept, the open turn is closed
    explicitly, seqs stay gapless and the subscriber sees every event exactly once."""
    victim = mp.create(metadata={"model.name": "m"})
    others = [mp.create() for _ in range(3)]
    a = mp.send(victim, "!slow 0.05 one two three four five six seven eight nine ten")
    sub = mp.subscribe(victim)
    try:
        with mp.subscribe(victim, a.seq, kinds=[Kind.TURN_STARTED]) as started:
            assert started.get(20) is not None
        before_pid = mp.session_pid(victim)
        queued = mp.send(victim, "after the crash")  # acknowledged, not yet answered

        chat_errors: list[BaseException] = []

        def chat(sid: str) -> None:
            try:
                for i in range(3):
                    ack = mp.send(sid, f"msg {i}")
                    assert mp.wait_turn(sid, ack.seq).kind == Kind.TURN_COMPLETED
            except BaseException as exc:
                chat_errors.append(exc)

        threads = [threading.Thread(target=chat, args=(s,)) for s in others]
        for t in threads:
            t.start()
        os.kill(before_pid, signal.SIGKILL)
        for t in threads:
            t.join(60)
        assert not chat_errors

        # The cut-off turn is closed explicitly; the queued message is answered afterwards.
        ended = mp.wait_turn(victim, a.seq)
        assert ended.kind == Kind.TURN_CANCELLED and ended.reason == "crash"
        assert ended.seq > queued.seq
        answered = mp.wait_turn(victim, ended.seq)
        assert answered.kind == Kind.TURN_COMPLETED
        assert mp.session_pid(victim) != before_pid
        assert mp.get(victim).metadata == {"model.name": "m"}
        assert mp.get(victim).restarts == 1

        evs = mp.history(victim)
        _assert_gapless(evs)
        users = [e.text for e in evs if e.kind == Kind.USER_MESSAGE]
        assert users == [
            "!slow 0.05 one two three four five six seven eight nine ten",
            "after the crash",
        ]
        seen = []
        while len(seen) < len(evs):
            ev = sub.get(20)
            assert ev is not None
            seen.append(ev.seq)
        assert seen == [e.seq for e in evs]
        for sid in others:
            _assert_gapless(mp.history(sid))
    finally:
        sub.close()


def test_an_idle_session_is_passivated_and_comes_back_as_it_was(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """With an idle timeout the session's process stops; the next request brings it back."""
    h = Host(tmp_path, base="multiprocTCPBase", idle_timeout=0.3, timeout=20)
    try:
        sid = h.create()
        h.send(sid, "/model kept")
        pid = h.session_pid(sid)
        wait_for(lambda: h.stats()["passivated"] >= 1, timeout=20)
        wait_for(lambda: not os.path.exists(f"/proc/{pid}") or _zombie(pid), timeout=20)
        info = h.get(sid)
        assert info.metadata == {"ore.model.name": "kept"} and info.state == "live"
        a = h.send(sid, "hello again")
        assert h.wait_turn(sid, a.seq).kind == Kind.TURN_COMPLETED
        assert h.session_pid(sid) != pid
        assert [e.text for e in h.history(sid) if e.kind == Kind.ASSISTANT] == [
            "[kept] hello again"
        ]
    finally:
        h.close()


def _zombie(pid: int) -> bool:
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def test_killing_the_runner_brings_a_new_one_and_sessions_carry_on(mp: Host) -> None:
    """SIGKILL of the Runner: the guardian starts another, requests are retried, nothing
    interleaves in the streams."""
    sid = mp.create()
    a = mp.send(sid, "before")
    mp.wait_turn(sid, a.seq)
    runner = mp.runner_pid()
    orphan = mp.session_pid(sid)
    os.kill(runner, signal.SIGKILL)
    # The orphaned incarnation hears of its parent's end from the kernel and stops.
    wait_for(lambda: _zombie(orphan), 10)
    b = mp.send(sid, "after", key="after-1")
    assert mp.wait_turn(sid, b.seq).kind == Kind.TURN_COMPLETED
    assert mp.runner_pid() != runner
    assert mp.session_pid(sid) != orphan
    evs = mp.history(sid)
    _assert_gapless(evs)
    assert [e.text for e in evs if e.kind == Kind.USER_MESSAGE] == ["before", "after"]


def test_many_threads_send_through_one_host(mp: Host) -> None:
    """Eight threads, each with its own session, send concurrently; every reply reaches the
    thread that asked, and every message is stored once."""
    sids = [mp.create() for _ in range(8)]
    errors: list[BaseException] = []
    acks: dict[str, list[int]] = {s: [] for s in sids}

    def worker(sid: str) -> None:
        try:
            for i in range(5):
                ack = mp.send(sid, f"m{i}", key=f"{sid}-{i}")
                assert ack.session_id == sid
                acks[sid].append(ack.seq)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in sids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    for sid in sids:
        mp.wait_turn(sid, acks[sid][-1])
        users = [e.text for e in mp.history(sid) if e.kind == Kind.USER_MESSAGE]
        assert users == [f"m{i}" for i in range(5)]


def test_an_ingress_that_kills_the_process_twice_is_poison(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """A message whose handling kills the session process is redelivered once, then refused
    as poison and recorded; the session serves the next message."""
    h = Host(
        tmp_path,
        base="multiprocTCPBase",
        interceptors=(SuicideInterceptor(), SlashCommands()),
        timeout=20,
    )
    try:
        sid = h.create()
        with pytest.raises(PoisonMessageError):
            h.send(sid, "/die")
        a = h.send(sid, "alive")
        assert h.wait_turn(sid, a.seq).kind == Kind.TURN_COMPLETED
        assert "poisoned" in [e.phase for e in h.history(sid) if e.kind == Kind.LIFECYCLE]
    finally:
        h.close()


def test_a_session_that_keeps_dying_is_marked_failed_and_refuses_ingress(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """Past its restart budget a session gets a failed lifecycle event and SessionFailed."""
    h = Host(tmp_path, base="multiprocTCPBase", max_restarts=2, timeout=20)
    try:
        sid = h.create()
        for _ in range(3):
            pid = h.session_pid(sid)
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda pid=pid: _zombie(pid), timeout=10)
        wait_for(lambda: h.stats()["failed"] == 1, timeout=20)
        with pytest.raises(SessionFailed):
            h.send(sid, "anyone?")
        assert h.history(sid)[-1].phase == Phase.FAILED
    finally:
        h.close()


def test_a_protocol_subscriber_of_a_session_failed_past_its_budget_receives_the_failed_event(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """Subscribing again after the crashes, as the protocol says, replays the stored
    ``failed`` lifecycle event from the log and ends with a closed batch."""
    from actors import messages as msgs
    from spine import decode_event

    h = Host(tmp_path, base="multiprocTCPBase", max_restarts=1, timeout=20)
    try:
        sid = h.create()
        with h._asys.private() as ctx:
            sub = msgs.Subscribe(request_id="s1", session_id=sid)
            assert isinstance(ctx.ask(h._runner, sub, 10), msgs.SubscribeReply)
            for _ in range(2):
                pid = h.session_pid(sid)
                os.kill(pid, signal.SIGKILL)
                wait_for(lambda pid=pid: _zombie(pid), timeout=10)
            wait_for(lambda: h.stats()["failed"] == 1, timeout=20)
            # The first subscription died with its process: subscribe again after seq 1.
            again = msgs.Subscribe(request_id="s2", session_id=sid, after_seq=1)
            reply = ctx.ask(h._runner, again, 10)
            while isinstance(reply, msgs.EventBatch):  # late batches of the first one
                reply = ctx.listen(10)
            assert isinstance(reply, msgs.SubscribeReply), reply
            batches: list[msgs.EventBatch] = []
            deadline = time.monotonic() + 20
            while not any(b.closed for b in batches) and time.monotonic() < deadline:
                got = ctx.listen(5)
                if (
                    isinstance(got, msgs.EventBatch)
                    and got.subscription_id == reply.subscription_id
                ):
                    batches.append(got)
        assert any(b.closed for b in batches)
        records = [r for b in sorted(batches, key=lambda b: b.batch) for r in b.records]
        assert [r[0] for r in records] == [e.seq for e in h.history(sid)][1:]
        last = decode_event(records[-1][2])
        assert records[-1][1] == Kind.LIFECYCLE and last.phase == Phase.FAILED
    finally:
        h.close()


def test_a_long_session_restarts_from_a_snapshot_with_the_same_state(mp: Host) -> None:
    """Past the snapshot interval a session snapshots its state; after a kill it restarts
    from the snapshot plus the tail and serves with exactly the state a full fold gives."""
    from actors.session.rules.state import SessionState, fold
    from actors.session.shell.snapshots import SNAPSHOT_EVERY, SnapshotStore
    from spine import SqliteLog

    sid = "long-one"
    log = SqliteLog(os.path.join(mp.data_dir, "spine.db"))
    try:
        filler = [Event(kind=Kind.SESSION_STARTED)] + [
            Event(kind=Kind.PROPERTIES, properties={"n": str(i)})
            for i in range(SNAPSHOT_EVERY + 50)
        ]
        log.append(sid, filler, expected_seq=0)
    finally:
        log.close()
    mp.register(sid)
    a = mp.send(sid, "hello")
    mp.wait_turn(sid, a.seq)
    store = SnapshotStore(mp.data_dir, os.path.join(mp.data_dir, "spine.db"))
    try:
        snap = store.load(sid)
        assert snap is not None and snap.last_seq >= SNAPSHOT_EVERY
        os.kill(mp.session_pid(sid), signal.SIGKILL)
        b = mp.send(sid, "again")
        mp.wait_turn(sid, b.seq)
        full = fold(SessionState(session_id=sid), mp.history(sid))
        assert mp.get(sid).metadata == dict(full.metadata) == {"n": str(SNAPSHOT_EVERY + 49)}
        assert full.turns == 2
        assert [e.turn for e in mp.history(sid) if e.kind == Kind.TURN_STARTED] == [1, 2]
    finally:
        store.close()


def test_ingress_answered_without_an_append_is_not_tracked_for_redelivery(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """A refused command, an idle interrupt and a duplicate leave nothing in flight, so the
    session still passivates and a later crash redelivers none of them."""
    h = Host(tmp_path, base="multiprocTCPBase", idle_timeout=0.3, timeout=20)
    try:
        sid = h.create()
        h.send(sid, "/temperature 99")
        h.interrupt(sid)
        a = h.send(sid, "x", key="same")
        h.wait_turn(sid, a.seq)
        h.send(sid, "x", key="same")
        wait_for(lambda: h.stats()["passivated"] >= 1, timeout=20)
        assert h.stats()["redelivered"] == 0
    finally:
        h.close()


def test_the_status_projection_runs_beside_the_runner_and_survives_a_kill(mp: Host) -> None:
    """The projection actor folds every session as it is written; status equals a fold of
    history; killed, it is restarted and resumes from its checkpoint."""
    from projections import project

    sid = mp.create(metadata={"objective": "count turns"})
    for text in ("one", "two"):
        a = mp.send(sid, text)
        mp.wait_turn(sid, a.seq)
    last = mp.history(sid)[-1].seq
    wait_for(lambda: (ix := mp.index()) is not None and (i := ix.get(sid)) and i.last_seq == last)
    st = mp.status(sid)
    assert st == project(mp.history(sid))
    assert st.turns == 2 and st.usage.output_tokens > 0

    pid = mp.projection_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: _zombie(pid), timeout=10)
    c = mp.send(sid, "three")
    mp.wait_turn(sid, c.seq)
    last = mp.history(sid)[-1].seq
    wait_for(lambda: (ix := mp.index()) is not None and (i := ix.get(sid)) and i.last_seq == last)
    assert mp.projection_pid() not in (None, pid)
    assert mp.status(sid).turns == 3


def test_a_new_runner_lists_closed_sessions_as_closed(mp: Host) -> None:
    """After the Runner is replaced, its registry is empty; the listing still tells closed
    sessions from idle ones, through the sessions index."""
    closed, idle = mp.create(), mp.create()
    mp.close_session(closed)
    last = mp.history(closed)[-1].seq
    wait_for(
        lambda: (ix := mp.index()) is not None and (i := ix.get(closed)) and i.last_seq == last
    )
    runner = mp.runner_pid()
    os.kill(runner, signal.SIGKILL)
    wait_for(lambda: mp.runner_pid() != runner, timeout=20)
    states = {i.session_id: i.state for i in mp.sessions()}
    assert states[closed] == "closed" and states[idle] == "passivated"


def test_a_session_with_a_protocol_subscriber_is_not_passivated(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """While a Thespian host holds a subscription the session stays live; after it
    unsubscribes the session is passivated like any idle one."""
    from actors import messages as msgs

    h = Host(tmp_path, base="multiprocTCPBase", idle_timeout=0.3, timeout=20)
    try:
        watched, other = h.create(), h.create()
        pid = h.session_pid(watched)
        with h._asys.private() as ctx:
            reply = ctx.ask(h._runner, msgs.Subscribe(request_id="s", session_id=watched), 10)
            assert isinstance(reply, msgs.SubscribeReply)
            wait_for(lambda: h.stats()["passivated"] >= 1, timeout=20)  # `other` went idle
            assert h.session_pid(watched) == pid
            done = ctx.ask(
                h._runner,
                msgs.Unsubscribe(
                    request_id="u", session_id=watched, subscription_id=reply.subscription_id
                ),
                10,
            )
            while not isinstance(done, msgs.Done):
                done = ctx.listen(10)
                assert done is not None
        wait_for(lambda: h.stats()["passivated"] >= 2, timeout=20)
        assert h.session_pid(other) > 0  # brought back on demand
    finally:
        h.close()


def test_sinks_keep_receiving_after_the_runner_is_replaced(mp: Host) -> None:
    """A Host's sink registered with a Runner that dies is registered again with the new
    one: live events keep arriving without the embedding program doing anything."""
    seen: list[str] = []
    got = threading.Event()

    def sink(sid: str, ev: Event | None, live: object) -> None:
        if ev is not None and ev.kind == Kind.TURN_COMPLETED:
            seen.append(sid)
            got.set()

    mp.add_sink(sink)
    sid = mp.create()
    mp.send(sid, "before")
    assert got.wait(20)
    runner = mp.runner_pid()
    os.kill(runner, signal.SIGKILL)
    wait_for(lambda: mp.runner_pid() != runner, 20)
    # The Host notices the new Runner when its sinks have been quiet for a moment; a turn
    # that completes before then is not delivered live (it is in the log), so ask again
    # until one arrives.
    deadline = time.monotonic() + 20
    arrived = False
    while not arrived and time.monotonic() < deadline:
        got.clear()
        mp.send(sid, "after")
        arrived = got.wait(2)
    assert arrived, "no live event reached the sink after the Runner restart"
    assert seen.count(sid) >= 2


def _children(pid: int) -> set[int]:
    """Live processes whose parent is ``pid``."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = pathlib.Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2 :].split()
        if rest[0] != "Z" and int(rest[1]) == pid:
            found.add(int(entry))
    return found


def test_a_new_session_takes_a_spare_process_which_is_refilled_and_dies_with_its_runner(
    mp: Host,
) -> None:
    """The Runner keeps three session processes started (and warmed up) ahead of need: a
    new session is served by one of them (no process start on the way), another is
    started after it, and spares whose Runner is killed stop by themselves instead of
    lingering. The warm-up's goal run never reaches the spine."""
    runner = mp.runner_pid()
    spares = wait_for(lambda: _children(runner) if len(_children(runner)) >= 3 else None, 20)
    wait_for(lambda: mp.stats()["spare_sessions_ready"] >= 3, 20)  # warmed up, standing by
    sid = mp.create()
    pid = mp.session_pid(sid)
    assert pid in spares
    assert [s.session_id for s in mp.sessions()] == [sid]
    wait_for(lambda: len(_children(runner) - {pid}) >= 3, 20)  # refilled
    standing = _children(runner) - {pid}
    os.kill(runner, signal.SIGKILL)
    wait_for(lambda: all(_zombie(p) for p in standing), 20)
    # The new Runner has spares of its own, and the session is served again.
    ack = mp.send(sid, "still here")
    assert mp.wait_turn(sid, ack.seq).kind == Kind.TURN_COMPLETED


def test_cold_spares_are_forked_from_a_runner_that_warmed_up_once_and_ended_its_threads(
    tmp_path: pathlib.Path,
) -> None:
    """With ``warm_spares=False`` the Runner runs the warm-up once before it forks its
    spares, then ends the turn and provider threads it started: it forks from one thread,
    and a session in a cold spare runs a goal run with a tool call."""
    h = Host(tmp_path, base="multiprocTCPBase", timeout=20, warm_spares=False)
    try:
        runner = h.runner_pid()
        wait_for(lambda: h.stats()["spare_sessions_ready"] >= 1, 20)
        assert os.listdir(f"/proc/{runner}/task") == [str(runner)]
        sid = h.create()
        h.submit(sid, '!tool calculator {"expression": "6*7"}')
        assert h.wait(sid, timeout=20) == "calculator returned 42"
    finally:
        h.close()
