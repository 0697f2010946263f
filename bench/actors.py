"""Actor benchmark: vertebra's session path against a raw Thespian echo pipeline, one run.

Both systems run on ``multiprocTCPBase`` over loopback, in alternating rounds, and every
figure is printed with its target and its ratio to the echo pipeline (`bench/_echo.py`),
which has vertebra's hops and none of its work:

- ingress -> durable ack: 3 hops (host -> runner -> session -> host); vertebra adds the
  interceptor chain, one SQLite commit and a fold step, and its session also tells the
  runner about the commit (off the ack's path). Its scripted agent answers without
  waiting, so while commits wait for the shared write lock (the 50-session run) that one
  commit stores the turn as well, and the ack follows it;
- ingress -> turn completed: 6 hops (the ack's 3, two session self-sends standing for the
  worker thread's progress and finish hand-backs, and a notification to the host).
  vertebra's host learns of the end from the log instead: a catch-up subscription held
  open on the session (what a conduit tailing a session does) wakes on the commit. A
  fresh `Host.wait_turn` per turn is measured too: it starts a subscription each time;
- turns/s over 50 sessions, each driven by its own thread through one Host (one private
  Thespian endpoint per thread) against 50 echo sessions driven the same way;
- SIGKILL -> serving again for a session with a 10,000-event stream, filled straight into
  the data directory's spine before the session first loads it; the echo baseline is a
  runner that recreates its dead child and redelivers the message in flight;
- memory of one live session process (RSS and PSS from ``/proc/PID/smaps_rollup``) with
  200 live sessions, against 200 echo session processes;
- the authenticated actor frame's cost: turns/s and ack p50/p99 of vertebra as shipped
  against the same code on Thespian's plain pickles, alternating fresh processes
  (``--only-auth`` runs just this).

Run ``python bench/actors.py`` (``--quick`` for a smoke run). Data lives in a temporary
directory that is removed at the end; every actor system is shut down, and the run checks
that no process it started outlives it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

# Run as a script, this file's folder heads sys.path, and bench/spine.py would shadow the
# spine package; put the repository root there instead.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

from thespian.actors import ActorSystem  # noqa: E402

from actors._runtime.system import free_port, log_defs, loopback_only  # noqa: E402
from actors.errors import HostTimeout  # noqa: E402
from actors.host import Host  # noqa: E402
from actors.runner import spine_path  # noqa: E402
from bench._echo import (  # noqa: E402
    EchoAck,
    EchoPid,
    EchoPidReply,
    EchoRunner,
    EchoSend,
    EchoTurnDone,
    Spawn,
    Spawned,
)
from spine import Event, Kind, Phase, SqliteLog, Usage  # noqa: E402

WAIT = 20.0  # seconds; bounds every wait so a broken run fails instead of hanging
TURN_END = (Kind.TURN_COMPLETED, Kind.TURN_CANCELLED)


# -- figures ---------------------------------------------------------------------------


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def ms(x: float) -> str:
    return f"{x * 1e3:7.2f} ms"


def report(name: str, vals: list[float], base: list[float], target: float | None) -> None:
    """p50/p99 of a latency with the baseline's, the ratios, and the p50 target."""
    p50, p99, b50, b99 = pct(vals, 0.5), pct(vals, 0.99), pct(base, 0.5), pct(base, 0.99)
    verdict = ""
    if target is not None:
        verdict = f"  target p50 <= {target * 1e3:g} ms: {'met' if p50 <= target else 'MISSED'}"
    print(f"{name} (n={len(vals)})")
    print(f"  vertebra  p50 {ms(p50)}  p99 {ms(p99)}{verdict}")
    print(f"  echo      p50 {ms(b50)}  p99 {ms(b99)}")
    print(f"  ratio     p50 {p50 / b50:5.2f}x     p99 {p99 / b99:5.2f}x")


# -- processes -------------------------------------------------------------------------


#: Session ids (``setsid``) of the actor systems this run started. The Thespian admin
#: detaches into its own session and is re-parented to init, so its processes are found by
#: session id, not by parent.
SYSTEMS: set[int] = set()


def _stat(pid: int | str) -> list[str] | None:
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces; the fields after its closing paren are fixed.
    return stat[stat.rindex(")") + 2 :].split()


def note_system(pid: int) -> None:
    """Remember the actor system that process ``pid`` belongs to."""
    st = _stat(pid)
    if st is not None:
        SYSTEMS.add(int(st[3]))


def system_processes() -> list[int]:
    """Live (non-zombie) processes of the actor systems this run started."""
    out = []
    for d in pathlib.Path("/proc").iterdir():
        if d.name.isdigit():
            st = _stat(d.name)
            if st is not None and st[0] != "Z" and int(st[3]) in SYSTEMS:
                out.append(int(d.name))
    return out


def smaps_rollup(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of a process in bytes."""
    rss = pss = 0
    for line in pathlib.Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Rss:"):
            rss = int(line.split()[1]) * 1024
        elif line.startswith("Pss:"):
            pss = int(line.split()[1]) * 1024
    return rss, pss


def gone(pid: int) -> bool:
    st = _stat(pid)
    return st is None or st[0] == "Z"


# -- the echo pipeline -----------------------------------------------------------------


class Echo:
    """The raw baseline: an `EchoRunner` and its sessions, driven like a Host drives."""

    def __init__(self) -> None:
        port = free_port()
        self.asys = ActorSystem(
            "multiprocTCPBase",
            {"Admin Port": port},
            logDefs=log_defs(None),
            transientUnique=True,
        )
        self._local = threading.local()
        self._cms: list[Any] = []
        self._lock = threading.Lock()
        try:
            self.runner = self.asys.createActor(EchoRunner)
            self.spawn(1)
            note_system(self.pid(0))
        except BaseException:
            self.close()
            raise

    def _ctx(self) -> Any:
        ctx = getattr(self._local, "ctx", None)
        if ctx is None:
            cm = self.asys.private()
            ctx = self._local.ctx = cm.__enter__()
            with self._lock:
                self._cms.append(cm)
        return ctx

    def _wait(self, ctx: Any, reply: Any, ok: Callable[[Any], bool]) -> Any:
        deadline = time.monotonic() + WAIT
        while reply is None or not ok(reply):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the echo pipeline did not answer")
            reply = ctx.listen(left)
        return reply

    def spawn(self, count: int) -> None:
        ctx = self._ctx()
        reply = ctx.ask(self.runner, Spawn(request_id="spawn", count=count), WAIT)
        self._wait(ctx, reply, lambda r: isinstance(r, Spawned))

    def send(self, session: int, turn: bool = True) -> EchoAck:
        ctx = self._ctx()
        rid = uuid.uuid4().hex
        msg = EchoSend(request_id=rid, session=session, key=rid, text="hello", turn=turn)
        reply = ctx.ask(self.runner, msg, WAIT)
        ack: EchoAck = self._wait(
            ctx, reply, lambda r: isinstance(r, EchoAck) and r.request_id == rid
        )
        return ack

    def turn_done(self, session: int, seq: int) -> None:
        ctx = self._ctx()
        self._wait(
            ctx,
            None,
            lambda r: isinstance(r, EchoTurnDone) and r.session == session and r.seq >= seq,
        )

    def pid(self, session: int) -> int:
        ctx = self._ctx()
        rid = uuid.uuid4().hex
        reply = ctx.ask(self.runner, EchoPid(request_id=rid, session=session), WAIT)
        pong: EchoPidReply = self._wait(
            ctx, reply, lambda r: isinstance(r, EchoPidReply) and r.request_id == rid
        )
        return pong.pid

    def close(self) -> None:
        with self._lock:
            cms, self._cms = self._cms, []
        for cm in cms:
            with contextlib.suppress(Exception):
                cm.__exit__(None, None, None)
        self.asys.shutdown()


@contextlib.contextmanager
def echo_system() -> Iterator[Echo]:
    e = Echo()
    try:
        yield e
    finally:
        e.close()


@contextlib.contextmanager
def host(data_dir: str, **kwargs: Any) -> Iterator[Host]:
    h = Host(data_dir, base="multiprocTCPBase", timeout=WAIT, **kwargs)
    try:
        note_system(h.runner_pid())
        yield h
    finally:
        h.close()


# -- latency ---------------------------------------------------------------------------


def latency(root: str, rounds: int, per_round: int) -> None:
    acks: list[float] = []
    turns: list[float] = []
    wait_turns: list[float] = []
    b_acks: list[float] = []
    b_turns: list[float] = []
    with host(os.path.join(root, "latency")) as h, echo_system() as echo:
        sid = h.create()
        echo.spawn(1)
        last = h.history(sid)[-1].seq
        with h.subscribe(sid, last, kinds=TURN_END) as sub:
            for i in range(per_round):  # warm both paths up (connections, imports, caches)
                a = h.send(sid, f"warm {i}")
                ev = sub.get(WAIT)
                assert ev is not None and ev.seq > a.seq
                echo.turn_done(0, echo.send(0).seq)

            def ours() -> None:
                for i in range(per_round):
                    t0 = time.perf_counter()
                    a = h.send(sid, f"hello {i}")
                    t1 = time.perf_counter()
                    ev = sub.get(WAIT)
                    t2 = time.perf_counter()
                    assert ev is not None and ev.kind == Kind.TURN_COMPLETED and ev.seq > a.seq
                    acks.append(t1 - t0)
                    turns.append(t2 - t0)

            def theirs() -> None:
                for _ in range(per_round):
                    t0 = time.perf_counter()
                    b = echo.send(0)
                    t1 = time.perf_counter()
                    echo.turn_done(0, b.seq)
                    t2 = time.perf_counter()
                    b_acks.append(t1 - t0)
                    b_turns.append(t2 - t0)

            # Which goes first alternates, so neither always runs on a machine just woken.
            for r in range(rounds):
                for run in (theirs, ours) if r % 2 else (ours, theirs):
                    run()
            # Drain the subscription so the next measurement starts from a quiet log.
            while sub.get(0.05) is not None:
                pass
        # Without a subscription held open, each wait_turn starts the log's watcher anew.
        for i in range(per_round):
            t0 = time.perf_counter()
            a = h.send(sid, f"fresh {i}")
            h.wait_turn(sid, a.seq, timeout=WAIT)
            wait_turns.append(time.perf_counter() - t0)
    report("ingress -> durable ack", acks, b_acks, 0.005)
    report("ingress -> turn completed (held subscription)", turns, b_turns, 0.015)
    slow = sum(1 for x in wait_turns if x >= 0.2)
    print(
        f"  with a fresh Host.wait_turn per turn: p50 {ms(pct(wait_turns, 0.5))}"
        f"  p99 {ms(pct(wait_turns, 0.99))}  ({slow}/{len(wait_turns)} took >= 200 ms)"
    )


# -- throughput ------------------------------------------------------------------------


def _drive(
    n: int, seconds: float, turn: Callable[[int], None], setup: Callable[[int], None]
) -> float:
    """Turns per second with ``n`` threads, each looping ``turn(i)`` on its own session."""
    start = threading.Barrier(n + 1)
    stop = threading.Event()
    counts = [0] * n
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            setup(i)
            start.wait(WAIT)
            while not stop.is_set():
                turn(i)
                counts[i] += 1
        except BaseException as exc:
            errors.append(exc)
            stop.set()
            with contextlib.suppress(threading.BrokenBarrierError):
                start.abort()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    start.wait(WAIT)
    t0 = time.perf_counter()
    time.sleep(seconds)
    before = sum(counts)
    stop.set()
    elapsed = time.perf_counter() - t0
    for t in threads:
        t.join(WAIT)
    if errors:
        raise errors[0]
    return before / elapsed


class _HeldTurns:
    """Turns on ``sids`` through ``h``, each one's end read from a subscription held open
    on its session (what a conduit tailing a session does)."""

    def __init__(self, h: Host, sids: list[str]) -> None:
        self.h, self.sids = h, sids
        self.subs: dict[int, Any] = {}

    def setup(self, i: int) -> None:
        if i not in self.subs:
            sid = self.sids[i]
            self.subs[i] = self.h.subscribe(sid, self.h.history(sid)[-1].seq, kinds=TURN_END)

    def turn(self, i: int) -> None:
        a = self.h.send(self.sids[i], "hello")
        while True:
            ev = self.subs[i].get(WAIT)
            assert ev is not None
            if ev.seq > a.seq:
                return

    def close(self) -> None:
        for sub in self.subs.values():
            sub.close()


def throughput(root: str, sessions: int, rounds: int, seconds: float) -> None:
    rates: list[float] = []
    b_rates: list[float] = []
    with host(os.path.join(root, "throughput")) as h, echo_system() as echo:
        sids = [h.create() for _ in range(sessions)]
        echo.spawn(sessions)
        held = _HeldTurns(h, sids)

        def e_turn(i: int) -> None:
            echo.turn_done(i, echo.send(i).seq)

        try:
            # Each round runs both, back to back, the first one alternating: a machine whose
            # speed drifts (a shared host) moves both figures of a round alike, so the ratio
            # is taken per round and the median of those is reported.
            for i in range(rounds):
                if i % 2:
                    rates.append(_drive(sessions, seconds, held.turn, held.setup))
                    b_rates.append(_drive(sessions, seconds, e_turn, lambda i: None))
                else:
                    b_rates.append(_drive(sessions, seconds, e_turn, lambda i: None))
                    rates.append(_drive(sessions, seconds, held.turn, held.setup))
        finally:
            held.close()
    rate, b_rate = statistics.median(rates), statistics.median(b_rates)
    ratios = [r / b for r, b in zip(rates, b_rates, strict=True)]
    ratio = statistics.median(ratios)
    verdict = "met" if ratio >= 0.6 else "MISSED"
    print(f"aggregate turns/s, {sessions} sessions, one thread each ({rounds} rounds)")
    print(f"  vertebra  {rate:7.0f} turns/s  (rounds {', '.join(f'{r:.0f}' for r in rates)})")
    print(f"  echo      {b_rate:7.0f} turns/s  (rounds {', '.join(f'{r:.0f}' for r in b_rates)})")
    print(
        f"  ratio     {ratio:5.2f}x  median of the rounds' "
        f"({', '.join(f'{x:.2f}' for x in ratios)}; of the medians {rate / b_rate:.2f}x)  "
        f"target >= 0.6x echo: {verdict}"
    )


# -- scale: the tail and the Host's re-sends as sessions grow ------------------------------


def _timed(
    turn: Callable[[int], None], into: list[float], lost: list[int] | None = None
) -> Callable[[int], None]:
    """``turn`` timed into ``into``; with ``lost``, a Host that gives up on a request
    (`HostTimeout`) counts there and as a turn of the whole wait, and the loop goes on."""

    def timed(i: int) -> None:
        t0 = time.perf_counter()
        try:
            turn(i)
        except HostTimeout:
            if lost is None:
                raise
            lost.append(i)
        into.append(time.perf_counter() - t0)

    return timed


def scale(root: str, counts: list[int], seconds: float) -> None:
    """Per-turn p50/p99 and turns/s at each count of live sessions (closed loop, a thread
    per session, the echo pipeline beside at the same count), and the Host's re-sends
    (requests sent again for want of a reply) during each: the issue's 200-session tail."""
    print(f"scale: closed loop, {seconds:.0f} s per count, echo at the same count")
    with host(os.path.join(root, "scale")) as h, echo_system() as echo:
        sids: list[str] = []
        base: dict[int, float] = {}
        for n in counts:
            sids += [h.create() for _ in range(n - len(sids))]
            echo.spawn(n)  # sessions 0 .. n-1 (it creates only the missing ones)
            held = _HeldTurns(h, sids[:n])
            mine: list[float] = []
            theirs: list[float] = []
            lost: list[int] = []

            def e_turn(i: int) -> None:
                echo.turn_done(i, echo.send(i).seq)

            try:
                resent = h._runtime.resent
                rate = _drive(n, seconds, _timed(held.turn, mine, lost), held.setup)
                resends = h._runtime.resent - resent
            finally:
                held.close()
            e_rate = _drive(n, seconds, _timed(e_turn, theirs), lambda i: None)
            p99, e_p99 = pct(mine, 0.99), pct(theirs, 0.99)
            base.setdefault(0, p99)
            print(
                f"  {n:4d} sessions: vertebra {rate:6.0f} turns/s, p50 {ms(pct(mine, 0.5))} "
                f"p99 {ms(p99)} ({p99 / base[0]:.2f}x the first count's); echo {e_rate:6.0f} "
                f"turns/s, p50 {ms(pct(theirs, 0.5))} p99 {ms(e_p99)}; vertebra/echo p99 "
                f"{p99 / e_p99:.2f}x; Host re-sends {resends}, requests given up {len(lost)}"
            )


def creation(root: str, counts: list[int], k: int) -> None:
    """What creating a session costs with N already live: ``k`` creations one after
    another on reaching each count (the warm spares used up as a burst would), p50 and
    p99, against the first count's (the performance issue: at most 1.5x at 1,000 what
    it is at 50). The sessions before each timed burst are created untimed."""
    print(f"creation: {k} sessions created one after another at each count of live ones")
    with host(os.path.join(root, "creation")) as h:
        live = 0
        first = 0.0
        for n in counts:
            while live < n - k:
                h.create()
                live += 1
            took: list[float] = []
            while live < n:
                t0 = time.perf_counter()
                h.create()
                took.append(time.perf_counter() - t0)
                live += 1
            p50 = pct(took, 0.5)
            first = first or p50
            print(
                f"  {n:5d} live: create p50 {ms(p50)} p99 {ms(pct(took, 0.99))} "
                f"({p50 / first:.2f}x the first count's p50; target <= 1.5x)"
            )


# -- the authenticated frame's cost ----------------------------------------------------


def auth_probe(root: str, sessions: int, seconds: float, acks: int) -> dict[str, float]:
    """One measurement in this process: ack latencies, then turns/s over ``sessions``."""
    lat: list[float] = []
    with host(os.path.join(root, "auth")) as h:
        sids = [h.create() for _ in range(sessions)]
        for i in range(acks // 5):  # warm the connections up
            h.send(sids[0], f"warm {i}")
        for i in range(acks):
            t0 = time.perf_counter()
            h.send(sids[0], f"ack {i}")
            lat.append(time.perf_counter() - t0)
        held = _HeldTurns(h, sids)
        try:
            rate = _drive(sessions, seconds, held.turn, held.setup)
        finally:
            held.close()
    return {"rate": rate, "p50": pct(lat, 0.5), "p99": pct(lat, 0.99)}


def auth_cost(sessions: int, rounds: int, seconds: float, acks: int) -> None:
    """The authenticated frame against Thespian's plain pickles, in alternating rounds.

    Each measurement runs in a fresh process of its own: the frame is installed into
    Thespian for a whole process tree, and the plain one exists only for this baseline.
    """
    figures: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for _ in range(rounds):
        for auth in (False, True):
            out = subprocess.run(
                [
                    sys.executable,
                    os.path.abspath(__file__),
                    "--probe",
                    "on" if auth else "off",
                    "--probe-args",
                    f"{sessions},{seconds},{acks}",
                ],
                capture_output=True,
                text=True,
                timeout=300,
                check=True,
            )
            figures[auth].append(json.loads(out.stdout.strip().splitlines()[-1]))

    def med(auth: bool, key: str) -> float:
        return statistics.median(f[key] for f in figures[auth])

    rate, plain = med(True, "rate"), med(False, "rate")
    verdict = "met" if rate >= 0.9 * plain else "MISSED"
    print(f"authenticated frame vs plain pickles, {sessions} sessions ({rounds} rounds each)")
    rounds_on = ", ".join(f"{f['rate']:.0f}" for f in figures[True])
    rounds_off = ", ".join(f"{f['rate']:.0f}" for f in figures[False])
    print(f"  authenticated  {rate:7.0f} turns/s  (rounds {rounds_on})")
    print(f"  plain          {plain:7.0f} turns/s  (rounds {rounds_off})")
    print(f"  ratio          {rate / plain:5.2f}x  target >= 0.9x: {verdict}")
    for key in ("p50", "p99"):
        a, b = med(True, key), med(False, key)
        print(f"  ack {key}  authenticated {ms(a)}  plain {ms(b)}  ratio {a / b:5.2f}x")


def frame_cost(n: int = 20000) -> None:
    """CPU cost of one frame, both ends: pickle alone against the authenticated frame
    (best of seven alternating runs of ``n``, in thread CPU time, so that the figure
    hardly depends on the machine's load)."""
    import pickle

    from actors import messages as m
    from actors._runtime import transport_auth as ta

    kid = ta.use_secret(os.urandom(32))
    msg = (
        "sender",
        m.SendMessage(request_id=str(uuid.uuid4()), session_id="s1", text="hi" * 40, key="k1"),
    )

    def plain() -> None:
        pickle.loads(pickle.dumps(msg))

    def framed() -> None:
        ta._open(ta._frame(kid, pickle.dumps(msg)))

    def once(fn: Callable[[], None]) -> float:
        # This thread's CPU time: what the other processes on the machine do drops out.
        t0 = time.thread_time()
        for _ in range(n):
            fn()
        return (time.thread_time() - t0) / n

    runs: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(7):
        runs[True].append(once(framed))
        runs[False].append(once(plain))
    a, b = min(runs[True]), min(runs[False])
    size = len(pickle.dumps(msg))
    print(f"one frame sent and received ({size} B message), CPU")
    print(
        f"  authenticated {a * 1e6:6.1f} us  plain pickle {b * 1e6:6.1f} us  "
        f"added {(a - b) * 1e6:5.1f} us per frame"
    )


def probe_main(mode: str, spec: str) -> None:
    """``--probe on|off``: one `auth_probe` in this process, its figures as JSON."""
    from actors._runtime import transport_auth

    if mode == "off":
        transport_auth._disable_for_measurement()
    loopback_only()
    sessions, seconds, acks = spec.split(",")
    root = tempfile.mkdtemp(prefix="vertebra-bench-")
    try:
        got = auth_probe(root, int(sessions), float(seconds), int(acks))
    finally:
        shutil.rmtree(root, ignore_errors=True)
        deadline = time.monotonic() + 30
        while system_processes() and time.monotonic() < deadline:
            time.sleep(0.1)
    left = system_processes()
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    if left:
        sys.exit(f"processes left behind: {left}")
    print(json.dumps(got))


# -- recovery --------------------------------------------------------------------------


def fill(db: str, sid: str, n: int) -> int:
    """Write a plausible conversation of at least ``n`` events into ``sid``'s stream."""
    log = SqliteLog(db)
    try:
        events = [Event(kind=Kind.SESSION_STARTED)]
        turn = 0
        while len(events) < n:
            turn += 1
            events += [
                Event(kind=Kind.USER_MESSAGE, text=f"question {turn} about the quarterly report"),
                Event(kind=Kind.TURN_STARTED, turn=turn),
                Event(kind=Kind.ASSISTANT, turn=turn, text=f"[scripted] answer {turn} " * 4),
                Event(
                    kind=Kind.TURN_COMPLETED,
                    turn=turn,
                    stop_reason="end_turn",
                    usage=Usage(input_tokens=12, output_tokens=40),
                ),
                Event(kind=Kind.LIFECYCLE, phase=Phase.DONE, turn=turn),
            ]
        seq = 0
        for i in range(0, len(events), 1000):
            seq = log.append(sid, events[i : i + 1000], expected_seq=seq).last_seq
        return seq
    finally:
        log.close()


def recovery(root: str, kills: int) -> None:
    data = os.path.join(root, "recovery")
    os.makedirs(data)
    sid = new_sid()
    filled = fill(spine_path(data), sid, 10_000)
    times: list[float] = []
    b_times: list[float] = []
    # Kills are spaced past the restart window, so each restart is a first one (backoff
    # 10 ms) rather than a growing backoff; the window is short only to keep the run short.
    window = 0.3
    with host(data, restart_window=window, max_restarts=kills + 5) as h, echo_system() as echo:
        echo.spawn(1)
        t0 = time.perf_counter()
        first = h.send(sid, "first load")
        cold = time.perf_counter() - t0
        h.wait_turn(sid, first.seq, timeout=WAIT)
        for i in range(kills):
            for kind in ("vertebra", "echo"):
                pid = h.session_pid(sid) if kind == "vertebra" else echo.pid(0)
                time.sleep(window + 0.05)
                t0 = time.perf_counter()
                os.kill(pid, signal.SIGKILL)
                if kind == "vertebra":
                    a = h.send(sid, f"after kill {i}", key=f"kill-{i}")
                    times.append(time.perf_counter() - t0)
                    h.wait_turn(sid, a.seq, timeout=WAIT)
                else:
                    echo.send(0, turn=False)
                    b_times.append(time.perf_counter() - t0)
                deadline = time.monotonic() + WAIT
                while not gone(pid) and time.monotonic() < deadline:
                    time.sleep(0.01)
        restarts = h.get(sid).restarts
        last_seq = h.get(sid).last_seq
    print(f"SIGKILL -> serving again (ack of the next send), stream of {filled} events")
    print(f"  first load of the stream (cold, no snapshot yet): {ms(cold)}")
    report(f"  {kills} kills", times, b_times, 0.25)
    print(f"  restarts recorded {restarts}, stream now at seq {last_seq}")


def new_sid() -> str:
    from spine import new_session_id

    return new_session_id()


# -- memory ----------------------------------------------------------------------------


def memory(root: str, sessions: int, warm_spares: bool = True) -> None:
    with (
        host(os.path.join(root, "memory"), warm_spares=warm_spares) as h,
        echo_system() as echo,
    ):
        sids = [h.create() for _ in range(sessions)]
        # A live session has run a turn: its worker thread and log connections exist.
        acks = [h.send(s, "hello") for s in sids]
        for s, a in zip(sids, acks, strict=True):
            h.wait_turn(s, a.seq, timeout=WAIT)
        pids = [h.session_pid(s) for s in sids]
        echo.spawn(sessions)
        for i in range(sessions):
            echo.turn_done(i, echo.send(i).seq)
        b_pids = [echo.pid(i) for i in range(sessions)]
        assert len(set(pids)) == sessions and len(set(b_pids)) == sessions
        v = [smaps_rollup(p) for p in pids]
        b = [smaps_rollup(p) for p in b_pids]
    rss, pss = statistics.mean(x[0] for x in v), statistics.mean(x[1] for x in v)
    b_rss, b_pss = statistics.mean(x[0] for x in b), statistics.mean(x[1] for x in b)
    mb = 1024 * 1024
    verdict = "met" if pss <= 8 * mb else "MISSED"
    spares = "warm" if warm_spares else "cold"
    print(f"memory per live session process, {sessions} live sessions (mean), {spares} spares")
    print(
        f"  vertebra  RSS {rss / mb:6.1f} MB  PSS {pss / mb:6.2f} MB  target PSS <= 8 MB: {verdict}"
    )
    print(f"  echo      RSS {b_rss / mb:6.1f} MB  PSS {b_pss / mb:6.2f} MB")
    print(f"  ratio     RSS {rss / b_rss:5.2f}x     PSS {pss / b_pss:5.2f}x")


# -- main ------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a fast smoke run")
    ap.add_argument("--only-auth", action="store_true", help="only the authenticated frame's cost")
    ap.add_argument(
        "--cold-spares", action="store_true", help="measure memory with cold spare processes"
    )
    ap.add_argument(
        "--only-throughput",
        type=int,
        metavar="ROUNDS",
        help="only the turns/s at 50 sessions, ROUNDS rounds (bench/transport.py runs it)",
    )
    ap.add_argument(
        "--only-memory", type=int, metavar="N", help="only the memory of N live sessions"
    )
    ap.add_argument(
        "--only-scale",
        metavar="N,N",
        help="only the tail and the Host's re-sends at each count of live sessions (50,200)",
    )
    ap.add_argument(
        "--only-create",
        metavar="N,N",
        help="only what creating a session costs at each count of live ones (50,1000)",
    )
    ap.add_argument("--seconds", type=float, default=10.0, help="per count, with --only-scale")
    ap.add_argument("--probe", choices=("on", "off"), help=argparse.SUPPRESS)
    ap.add_argument("--probe-args", default="10,1,50", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.probe:
        probe_main(args.probe, args.probe_args)
        return
    q = args.quick
    loopback_only()
    print(f"multiprocTCPBase, loopback, {os.cpu_count()} CPUs, instant scripted agent")
    started = time.perf_counter()
    root = tempfile.mkdtemp(prefix="vertebra-bench-")
    try:
        if args.only_memory:
            memory(root, sessions=args.only_memory, warm_spares=not args.cold_spares)
            return
        if args.only_scale:
            scale(root, [int(x) for x in args.only_scale.split(",")], args.seconds)
            return
        if args.only_create:
            creation(root, [int(x) for x in args.only_create.split(",")], k=30)
            return
        if args.only_throughput:
            throughput(root, sessions=50, rounds=args.only_throughput, seconds=3.0)
            return
        if not args.only_auth:
            latency(root, rounds=2 if q else 10, per_round=20 if q else 100)
            throughput(
                root, sessions=10 if q else 50, rounds=1 if q else 6, seconds=1.0 if q else 4.0
            )
        frame_cost()
        auth_cost(
            sessions=10 if q else 50,
            rounds=1 if q else 5,
            seconds=1.0 if q else 4.0,
            acks=50 if q else 300,
        )
        if not args.only_auth:
            recovery(root, kills=2 if q else 10)
            memory(root, sessions=20 if q else 200, warm_spares=not args.cold_spares)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        # Shutting 200 session processes down takes Thespian a while after shutdown() returns.
        deadline = time.monotonic() + 30
        left = system_processes()
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = system_processes()
        took = time.perf_counter() - started
        print(f"actor systems {len(SYSTEMS)}, processes left behind {len(left)}; {took:.0f} s")
        if left:
            for pid in left:
                print(f"  left: {pid} {_stat(pid)}")
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            sys.exit(1)


if __name__ == "__main__":
    main()
