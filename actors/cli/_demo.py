"""`vertebra demo`: a conversation on the full runtime, in its own actor system."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from spine import Kind

from ..host import Host
from ._format import event_line


def run_demo(data: str, out: Any) -> int:
    """Sessions in their own processes, a slash command, a streamed turn cut off by an
    interrupt, and a session killed and brought back."""
    os.makedirs(data, exist_ok=True)
    style = out.style
    host = Host(data)
    try:
        sid = host.create(metadata={"objective": "show the runtime"})
        out.line(f"session {sid} (its own process, pid {host.session_pid(sid)})")

        def say(text: str) -> None:
            out.line(f"\n> {text}")
            ack = host.send(sid, text)
            for severity, notice in ack.notices:
                out.line(f"  [{severity}] {notice}")
            if not ack.consumed:
                ended = host.wait_turn(sid, ack.seq)
                for ev in host.history(sid)[ack.seq : ended.seq]:
                    out.line("  " + event_line(ev, style, sid))

        say("/model scripted-large")
        say("What is the spine?")
        say('!tool calculator {"expression": "17 * 23"}')

        # Governance: a sandboxed session's fetch waits for a human, who approves it; the
        # egress guard then refuses the cloud metadata address it points at.
        gid = host.create("guarded", metadata={"governance.trust": "sandboxed"})
        fetch = '!tool http_get {"url": "http://169.254.169.254/latest/meta-data/"}'
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
        slow = "!slow 0.05 a long answer that the user cuts off halfway through"
        out.line(f"\n> {slow}")
        ack = host.send(sid, slow)
        with host.subscribe(sid, ack.seq, kinds=[Kind.TURN_STARTED]) as sub:
            sub.get(10)
        time.sleep(0.3)  # let some of the answer stream before the user interrupts
        host.interrupt(sid, reason="user pressed stop")
        ended = host.wait_turn(sid, ack.seq)
        out.line("  " + event_line(ended, style, sid))

        pid = host.session_pid(sid)
        os.kill(pid, signal.SIGKILL)
        out.line(f"\nkilled the session's process (pid {pid}) with SIGKILL")
        say("Are you still there?")
        out.line(f"back in pid {host.session_pid(sid)}, restarts: {host.get(sid).restarts}")
        evs = host.history(sid)
        gapless = [e.seq for e in evs] == list(range(1, len(evs) + 1))
        out.line(f"\n{len(evs)} events in {sid}, seqs gapless: {gapless}, data in {data}")
    finally:
        host.close()
    return 0


__all__ = ["run_demo"]
