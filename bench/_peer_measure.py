"""Measurement and report of `bench/peers.py` (run inside the benchmark's environment)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench import _peer_drivers as d

WAIT = 30.0  # seconds; bounds every wait so a broken run fails instead of hanging
PEERS = ("langgraph", "agents-sdk")


@dataclass(frozen=True)
class Plan:
    sessions: int
    rounds: int
    seconds: float
    long_history: int
    long_turns: int
    restarts: int
    single_turns: int = 100


# -- nothing reaches the network -------------------------------------------------------


#: Hosts already judged: Thespian looks its addresses up on every connection, and the
#: guard must not cost the measured systems more than a dict look-up.
_JUDGED: dict[Any, bool] = {}


def _loopback(host: Any) -> bool:
    known = _JUDGED.get(host)
    if known is not None:
        return known
    # The machine's own name resolves from its hosts file (Thespian looks it up).
    ok = host in (None, "", "localhost", b"localhost", socket.gethostname())
    if not ok:
        with contextlib.suppress(ValueError):
            text = host.decode() if isinstance(host, bytes) else str(host)
            ok = ipaddress.ip_address(text).is_loopback
    _JUDGED[host] = ok
    return ok


def no_network() -> None:
    """Refuse, in this process and every process it forks, any connection, datagram or
    name look-up that is not loopback: a peer that tried to phone home fails the run."""
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
    real_sendto, real_getaddrinfo = socket.socket.sendto, socket.getaddrinfo

    def check(sock: socket.socket, address: Any) -> None:
        inet = sock.family in (socket.AF_INET, socket.AF_INET6)
        if inet and isinstance(address, tuple) and not _loopback(address[0]):
            raise ConnectionRefusedError(f"the benchmark reaches no network: {address!r}")

    def connect(self: socket.socket, address: Any) -> None:
        check(self, address)
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        check(self, address)
        return real_connect_ex(self, address)

    def sendto(self: socket.socket, data: Any, *args: Any) -> int:
        check(self, args[-1])
        return real_sendto(self, data, *args)  # type: ignore[arg-type]

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not _loopback(host):
            raise socket.gaierror(f"the benchmark looks no name up: {host!r}")
        return real_getaddrinfo(host, *args, **kwargs)

    socket.socket.connect = connect  # type: ignore[method-assign]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]
    socket.socket.sendto = sendto  # type: ignore[assignment]
    socket.getaddrinfo = getaddrinfo
    for var in ("OPENAI_API_KEY", "LANGSMITH_API_KEY", "LANGCHAIN_API_KEY"):
        os.environ.pop(var, None)
    os.environ["LANGSMITH_TRACING"] = os.environ["LANGCHAIN_TRACING_V2"] = "false"
    os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"


# -- driving turns ---------------------------------------------------------------------


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def _threads(turn: Callable[[int], None], idx: list[int], seconds: float) -> tuple[float, list]:
    start = threading.Barrier(len(idx) + 1)
    stop = threading.Event()
    lat: list[list[float]] = [[] for _ in idx]
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            start.wait(WAIT)
            while not stop.is_set():
                t0 = time.perf_counter()
                turn(idx[k])
                if not stop.is_set():
                    lat[k].append(time.perf_counter() - t0)
        except BaseException as exc:
            errors.append(exc)
            stop.set()
            with contextlib.suppress(threading.BrokenBarrierError):
                start.abort()

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(len(idx))]
    for t in threads:
        t.start()
    start.wait(WAIT)
    t0 = time.perf_counter()
    time.sleep(seconds)
    done = [x for xs in lat for x in xs]
    elapsed = time.perf_counter() - t0
    stop.set()
    for t in threads:
        t.join(WAIT)
    if errors:
        raise errors[0]
    return len(done) / elapsed, done


async def _tasks(aturn: Any, idx: list[int], seconds: float) -> tuple[float, list]:
    stop = False
    lat: list[float] = []

    async def worker(i: int) -> None:
        while not stop:
            t0 = time.perf_counter()
            await aturn(i)
            if not stop:
                lat.append(time.perf_counter() - t0)

    tasks = [asyncio.ensure_future(worker(i)) for i in idx]
    t0 = time.perf_counter()
    await asyncio.sleep(seconds)
    done = list(lat)
    elapsed = time.perf_counter() - t0
    stop = True
    await asyncio.wait_for(asyncio.gather(*tasks), WAIT)
    return len(done) / elapsed, done


def closed_loop(system: Any, idx: list[int], seconds: float) -> tuple[float, list[float]]:
    """(turns/s, each turn's latency) of the sessions ``idx`` looping for ``seconds``."""
    if hasattr(system, "aturn"):
        return system.loop.run_until_complete(_tasks(system.aturn, idx, seconds))  # type: ignore[no-any-return]
    return _threads(system.turn, idx, seconds)


def sequential(system: Any, i: int, turns: int) -> list[float]:
    """Each latency of ``turns`` turns, one after another, on session ``i``."""

    async def run() -> list[float]:
        out = []
        for _ in range(turns):
            t0 = time.perf_counter()
            await system.aturn(i)
            out.append(time.perf_counter() - t0)
        return out

    if hasattr(system, "aturn"):
        return system.loop.run_until_complete(run())  # type: ignore[no-any-return]
    out = []
    for _ in range(turns):
        t0 = time.perf_counter()
        system.turn(i)
        out.append(time.perf_counter() - t0)
    return out


# -- restart to serving ----------------------------------------------------------------


def serve_main(system: str, store: str, key: str) -> None:
    """``--serve``: import, reopen ``store``, serve the next turn of ``key``; print when."""
    if system == "vertebra":
        import actors.host  # noqa: F401

        serve: Callable[[str, str], None] = d.vertebra_serve
    elif system == "langgraph":
        import langgraph.graph  # noqa: F401
        from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: F401

        serve = d.langgraph_serve
    else:
        import agents  # noqa: F401

        serve = d.agents_serve
    imported = time.time()
    serve(store, key)
    print(json.dumps({"imported": imported, "served": time.time()}), flush=True)
    if system == "vertebra":
        _reap()


def _reap() -> None:
    """Wait for the actor systems this process started to end; kill what outlives that."""
    from bench.actors import system_processes

    deadline = time.monotonic() + WAIT
    while system_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    left = system_processes()
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    if left:
        sys.exit(f"processes left behind: {left}")


def _stores(root: str) -> dict[str, tuple[str, str]]:
    """A store per system holding one session of ten turns: (store, session key)."""
    vdir = os.path.join(root, "restart-vertebra")
    out = {"vertebra": (vdir, d.vertebra_fill(vdir, 50))}
    lg = d.LangGraph(os.path.join(root, "restart-langgraph.sqlite"), 1)
    sdk = d.AgentsSDK(os.path.join(root, "restart-agents.sqlite"), 1)
    try:
        sequential(lg, 0, 10)
        sequential(sdk, 0, 10)
        out["langgraph"] = (os.path.join(root, "restart-langgraph.sqlite"), lg.threads[0])
        out["agents-sdk"] = (
            os.path.join(root, "restart-agents.sqlite"),
            sdk.sessions[0].session_id,
        )
    finally:
        lg.close()
        sdk.close()
    return out


def _probe(script: str, system: str, store: str, key: str) -> tuple[float, float]:
    t0 = time.time()
    out = subprocess.run(
        [sys.executable, script, "--serve", system, store, key],
        capture_output=True,
        text=True,
        timeout=WAIT * 4,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{system} did not serve after a restart: {out.stderr[-2000:]}")
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return got["served"] - t0, got["served"] - got["imported"]


def restarts(root: str, script: str, times: int) -> dict[str, dict[str, list[float]]]:
    stores = _stores(root)
    names = list(stores)
    figs: dict[str, dict[str, list[float]]] = {n: {"process": [], "reopen": []} for n in names}
    for r in range(times + 1):  # the first of each is a warm-up: the OS's file cache
        for n in names[r % 3 :] + names[: r % 3]:
            proc, reopen = _probe(script, n, *stores[n])
            if r:
                figs[n]["process"].append(proc)
                figs[n]["reopen"].append(reopen)
    return figs


# -- the run ---------------------------------------------------------------------------


def _open(root: str, plan: Plan) -> tuple[dict[str, Any], dict[str, int]]:
    """The three systems with their ``plan.sessions`` sessions, and each one's long
    session (vertebra's filled into its spine before its Host starts)."""
    vdir = os.path.join(root, "vertebra")
    long_sid = d.vertebra_fill(vdir, plan.long_history)
    systems: dict[str, Any] = {}
    try:
        systems["vertebra"] = d.Vertebra(vdir, plan.sessions)
        systems["langgraph"] = d.LangGraph(os.path.join(root, "langgraph.sqlite"), plan.sessions)
        systems["agents-sdk"] = d.AgentsSDK(os.path.join(root, "agents.sqlite"), plan.sessions)
        longs = {"vertebra": systems["vertebra"].add_session(long_sid)}
        for n in PEERS:
            longs[n] = systems[n].long_session(plan.long_history)
    except BaseException:
        for s in systems.values():
            s.close()
        raise
    return systems, longs


def _load(systems: dict[str, Any], plan: Plan) -> dict[str, dict[str, list[float]]]:
    """Alternating rounds: every system's closed loop of all sessions, then one fresh
    session alone; which system goes first turns round each round."""
    names = list(systems)
    idx = list(range(plan.sessions))
    figs: dict[str, dict[str, list[float]]] = {
        n: {"rates": [], "lat": [], "single": []} for n in names
    }
    for n in names:  # warm-up: processes, connections, the first checkpoint of each thread
        closed_loop(systems[n], idx, min(1.0, plan.seconds))
    for r in range(plan.rounds):
        for n in names[r % 3 :] + names[: r % 3]:
            rate, lat = closed_loop(systems[n], idx, plan.seconds)
            figs[n]["rates"].append(rate)
            figs[n]["lat"] += lat
            figs[n]["single"] += sequential(systems[n], systems[n].new_session(), plan.single_turns)
    return figs


def _long(systems: dict[str, Any], longs: dict[str, int], plan: Plan) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for n, s in systems.items():
        sequential(s, longs[n], 1)  # the first turn loads the session (vertebra: cold)
        out[n] = sequential(s, longs[n], plan.long_turns)
    return out


def run(plan: Plan, script: str) -> None:
    from actors._runtime.system import loopback_only

    loopback_only()
    print(f"{os.cpu_count()} CPUs, instant models, SQLite at synchronous=NORMAL for all")
    started = time.perf_counter()
    root = tempfile.mkdtemp(prefix="vertebra-peers-")
    try:
        systems, longs = _open(root, plan)
        try:
            load = _load(systems, plan)
            long = _long(systems, longs, plan)
        finally:
            for s in systems.values():
                s.close()
        rs = restarts(root, script, plan.restarts)
        from bench._peer_report import report

        report(plan, load, long, rs)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        _reap()
        print(f"took {time.perf_counter() - started:.0f} s")
