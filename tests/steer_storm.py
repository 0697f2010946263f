"""The steer storm of `bench/conversation.py --storm`: steers racing tool-heavy turns on a real
multiprocess Host while the session's process is SIGKILLed, counted from the log and
from the requests the model really received (a loopback chat-completions server).

A turn opened by a ``turn N`` message asks for two calculator calls a round for
``ROUNDS`` rounds, then answers; any other turn (a plain message, a dropped steer handed
to the next turn) answers at once. The driver sends, in groups: one tool-heavy turn, then
steers and plain (enqueued) messages alternately, then SIGKILLs the session process (its
pid from the Runner's registry) at a random point of the turn. Checked afterwards:

- every acknowledged steer is in the log, as a steer (then exactly one ``steer.delivered``
  or ``steer.dropped`` names it, never both, never two) or, sent while nothing ran, as
  an ordinary message; every steer the log holds, acknowledged or not, is resolved once;
- every delivered steer's text reached the model in some request;
- no request the model received holds a tool call without its result.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import signal
import threading
import time
from collections import Counter
from typing import Any

from fake_models import FakeModelServer, chunk, tool_delta

from actors.agents import ModelFactory
from actors.errors import ActorsError
from actors.host import Host
from actors.session.rules.state import SessionState, fold
from spine import Event, Kind

#: Tool rounds of a ``turn N`` turn, and calls per round.
ROUNDS, WIDTH = 30, 2


class ToolHeavyModel:
    """A chat-completions server scripted from each request's messages (so any order of
    requests, and any crash between them, gets a coherent answer)."""

    def __init__(self) -> None:
        self.ids = itertools.count()
        self.server = FakeModelServer(route=self._route)

    def _route(self, body: Any) -> list[Any]:
        msgs = body.get("messages", []) if isinstance(body, dict) else []
        if _rounds_left(msgs) <= 0:
            return [("sse", [chunk(content="done"), chunk(finish="stop")]), ("done",)]
        n = next(self.ids)
        calls = [
            tool_delta(i, f"c{n}_{i}", "calculator", f'{{"expression": "{n}+{i}"}}')
            for i in range(WIDTH)
        ]
        return [("sse", [chunk(tool_calls=calls), chunk(finish="tool_calls")]), ("done",)]

    def requests(self) -> list[list[dict[str, Any]]]:
        with self.server.lock:
            # A body that is no JSON object (cut off by a kill) is no request.
            bodies = [r["body"] for r in self.server.requests]
        return [b.get("messages", []) for b in bodies if isinstance(b, dict)]


def _rounds_left(msgs: list[dict[str, Any]]) -> int:
    """Rounds the current turn still asks for: it is a tool-heavy one when the last
    ``turn N`` message comes after the last plain answer."""
    opener = answer = -1
    for i, m in enumerate(msgs):
        if m.get("role") == "user" and str(m.get("content", "")).startswith("turn "):
            opener = i
        elif m.get("role") == "assistant" and not m.get("tool_calls"):
            answer = i
    if opener < answer or opener < 0:
        return 0
    done = sum(1 for m in msgs[opener:] if m.get("role") == "assistant" and m.get("tool_calls"))
    return ROUNDS - done


def unanswered_calls(msgs: list[dict[str, Any]]) -> list[str]:
    """Tool call ids of ``msgs`` with no tool message answering them right after their
    assistant message (before the next non-tool message)."""
    missing: list[str] = []
    for i, m in enumerate(msgs):
        if m.get("role") != "assistant" or not m.get("tool_calls"):
            continue
        answered = set()
        for later in msgs[i + 1 :]:
            if later.get("role") != "tool":
                break
            answered.add(later.get("tool_call_id"))
        missing += [c["id"] for c in m["tool_calls"] if c.get("id") not in answered]
    return missing


class Killer:
    """SIGKILLs the session's process, found by pid through the Runner's registry, never
    one it killed before (the Runner may not have seen that one exit yet)."""

    def __init__(self, h: Host, sid: str) -> None:
        self.h, self.sid = h, sid
        self.killed: set[int] = set()

    def kill(self, deadline: float = 30.0) -> None:
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            pid = self.h.session_pid(self.sid)
            if pid not in self.killed:
                self.killed.add(pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                return
            time.sleep(0.02)
        raise SystemExit("the session was not restarted after a kill")


def _settled(events: list[Event], sid: str) -> bool:
    st = fold(SessionState(session_id=sid), events)
    return st.open_turn is None and not st.pending and not st.steers


def _drain(h: Host, sid: str, timeout: float) -> list[Event]:
    end = time.monotonic() + timeout
    while True:
        events = h._log.read_events(sid)
        if _settled(events, sid) or time.monotonic() > end:
            return events
        time.sleep(0.2)


def storm(
    data: str, steers: int, kills: int, seed: int = 27
) -> tuple[dict[str, int], list[float], list[float]]:
    """Run the storm; returns the counts and the steer and plain ack times (seconds)."""
    rng = random.Random(seed)
    model = ToolHeavyModel()
    try:
        with Host(
            os.path.join(data, "storm"),
            base="multiprocTCPBase",
            timeout=30,
            factory=ModelFactory(backoff=0.01),
            model_servers=[model.server.url],
            # The storm measures steers under kills, not the budget that would fail a
            # session crashing this often (its backoff kept short the same way).
            max_restarts=kills + 5,
            restart_window=2.0,
        ) as h:
            sid = h.create()
            for cmd in (f"/provider openai {model.server.url}", "/model fake-1"):
                h.send(sid, cmd)
            acked, steer_t, plain_t = _drive(h, sid, rng, steers, kills)
            events = _drain(h, sid, 120.0)
            counts = _count(events, sid, acked, model.requests())
            counts["kills"] = kills
            h.close_session(sid)
    finally:
        model.server.close()
    return counts, steer_t, plain_t


def _drive(
    h: Host, sid: str, rng: random.Random, steers: int, kills: int
) -> tuple[list[int], list[float], list[float]]:
    killer = Killer(h, sid)
    per = max(1, steers // max(1, kills))
    acked: list[int] = []
    steer_t: list[float] = []
    plain_t: list[float] = []
    for g in range(max(1, kills)):
        _send(h, sid, f"turn {g}", "enqueue", [])
        for i in range(g * per, min(steers, (g + 1) * per)):
            seq = _send(h, sid, f"steer {i}", "steer", steer_t)
            if seq:
                acked.append(seq)
            if i % 2:
                _send(h, sid, f"plain {i}", "enqueue", plain_t)
        if g < kills:
            threading.Event().wait(rng.uniform(0.0, 0.3))
            killer.kill()
    return acked, steer_t, plain_t


#: Sends the Host gave up on (timed out, or refused as poison after two crashes).
UNACKED: Counter[str] = Counter()


def _send(h: Host, sid: str, text: str, mode: str, took: list[float]) -> int:
    t0 = time.perf_counter()
    try:
        seq = h.send(sid, text, mode=mode).seq
    except ActorsError as exc:
        UNACKED[f"{mode} not acknowledged ({type(exc).__name__})"] += 1
        return 0
    took.append(time.perf_counter() - t0)
    return seq


def _resolutions(events: list[Event]) -> Counter[tuple[int, str]]:
    out: Counter[tuple[int, str]] = Counter()
    for e in events:
        if e.kind in (Kind.STEER_DELIVERED, Kind.STEER_DROPPED):
            out[(int(e.extra.get("steer", 0)), str(e.kind))] += 1
    return out


def _count(
    events: list[Event], sid: str, acked: list[int], requests: list[list[dict[str, Any]]]
) -> dict[str, int]:
    by_seq = {e.seq: e for e in events}
    steer_seqs = [
        e.seq for e in events if e.kind == Kind.USER_MESSAGE and e.extra.get("steer") is True
    ]
    res = _resolutions(events)
    c: Counter[str] = Counter()
    for seq in steer_seqs:
        got = (res[(seq, str(Kind.STEER_DELIVERED))], res[(seq, str(Kind.STEER_DROPPED))])
        c[{(1, 0): "delivered", (0, 1): "dropped", (0, 0): "missing"}.get(got, "twice")] += 1
    for seq in acked:
        e = by_seq.get(seq)
        if e is None or e.kind != Kind.USER_MESSAGE:
            c["acked but not in the log"] += 1
        elif e.extra.get("steer") is not True:
            c["acked while idle (a turn)"] += 1
    c["resolutions naming no steer"] = sum(
        n for (seq, _), n in res.items() if seq not in set(steer_seqs)
    )
    heard = {
        str(m.get("content", "")) for msgs in requests for m in msgs if m.get("role") == "user"
    }
    delivered = [e for e in events if e.kind == Kind.STEER_DELIVERED]
    c["delivered, never heard by the model"] = sum(1 for e in delivered if e.text not in heard)
    c["requests"] = len(requests)
    c["requests with a call and no result"] = sum(1 for r in requests if unanswered_calls(r))
    c["steers in the log"] = len(steer_seqs)
    c["acked"] = len(acked)
    c["turns cancelled by a crash"] = sum(
        1 for e in events if e.kind == Kind.TURN_CANCELLED and e.reason == "crash"
    )
    c["settled"] = int(_settled(events, sid))
    c.update(UNACKED)
    return dict(c)
