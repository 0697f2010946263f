"""The projection actor on Thespian: queries, wakes, rebuilds, and surviving a SIGKILL."""

from __future__ import annotations

import logging
import os
import pathlib
import pickle
import signal
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import wait_for
from test_projections_reducer import fill
from thespian.actors import ActorExitRequest, ActorSystem

from projections import (
    Fail,
    FoldMore,
    IndexReply,
    ProgressReply,
    ProjectionActor,
    ProjectionFailed,
    QueryIndex,
    QueryProgress,
    QueryStatus,
    Rebuild,
    RebuildCompleted,
    Rebuilding,
    RebuildProgress,
    RebuildStartedReply,
    RetryThenFail,
    Skip,
    StartedReply,
    StartProjection,
    StatusReply,
    Wake,
    index_from,
    project,
)
from spine import Event, Kind, SqliteLog, history

LOGDEFS = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"null": {"class": "logging.NullHandler"}},
    "root": {"handlers": ["null"], "level": logging.CRITICAL},
}
ASK = 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def simple() -> Iterator[ActorSystem]:
    asys = ActorSystem("simpleSystemBase", transientUnique=True, logDefs=LOGDEFS)
    try:
        yield asys
    finally:
        asys.shutdown()


@pytest.fixture
def multiproc(no_leftover_processes: None) -> Iterator[ActorSystem]:
    asys = ActorSystem(
        "multiprocTCPBase", {"Admin Port": free_port()}, transientUnique=True, logDefs=LOGDEFS
    )
    try:
        yield asys
    finally:
        asys.shutdown()


@pytest.fixture
def log(db_path: pathlib.Path) -> Iterator[SqliteLog]:
    with SqliteLog(db_path) as lg:
        yield lg


def start(asys: ActorSystem, db: pathlib.Path, ck: pathlib.Path, **kw: Any) -> tuple[Any, int]:
    actor = asys.createActor(ProjectionActor)
    msg = StartProjection(request_id="start", log_path=str(db), checkpoint_path=str(ck), **kw)
    reply = asys.ask(actor, msg, ASK)
    assert isinstance(reply, StartedReply) and reply.request_id == "start", reply
    return actor, reply.pid


def ask_for(asys: ActorSystem, actor: Any, msg: Any, cls: type, others: list[Any]) -> Any:
    """Ask, setting aside other messages (rebuild reports) that arrive before the reply."""
    reply = asys.ask(actor, msg, ASK)
    deadline = time.monotonic() + ASK
    while not isinstance(reply, cls):
        assert reply is not None and time.monotonic() < deadline, (reply, others)
        others.append(reply)
        reply = asys.listen(ASK)
    return reply


def caught_up(asys: ActorSystem, actor: Any, log: SqliteLog) -> bool:
    r = asys.ask(actor, QueryProgress(request_id="p"), ASK)
    assert isinstance(r, ProgressReply) and r.request_id == "p", r
    p = r.progress
    return p.ready and not p.rebuilding and p.position == log.last_position()


def assert_state_equals_fold_from_zero(asys: ActorSystem, actor: Any, log: SqliteLog) -> None:
    for info in log.streams():
        r = asys.ask(actor, QueryStatus(request_id=info.stream, session=info.stream), ASK)
        assert isinstance(r, StatusReply) and r.request_id == info.stream, r
        assert r.status == project(history(log, info.stream))
        assert r.info is not None and r.info.last_seq == info.last_seq
    idx = asys.ask(actor, QueryIndex(request_id="i"), ASK)
    assert isinstance(idx, IndexReply) and idx.request_id == "i"
    assert idx.index == index_from(log.read_all(0, None))


def test_every_message_pickles() -> None:
    """Messages cross processes on multiproc bases, so each must survive pickling."""
    from projections import messages

    for name in dir(messages):
        cls = getattr(messages, name)
        if isinstance(cls, type) and cls.__module__ == messages.__name__:
            fields = getattr(cls, "__attrs_attrs__", ())
            if not fields:
                obj = cls()
                assert pickle.loads(pickle.dumps(obj)) == obj
    msg = StartProjection(log_path="a", checkpoint_path="b", policy=RetryThenFail(attempts=2))
    assert pickle.loads(pickle.dumps(msg)) == msg
    assert pickle.loads(pickle.dumps(Skip())) == Skip() and Fail() != Skip()


def test_queries_are_answered_from_the_folded_log_on_simple_base(
    simple: ActorSystem, log: SqliteLog, db_path: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """After start the actor answers status and index equal to the pure folds; a wake folds."""
    fill(log, 300, 5)
    actor, _ = start(simple, db_path, tmp_path / "ck.db", batch=64)
    wait_for(lambda: caught_up(simple, actor, log))
    assert_state_equals_fold_from_zero(simple, actor, log)
    log.append("s1", [Event(kind=Kind.USER_MESSAGE, text="new")])
    simple.tell(actor, Wake())
    wait_for(lambda: caught_up(simple, actor, log))
    assert_state_equals_fold_from_zero(simple, actor, log)
    unknown = simple.ask(actor, QueryStatus(session="nobody"), ASK)
    assert isinstance(unknown, StatusReply) and unknown.status is None and unknown.info is None


def test_queries_before_start_and_before_a_first_build_are_refused_clearly(
    simple: ActorSystem, log: SqliteLog, db_path: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """Not started: ProjectionFailed. No complete state yet: Rebuilding, never partial state.
    Each answer echoes its request's id."""
    actor = simple.createActor(ProjectionActor)
    for request in (
        QueryStatus(request_id="q1", session="s0"),
        QueryIndex(request_id="q2"),
        QueryProgress(request_id="q3"),
        Rebuild(request_id="q4"),
    ):
        refused = simple.ask(actor, request, ASK)
        assert isinstance(refused, ProjectionFailed), refused
        assert refused.request_id == request.request_id and "not started" in refused.reason
    missing = StartProjection(
        request_id="q5", log_path=str(tmp_path / "none.db"), checkpoint_path=str(tmp_path / "c")
    )
    failed = simple.ask(actor, missing, ASK)
    assert isinstance(failed, ProjectionFailed) and "does not exist" in failed.reason
    assert failed.request_id == "q5"
    fill(log, 2000, 4)
    simple.ask(
        actor,
        StartProjection(log_path=str(db_path), checkpoint_path=str(tmp_path / "c"), batch=10),
        ASK,
    )
    first = simple.ask(actor, QueryIndex(request_id="early"), ASK)
    assert isinstance(first, Rebuilding) and first.progress.target == log.last_position()
    assert first.request_id == "early"
    wait_for(lambda: caught_up(simple, actor, log))
    assert isinstance(simple.ask(actor, QueryIndex(), ASK), IndexReply)


def test_a_rebuild_reports_progress_and_queries_meanwhile_see_the_last_complete_state(
    simple: ActorSystem, log: SqliteLog, db_path: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """Rebuild: started reply, progress reports, completion; queries read the old state."""
    fill(log, 3000, 5)
    actor, _ = start(simple, db_path, tmp_path / "ck.db", batch=50)
    wait_for(lambda: caught_up(simple, actor, log))
    before = simple.ask(actor, QueryStatus(session="s2"), ASK)
    assert isinstance(before, StatusReply)
    reports: list[Any] = []
    started = ask_for(simple, actor, Rebuild(request_id="rb"), RebuildStartedReply, reports)
    assert started.progress.rebuilding and started.request_id == "rb"
    during = ask_for(simple, actor, QueryStatus(session="s2"), StatusReply, reports)
    assert during.progress.rebuilding and during.status == before.status
    deadline = time.monotonic() + 30
    while not any(isinstance(m, RebuildCompleted) for m in reports):
        assert time.monotonic() < deadline, reports
        m = simple.listen(1.0)
        if m is not None:
            reports.append(m)
    done = reports[-1]
    assert done.progress.position == log.last_position() and not done.progress.rebuilding
    assert all(isinstance(m, RebuildProgress) for m in reports[:-1])
    assert {m.request_id for m in reports} == {"rb"}
    assert_state_equals_fold_from_zero(simple, actor, log)


def test_an_actor_stopped_mid_fold_is_replaced_by_one_that_resumes_on_simple_base(
    simple: ActorSystem, log: SqliteLog, db_path: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """Stop the actor mid-rebuild, start another on the same files: it equals a fold from 0."""
    fill(log, 4000, 8)
    ck = tmp_path / "ck.db"
    actor, _ = start(simple, db_path, ck, batch=40, rebuild_commit_every=200)

    def mid_fold() -> bool:
        p = simple.ask(actor, QueryProgress(), ASK).progress
        return 400 < p.rebuild_position < log.last_position()

    wait_for(mid_fold)
    simple.tell(actor, ActorExitRequest())
    second, _ = start(simple, db_path, ck, batch=500)
    p = simple.ask(second, QueryProgress(), ASK).progress
    assert p.rebuilding and p.rebuild_position > 0  # resumed, not restarted
    wait_for(lambda: caught_up(simple, second, log))
    assert_state_equals_fold_from_zero(simple, second, log)


def test_a_projection_sigkilled_mid_fold_restarts_to_the_fold_from_zero_on_multiproc(
    multiproc: ActorSystem, log: SqliteLog, db_path: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """SIGKILL the actor's process mid-rebuild; a new actor on the same files converges."""
    # Small steps over a long log, so that the poll below lands mid-fold: the actor folds
    # step after step by messages to itself, which its transport handles before reading
    # the next query from its socket.
    fill(log, 6000, 10)
    ck = tmp_path / "ck.db"
    actor, pid = start(multiproc, db_path, ck, batch=2, rebuild_commit_every=300)
    assert pid != os.getpid()

    seen: list[Any] = []

    def mid_fold() -> bool:
        r = multiproc.ask(actor, QueryProgress(), ASK)
        assert isinstance(r, ProgressReply), r
        seen.append(r.progress)
        assert not (r.progress.ready and not r.progress.rebuilding), f"fold done first: {seen[:3]}"
        return 600 < r.progress.rebuild_position < log.last_position() - 1000

    wait_for(mid_fold, timeout=30, interval=0.001)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not os.path.exists(f"/proc/{pid}") or _zombie(pid))
    second, pid2 = start(multiproc, db_path, ck, batch=500)
    assert pid2 != pid
    log.append("s3", [Event(kind=Kind.USER_MESSAGE, text="after the crash")])
    multiproc.tell(second, Wake())
    wait_for(lambda: caught_up(multiproc, second, log), timeout=30)
    assert_state_equals_fold_from_zero(multiproc, second, log)
    multiproc.tell(second, ActorExitRequest())


def test_a_live_projection_on_multiproc_is_woken_by_appends_and_by_its_poll_floor(
    multiproc: ActorSystem, log: SqliteLog, db_path: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """A Wake folds at once; with no wake the poll floor still picks the append up."""
    fill(log, 50, 2)
    actor, _ = start(multiproc, db_path, tmp_path / "ck.db", poll_floor=0.05)
    wait_for(lambda: caught_up(multiproc, actor, log))
    log.append("s0", [Event(kind=Kind.USER_MESSAGE, text="woken")])
    multiproc.tell(actor, Wake())
    wait_for(lambda: caught_up(multiproc, actor, log))
    log.append("s1", [Event(kind=Kind.USER_MESSAGE, text="no wake sent")])
    wait_for(lambda: caught_up(multiproc, actor, log), timeout=5)
    assert_state_equals_fold_from_zero(multiproc, actor, log)
    multiproc.tell(actor, ActorExitRequest())


def _zombie(pid: int) -> bool:
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def test_fold_more_is_an_internal_note() -> None:
    """FoldMore carries nothing, so any number of them collapse into one fold."""
    assert FoldMore() == FoldMore()


def test_a_new_code_version_rebuilds_automatically_and_serves_the_old_state_meanwhile(
    simple: ActorSystem, log: SqliteLog, db_path: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """Started with another version, the actor rebuilds; queries read the stale complete state."""
    fill(log, 2000, 4)
    ck = tmp_path / "ck.db"
    old, _ = start(simple, db_path, ck, version="v1")
    wait_for(lambda: caught_up(simple, old, log))
    before = simple.ask(old, QueryStatus(session="s1"), ASK)
    simple.tell(old, ActorExitRequest())
    new, _ = start(simple, db_path, ck, version="v2", batch=20)
    during = simple.ask(new, QueryStatus(session="s1"), ASK)
    assert isinstance(during, StatusReply), during
    assert during.progress.rebuilding and during.progress.stale
    assert during.status == before.status
    wait_for(lambda: caught_up(simple, new, log))
    after = simple.ask(new, QueryProgress(), ASK).progress
    assert after.version == "v2" and not after.stale
    assert_state_equals_fold_from_zero(simple, new, log)


class _Exploding(ProjectionActor):
    """A projection actor whose progress handler raises, counting its calls."""

    calls = 0

    def receiveMsg_QueryProgress(self, msg: Any, sender: Any) -> None:
        type(self).calls += 1
        raise RuntimeError("boom")


def test_a_handler_that_raises_runs_once_and_its_request_is_answered() -> None:
    """No retry by Thespian runs it twice; the asker gets ProjectionFailed with its id."""
    asys = ActorSystem("simpleSystemBase", transientUnique=True, logDefs=LOGDEFS)
    try:
        actor = asys.createActor(_Exploding)
        reply = asys.ask(actor, QueryProgress(request_id="q1"), 5)
        assert isinstance(reply, ProjectionFailed) and reply.request_id == "q1"
        assert "boom" in reply.reason and _Exploding.calls == 1
    finally:
        asys.shutdown()


def test_queries_are_answered_between_rebuild_steps_with_a_widened_transmit_limit(
    no_leftover_processes: None,
    log: SqliteLog,
    db_path: pathlib.Path,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Convention hosts widen Thespian's transmit limit; a rebuild must not starve queries."""
    from thespian.system.transport import asyncTransportBase

    # As a convention host does (actors/host/member.py), before the system forks.
    monkeypatch.setattr(asyncTransportBase, "MAX_PENDING_TRANSMITS", 512)
    fill(log, 6000, 10)
    asys = ActorSystem(
        "multiprocTCPBase", {"Admin Port": free_port()}, transientUnique=True, logDefs=LOGDEFS
    )
    try:
        # Two events a step: three thousand steps, far longer than a query takes.
        actor, _ = start(asys, db_path, tmp_path / "ck.db", batch=2, rebuild_commit_every=300)
        reports: list[Any] = []
        answers = []
        for i in range(5):
            r = ask_for(asys, actor, QueryProgress(request_id=f"q{i}"), ProgressReply, reports)
            answers.append(r.progress)
        # Answered while the first build was still folding, not after it.
        assert any(not p.ready and p.rebuild_position < log.last_position() for p in answers), [
            (p.ready, p.rebuild_position) for p in answers
        ]
        wait_for(lambda: caught_up(asys, actor, log), timeout=60)
        assert_state_equals_fold_from_zero(asys, actor, log)
        asys.tell(actor, ActorExitRequest())
    finally:
        asys.shutdown()
