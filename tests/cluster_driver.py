"""The leader side of the network-namespace test (run inside the leader's namespace).

Started by tests/test_cluster_netns.py with one JSON argument. It is the convention
leader (a `Host` with ``convention_bind``), waits for the members, creates sessions and
keeps them under load from one thread each, SIGKILLs every process of one member's
namespace, then takes another member's link down and up again, and finally checks the
log. It prints one JSON line per phase and a last line with every figure; exit status 0
when it got that far (the test asserts on the figures).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from actors.host import Host
from actors.session.rules.state import SessionState, fold
from projections import project
from spine import Kind, open_log


def say(**kw: Any) -> None:
    print(json.dumps({**kw, "at": round(time.time(), 3)}), flush=True)


def ns_pids(ns: str) -> list[int]:
    out = subprocess.run(
        ["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=10, check=False
    )
    return [int(p) for p in out.stdout.split()]


class Load:
    """One thread per session: send a keyed message, wait for its turn, again."""

    def __init__(self, host: Host, sids: list[str], words: int, delay: float) -> None:
        self.host = host
        self.sids = sids
        self.words = " ".join(f"w{i}" for i in range(words))
        self.delay = delay
        self.stop = threading.Event()
        self.lock = threading.Lock()
        #: sid -> [(text, seq, monotonic time of the ack)]
        self.acked: dict[str, list[tuple[str, int, float]]] = {s: [] for s in sids}
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._run, args=(s,)) for s in sids]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def join(self, timeout: float) -> bool:
        self.stop.set()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self.threads)

    def _run(self, sid: str) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            text = f"!slow {self.delay} {sid[-6:]}-m{n} {self.words}"
            key = f"{sid}:{n}"
            ack = None
            # A send that fails (its session's host died under it) is sent again with the
            # same key: stored once however often it arrives.
            give_up = time.monotonic() + 60
            while ack is None and time.monotonic() < give_up:
                try:
                    ack = self.host.send(sid, text, key=key)
                except Exception as exc:
                    with self.lock:
                        self.errors.append(f"send {key}: {type(exc).__name__}: {exc}")
            if ack is None:
                return
            with self.lock:
                self.acked[sid].append((text, ack.seq, time.monotonic()))
            try:
                self.host.wait_turn(sid, ack.seq, timeout=30)
            except Exception as exc:
                with self.lock:
                    self.errors.append(f"wait {key}: {type(exc).__name__}: {exc}")

    def resumed_after(self, sids: list[str], t0: float) -> dict[str, float]:
        """Seconds from ``t0`` to the first ack after it, per session that has one."""
        out = {}
        with self.lock:
            for sid in sids:
                later = [t for (_, _, t) in self.acked[sid] if t > t0]
                if later:
                    out[sid] = min(later) - t0
        return out


class _Skip(Exception):
    """The configuration skips the rest of the phases (used while investigating)."""


def wait(pred: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout}s")
        time.sleep(0.05)


def placed(host: Host) -> dict[str, dict[str, Any]]:
    return {r["host"]: r for r in host.hosts()}


def main() -> int:
    cfg = json.loads(sys.argv[1])
    url, members = cfg["url"], cfg["members"]  # members: name -> namespace
    result: dict[str, Any] = {"phase": "result"}
    load: Load | None = None
    host: Host | None = None
    try:
        host = Host(
            cfg["data"],
            spine=url,
            convention_bind=cfg["bind"],
            admin_port=cfg["port"],
            timeout=30,
        )
        say(phase="leader-up")
        wait(lambda: sum(r["alive"] for r in host.hosts()) == len(members), 60, "members join")
        sids = [host.create(f"c-{i:02d}") for i in range(cfg["sessions"])]
        result["placement"] = {n: r["sessions"] for n, r in placed(host).items()}
        say(phase="created", placement=result["placement"])
        # Which member runs which session: from each session's lease holder (host/pid/...).
        load = Load(host, sids, words=cfg["words"], delay=cfg["delay"])
        load.start()
        wait(lambda: all(len(v) >= 2 for v in load.acked.values()), 60, "load runs")

        # -- a member dies: SIGKILL every process of its namespace ----------------------
        victim = cfg["kill"]
        before = _sessions_by_member(host, url, sids)
        moved = before.get(victim, [])
        pids = ns_pids(members[victim])
        t_kill = time.monotonic()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        say(phase="killed", member=victim, pids=len(pids), sessions=len(moved))
        wait(lambda: len(load.resumed_after(sids, t_kill)) == len(sids), 60, "resume after kill")
        resumed = load.resumed_after(moved, t_kill)
        result["kill"] = {
            "member": victim,
            "moved": len(moved),
            "resume_max_s": max(resumed.values()) if resumed else None,
            "resume_median_s": sorted(resumed.values())[len(resumed) // 2] if resumed else None,
            "detected": not placed(host)[victim]["alive"],
            "load": round(os.getloadavg()[0], 1),
        }
        say(phase="resumed", **result["kill"])

        # -- a partition: the member's link goes down, then up again --------------------
        cut = cfg["partition"]
        if not cut:
            raise _Skip
        before = _sessions_by_member(host, url, sids)
        moving = before.get(cut, [])
        link = cfg["links"][cut]
        subprocess.run(["ip", "link", "set", link, "down"], check=True, timeout=10)
        t_cut = time.monotonic()
        say(phase="partitioned", member=cut, sessions=len(moving))
        wait(lambda: not placed(host)[cut]["alive"], 30, "partition detected")
        detected = time.monotonic() - t_cut
        # Bounded, and the link comes back either way: the test then still checks every
        # invariant of the log before it reports a partition its sessions did not survive.
        try:
            wait(
                lambda: len(load.resumed_after(moving, t_cut)) == len(moving),
                cfg["cut_wait"],
                "resume after cut",
            )
            during = True
        except TimeoutError:
            during = False
        resumed = load.resumed_after(moving, t_cut)
        after = _sessions_by_member(host, url, sids)
        subprocess.run(["ip", "link", "set", link, "up"], check=True, timeout=10)
        t_heal = time.monotonic()
        wait(lambda: placed(host)[cut]["alive"], 60, "member back after the partition")
        # Whatever did not resume while cut off must resume once the link is back.
        wait(lambda: len(load.resumed_after(moving, t_cut)) == len(moving), 60, "resume after heal")
        result["partition"] = {
            "member": cut,
            "moved": len(moving),
            "detected_s": detected,
            "resume_max_s": max(resumed.values()) if resumed else None,
            "resume_median_s": sorted(resumed.values())[len(resumed) // 2] if resumed else None,
            "resumed_during_partition": during,
            "load": round(os.getloadavg()[0], 1),
            "left_on_member": len(after.get(cut, [])),
            "back_after_s": time.monotonic() - t_heal,
        }
        say(phase="healed", **result["partition"])
        # Let the stale incarnations' blocked appends reach the database (and be refused).
        time.sleep(cfg["after_heal"])
        if not load.join(60):
            raise TimeoutError("load threads did not stop")

        # -- the log: nothing acknowledged lost, nothing doubled, gapless, projections --
        lost = dup = gaps = open_turns = crash_closed = 0
        with open_log(url) as log:
            for sid in sids:
                evs = log.read_events(sid)
                if [e.seq for e in evs] != list(range(1, len(evs) + 1)):
                    gaps += 1
                users = [e.text for e in evs if e.kind == Kind.USER_MESSAGE]
                dup += len(users) - len(set(users))
                stored = set(users)
                lost += sum(1 for (text, _, _) in load.acked[sid] if text not in stored)
                state = fold(SessionState(session_id=sid), evs)
                open_turns += int(state.open_turn is not None)
                crash_closed += sum(
                    1 for e in evs if e.kind == Kind.TURN_CANCELLED and e.reason == "crash"
                )
            last = {sid: log.last_seq(sid) for sid in sids}
        wait(
            lambda: (
                (ix := host.index()) is not None
                and all((i := ix.get(s)) is not None and i.last_seq == last[s] for s in sids)
            ),
            60,
            "projection catches up",
        )
        with open_log(url) as log:
            mismatched = sum(1 for sid in sids if host.status(sid) != project(log.read_events(sid)))
        result.update(
            acked=sum(len(v) for v in load.acked.values()),
            lost=lost,
            duplicated=dup,
            gapped=gaps,
            open_turns=open_turns,
            turns_closed_as_crashes=crash_closed,
            projections_mismatched=mismatched,
            send_errors=len(load.errors),
            first_errors=load.errors[:3],
        )
    except _Skip:
        pass
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        if load is not None:
            load.join(30)
        if host is not None:
            host.close()
    say(**result)
    return 0


def _sessions_by_member(host: Host, url: str, sids: list[str]) -> dict[str, list[str]]:
    """Which member runs each session, from the lease each incarnation takes
    (``hostname/pid/incarnation``) and each member namespace's processes."""
    from_pid: dict[int, str] = {}
    for name, ns in json.loads(sys.argv[1])["members"].items():
        for pid in ns_pids(ns):
            from_pid[pid] = name
    out: dict[str, list[str]] = {}
    with open_log(url) as log:
        for sid in sids:
            lease = log.lease(sid)  # type: ignore[attr-defined]
            pid = int(lease[1].split("/")[1]) if lease else 0
            out.setdefault(from_pid.get(pid, "?"), []).append(sid)
    return out


if __name__ == "__main__":
    sys.exit(main())
