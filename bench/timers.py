"""Durable timers under faults: many one-shot timers over many mostly passivated sessions of
a real daemon (`vertebra serve`), with session SIGKILLs and a SIGKILL of the daemon itself,
restarted on the same data directory.

Every session gets its timers due in one burst (one every ``SPACING`` s); the bursts are
spread over the window, so at any time a few sessions are live and the rest passivated
(a short idle timeout), woken by the Runner's index of due times. Reported, from the log:

- lost (a timer set that never fired) and fired twice (more than one ``timer.fired`` per
  timer and due time), and messages delivered twice;
- lateness (the ``late`` a firing records: seconds after its due time) p50 / p99 in steady
  state (timers due before the daemon kill, in sessions never SIGKILLed; target p99 <=
  50 ms), of the SIGKILLed sessions' timers, and after recovery (timers due from the daemon
  kill on, counted from their due time or the restarted daemon's serving, whichever is
  later; target p99 <= 1 s);
- memory: PSS summed over every process of the daemon's actor system with all sessions
  passivated, before the timers are set and with every timer waiting (passivated sessions
  have no process, so the whole system is compared; target: waiting <= without timers,
  within noise).

``python bench/timers.py`` (200 sessions x 50 timers, about 4 minutes); ``--quick`` for 20 x
50. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

from actors._runtime.system import processes_in_session  # noqa: E402
from actors.cli._daemon import lock_held  # noqa: E402
from actors.host import Host  # noqa: E402
from spine import Kind, SqliteLog  # noqa: E402

CLI = [sys.executable, "-m", "actors.cli"]
#: Seconds between one session's timers; its burst lasts ``SPACING * per`` seconds.
SPACING = 0.1
IDLE = 1.0
THREADS = 4


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def wait(cond: Any, timeout: float, what: str, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(interval)
    raise TimeoutError(f"{what}: not within {timeout} s")


class Daemon:
    """``vertebra serve`` on ``data``, started and killed by pid."""

    def __init__(self, data: pathlib.Path) -> None:
        self.data = data
        self.proc: subprocess.Popen[bytes] | None = None
        self.info: dict[str, Any] = {}

    def start(self) -> Host:
        info = self.data / "daemon.json"
        info.unlink(missing_ok=True)
        env = {k: v for k, v in os.environ.items() if k != "VERTEBRA_DATA"}
        self.proc = subprocess.Popen(
            [*CLI, "--data", str(self.data), "serve", "--quiet", "--idle-timeout", str(IDLE)],
            stdout=subprocess.DEVNULL,
            stderr=open(self.data / "serve.err", "ab"),  # noqa: SIM115 - the child owns it
            env=env,
        )
        proc = self.proc
        wait(lambda: info.exists() or proc.poll() is not None, 60, "daemon.json")
        if proc.poll() is not None:
            raise RuntimeError(f"serve exited {proc.returncode}")
        self.info = json.loads(wait(lambda: info.read_text() or None, 10, "daemon.json"))
        return Host(self.data, attach=True, admin_port=int(self.info["admin_port"]), timeout=30)

    def processes(self) -> list[int]:
        return processes_in_session(int(self.info["system_session"]))

    def kill(self) -> None:
        """SIGKILL of the serve process alone: its watchdog takes the actor system along."""
        assert self.proc is not None
        session = int(self.info["system_session"])
        self.proc.kill()
        self.proc.wait(30)
        wait(lambda: not processes_in_session(session), 30, "old actor processes gone")
        wait(lambda: not lock_held(str(self.data)), 30, "lock free")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def pss(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            text = pathlib.Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1]) * 1024
    return total


def settled_pss(h: Host, d: Daemon, timers: int) -> tuple[int, int]:
    """(PSS of the whole actor system, process count) once no session is live and the
    index holds ``timers``; the median of five readings."""
    wait(lambda: h.stats()["live"] == 0, 120, "every session passivated")
    wait(lambda: h.stats()["timers_set"] == timers, 120, "the index caught up")
    time.sleep(0.5)  # the exits' last writes; not synchronization, a settling of pages
    readings = []
    for _ in range(5):
        readings.append(pss(d.processes()))
        time.sleep(0.2)
    return int(statistics.median(readings)), len(d.processes())


def in_threads(jobs: list[Any]) -> None:
    errors: list[BaseException] = []

    def worker(part: list[Any]) -> None:
        try:
            for job in part:
                job()
        except BaseException as exc:  # reported below, the run fails
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(jobs[i::THREADS],)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def calibrate(h: Host, per: int) -> float:
    """Seconds one timer takes to set, on a throwaway session closed afterwards (closing
    cancels its timers)."""
    sid = h.create()
    t = time.monotonic()
    for j in range(per):
        h.set_timer(sid, "cal", at=time.time() + 3600, timer_id=f"cal{j}")
    took = (time.monotonic() - t) / per
    h.close_session(sid)
    return took


def set_all(h: Host, sids: list[str], per: int, t0: float, gap: float) -> dict[str, float]:
    """Every session's burst: timer ``i.j`` due at ``t0 + i*gap + j*SPACING``."""
    due: dict[str, float] = {}

    def one(i: int, sid: str) -> None:
        for j in range(per):
            at = t0 + i * gap + j * SPACING
            due[h.set_timer(sid, f"timer {i}.{j}", at=at, timer_id=f"b{i}.{j}")] = at

    in_threads([lambda i=i, sid=sid: one(i, sid) for i, sid in enumerate(sids)])
    return due


def faults(
    h: Host, d: Daemon, sids: list[str], t0: float, gap: float, window: float, kills: int
) -> tuple[set[str], float, float, Host]:
    """SIGKILL ``kills`` sessions in their bursts over the first half of the window, then
    the daemon at 60% of it; returns (killed sessions, kill time, serving again, host)."""
    killed: set[str] = set()
    for k in range(1, kills + 1):
        at = t0 + 0.5 * window * k / (kills + 1)
        time.sleep(max(0.0, at - time.time()))
        i = min(len(sids) - 1, max(0, int((time.time() - t0) / gap) - 1))
        os.kill(h.session_pid(sids[i]), signal.SIGKILL)
        killed.add(sids[i])
    time.sleep(max(0.0, t0 + 0.6 * window - time.time()))
    killed_at = time.time()
    d.kill()
    h2 = d.start()
    h2.stats()
    return killed, killed_at, time.time(), h2


def count(data: pathlib.Path, sids: list[str], due: dict[str, float]) -> dict[str, Any]:
    log = SqliteLog(str(data / "spine.db"))
    fired: Counter[tuple[str, float]] = Counter()
    delivered: Counter[str] = Counter()
    late: dict[str, float] = {}
    owner: dict[str, str] = {}
    for sid in sids:
        for e in log.read_events(sid):
            tid = str(e.extra.get("timer", ""))
            if e.kind == Kind.TIMER_FIRED and tid in due:
                fired[(tid, float(e.extra["due"]))] += 1
                late[tid] = float(e.extra["late"])
                owner[tid] = sid
            elif e.kind == Kind.USER_MESSAGE and tid in due:
                delivered[tid] += 1
    log.close()
    return {
        "lost": sorted(set(due) - {t for t, _ in fired}),
        "twice": sorted(k for k, n in fired.items() if n > 1),
        "delivered_twice": sorted(t for t, n in delivered.items() if n > 1),
        "undelivered": sorted(set(due) - set(delivered)),
        "late": late,
        "owner": owner,
    }


def line(name: str, xs: list[float], target: float | None = None) -> None:
    p50, p99 = pct(xs, 0.5) * 1000, pct(xs, 0.99) * 1000
    verdict = "" if target is None else ("  met" if p99 <= target * 1000 else "  MISSED")
    aim = "" if target is None else f"  target p99 <= {target * 1000:.0f} ms"
    print(
        f"  {name:<34} n={len(xs):5d}  p50 {p50:8.1f} ms  p99 {p99:8.1f} ms  max "
        f"{max(xs, default=0) * 1000:8.1f} ms{aim}{verdict}"
    )


def report(
    c: dict[str, Any], due: dict[str, float], killed: set[str], kill_at: float, serving: float
) -> None:
    steady, sessions, recovered = [], [], []
    for tid, late in c["late"].items():
        at = due[tid]
        if at >= kill_at:
            recovered.append(at + late - max(at, serving))
        elif c["owner"][tid] in killed:
            sessions.append(late)
        else:
            steady.append(late)
    print(
        f"timers: {len(due)}  lost {len(c['lost'])}  fired twice {len(c['twice'])}  "
        f"delivered twice {len(c['delivered_twice'])}  undelivered {len(c['undelivered'])}"
    )
    for name in ("lost", "twice", "delivered_twice", "undelivered"):
        if c[name]:
            print(f"  {name}: {c[name][:10]}")
    print("lateness (timer.fired's late; after recovery: from max(due, serving again))")
    line("steady state", steady, 0.05)
    line("SIGKILLed sessions' bursts", sessions)
    line("after the daemon kill (recovery)", recovered, 1.0)
    print(
        f"  daemon down (kill -> serving again): {serving - kill_at:.2f} s; timers due "
        f"while down: {sum(1 for t in due.values() if kill_at <= t < serving)}"
    )


def run(root: pathlib.Path, sessions: int, per: int, window: float, kills: int) -> None:
    d = Daemon(root)
    h = d.start()
    try:
        sids = [h.create() for _ in range(sessions)]
        per_set = calibrate(h, per)
        without, procs = settled_pss(h, d, 0)
        # Setting runs no faster in threads on a loaded machine: twice the serial estimate.
        margin = per_set * sessions * per * 2 + 20.0
        t0 = time.time() + margin
        gap = window / sessions
        t = time.time()
        due = set_all(h, sids, per, t0, gap)
        print(
            f"set {len(due)} timers in {time.time() - t:.1f} s "
            f"({(time.time() - t) / len(due) * 1000:.2f} ms each, {THREADS} threads)"
        )
        waiting, wprocs = settled_pss(h, d, len(due))
        if time.time() > t0:
            print("  WARNING: the first timers came due before the memory reading")
        mb = 1024 * 1024
        print(f"memory, whole actor system, {sessions} sessions passivated (PSS)")
        print(f"  without timers {without / mb:8.1f} MB ({procs} processes)")
        print(
            f"  {len(due):5d} waiting   {waiting / mb:8.1f} MB ({wprocs} processes)  "
            f"{(waiting - without) / mb:+.1f} MB, {(waiting - without) / len(due):+.0f} B "
            f"per timer, ratio {waiting / without:.3f}x  target <= 1x"
        )
        killed, kill_at, serving, h = faults(h, d, sids, t0, gap, window, kills)
        end = t0 + window + per * SPACING
        wait(
            lambda: time.time() > end and h.stats()["timers_set"] == 0,
            end - time.time() + 120,
            "every timer fired",
            interval=0.5,
        )
    finally:
        d.stop()
    report(count(root, sids, due), due, killed, kill_at, serving)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="20 sessions x 50 timers")
    args = p.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    sessions, per, window, kills = (20, 50, 20.0, 3) if args.quick else (200, 50, 120.0, 6)
    load = os.getloadavg()
    print(
        f"{sessions} sessions x {per} timers over {window:.0f} s (+{per * SPACING:.0f} s "
        f"bursts), idle timeout {IDLE} s; load average {load[0]:.1f} {load[1]:.1f}"
    )
    with tempfile.TemporaryDirectory(prefix="vertebra-timers-") as root:
        run(pathlib.Path(root), sessions, per, window, kills)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
