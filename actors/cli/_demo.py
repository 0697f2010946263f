"""`vertebra demo`: a conversation on the full runtime, in its own actor system."""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

from spine import Kind

from ..host import Host
from ._format import event_line, fanout_tree

#: What the demo's goal run delegates: two children, each a session of its own that
#: streams its answer slowly enough for the two to be seen running at the same time.
_HALVES = (
    "!slow 0.04 the first half: the spine stores every event once, in order",
    "!slow 0.04 the second half: each session is an actor in a process of its own",
)


def _run_suffix(host: Host) -> str:
    """The suffix of this run's named sessions: none the first time, then ``-2``, ``-3``...
    so the demo runs again and again on one data directory, each run on sessions of its
    own (an earlier run's are left as they are)."""
    n = 1
    while any(host.history(name + (f"-{n}" if n > 1 else "")) for name in _NAMED):
        n += 1
    return f"-{n}" if n > 1 else ""


#: The sessions the demo names (the others get fresh ids).
_NAMED = ("guarded", "planner")


def _goal_run(host: Host, out: Any, suffix: str = "") -> str:
    """A goal whose one response spawns two children; they run concurrently and fold back,
    and the parent answers with both results."""
    style = out.style
    pid = host.create("planner" + suffix, metadata={"objective": "delegate two halves"})
    objective = "\n".join("!tool spawn " + json.dumps({"objective": h}) for h in _HALVES)
    out.line(f"\n[{pid}] goal: spawn two children, one per half of the work")
    t0 = time.time()
    host.submit(pid, objective, budget={"max_turns": 4})
    answer = host.wait(pid, timeout=60)
    evs = host.history(pid)
    for ev in evs:
        if ev.kind in (Kind.CHILD_SPAWNED, Kind.CHILD_COMPLETED) and ev.goal == pid:
            out.line("  " + event_line(ev, style, pid))
    spans: list[tuple[float, float]] = []
    for kid in (e.child for e in evs if e.kind == Kind.CHILD_SPAWNED and e.goal == pid):
        own = host.history(kid)
        # The log stamps every event it stores.
        start = next(e.time.timestamp() for e in own if e.kind == Kind.TURN_STARTED and e.time)
        end = next(e.time.timestamp() for e in own if e.kind == Kind.CONVERGED and e.time)
        spans.append((start - t0, end - t0))
        out.line(
            f"  child {kid}: pid {host.session_pid(kid)}, its turn ran "
            f"{spans[-1][0]:.2f}s..{spans[-1][1]:.2f}s after the submit"
        )
    overlap = len(spans) == 2 and max(s for s, _ in spans) < min(e for _, e in spans)
    out.line(f"  children ran concurrently: {overlap}")
    out.line(f"  converged: {answer}")
    return pid


def _statuses(host: Host, out: Any, sessions: list[str]) -> None:
    """Each session's status projection, the fan-out drawn as a tree."""
    style = out.style
    out.line("\nstatus projections:")
    for sid in sessions:
        p = host.status(sid)
        u = p.usage
        out.line(
            f"  {style.paint('bold', sid)}: {p.turns} turns, "
            f"{u.input_tokens + u.output_tokens} tokens, outcome {p.outcome or '-'}, "
            f"admitted {p.admitted}, rejected {p.rejected}, egress blocked "
            f"{p.egress_blocked}, containment {p.containment or '-'}, record {p.record}"
        )
        if p.fanout:
            for line in fanout_tree(sid, p.fanout, style):
                out.line("    " + line)


def run_demo(data: str, out: Any) -> int:
    """Sessions in their own processes, a slash command, a tool call, an approval and a
    blocked egress, a goal run that fans out to two children, a streamed turn cut off by
    an interrupt, a session killed and brought back, a late subscriber replaying from seq
    0, a seal and its verification, and each session's status projection."""
    os.makedirs(data, exist_ok=True)
    host = Host(data)
    try:
        suffix = _run_suffix(host)
        sid = host.create(metadata={"objective": "show the runtime"})
        out.line(f"session {sid} (its own process, pid {host.session_pid(sid)})")
        _say(host, sid, out, "/model scripted-large")
        _say(host, sid, out, "What is the spine?")
        _say(host, sid, out, '!tool calculator {"expression": "17 * 23"}')
        gid = _governed_fetch(host, out, suffix)
        planner = _goal_run(host, out, suffix)
        _interrupted_turn(host, sid, out)
        _killed_and_back(host, sid, out, data)
        _late_replay(host, planner, out)
        # Sealing the parent covers what its children did (mirrored onto its stream).
        sealed = host.seal(planner)
        out.line(f"sealed {planner} seqs {sealed.first}..{sealed.last} (key {sealed.key_id})")
        report = host.verify(planner)
        out.line(f"verified {planner}: {report.ok} ({report.summary})")

        kids = [e.child for e in host.history(planner) if e.kind == Kind.CHILD_SPAWNED]
        _statuses(host, out, [sid, gid, planner, *kids])
    finally:
        host.close()
    return 0


def _say(host: Host, sid: str, out: Any, text: str) -> None:
    """Send ``text`` and print the notices, then the turn it started (if any)."""
    out.line(f"\n> {text}")
    ack = host.send(sid, text)
    for severity, notice in ack.notices:
        out.line(f"  [{severity}] {notice}")
    if not ack.consumed:
        ended = host.wait_turn(sid, ack.seq)
        for ev in host.history(sid)[ack.seq : ended.seq]:
            out.line("  " + event_line(ev, out.style, sid))


def _governed_fetch(host: Host, out: Any, suffix: str = "") -> str:
    """Governance: a sandboxed session's fetch of the cloud metadata address is refused by
    the egress guard before anyone is asked; its fetch of an allowlisted address waits for a
    human, who approves it (nothing listens there: the tool reports the refused connection)."""
    style = out.style
    meta = {"governance.trust": "sandboxed", "governance.egress_allow": "127.0.0.1"}
    gid = host.create("guarded" + suffix, metadata=meta)
    fetch = (
        '!tool http_get {"url": "http://169.254.169.254/latest/meta-data/"}\n'
        '!tool http_get {"url": "http://127.0.0.1:9/"}'
    )
    out.line(f"\n[{gid}, trust sandboxed] > {fetch}")
    ack = host.send(gid, fetch)
    deadline = time.monotonic() + 20
    while not (waiting := host.pending(gid)) and time.monotonic() < deadline:
        time.sleep(0.02)
    for w in waiting:
        out.line(f"  approval needed: action {w.call} ({w.action} {w.input})")
        host.approve(gid, w.call, note="approved by the demo")
        out.line(f"  approved action {w.call}")
    ended = host.wait_turn(gid, ack.seq)
    for ev in host.history(gid)[ack.seq : ended.seq]:
        out.line("  " + event_line(ev, style, gid))
    status = host.status(gid)
    out.line(
        f"  governance: admitted {status.admitted}, rejected {status.rejected}, "
        f"egress blocked {status.egress_blocked}, containment {status.containment}"
    )
    return gid


def _interrupted_turn(host: Host, sid: str, out: Any) -> None:
    """A streamed answer cut off halfway by an interrupt."""
    slow = "!slow 0.05 a long answer that the user cuts off halfway through"
    out.line(f"\n> {slow}")
    ack = host.send(sid, slow)
    with host.subscribe(sid, ack.seq, kinds=[Kind.TURN_STARTED]) as sub:
        sub.get(10)
    time.sleep(0.3)  # let some of the answer stream before the user interrupts
    host.interrupt(sid, reason="user pressed stop")
    ended = host.wait_turn(sid, ack.seq)
    out.line("  " + event_line(ended, out.style, sid))


def _killed_and_back(host: Host, sid: str, out: Any, data: str) -> None:
    """The session's process killed, the session answering again from a new one."""
    pid = host.session_pid(sid)
    os.kill(pid, signal.SIGKILL)
    out.line(f"\nkilled the session's process (pid {pid}) with SIGKILL")
    _say(host, sid, out, "Are you still there?")
    out.line(f"back in pid {host.session_pid(sid)}, restarts: {host.get(sid).restarts}")
    evs = host.history(sid)
    gapless = [e.seq for e in evs] == list(range(1, len(evs) + 1))
    out.line(f"\n{len(evs)} events in {sid}, seqs gapless: {gapless}, data in {data}")


def _late_replay(host: Host, planner: str, out: Any) -> None:
    """A subscriber that comes late replays the stream from seq 0, then goes live."""
    replayed: list[int] = []
    with host.subscribe(planner, 0) as sub:
        while len(replayed) < host.history(planner)[-1].seq:
            got = sub.get(10)
            if got is None:
                break
            replayed.append(got.seq)
    out.line(f"a late subscriber to {planner} replayed seqs {replayed[0]}..{replayed[-1]}")


__all__ = ["run_demo"]
