"""A storm of SIGKILLs against tool effects, counted outside the runtime: tools that
append a line to a file on every run, goal runs that call them, session and daemon kills
at random points between "effect done" and "result stored". Importable by actor processes
(the tools travel to them) and runnable against any build of the runtime (it counts
without asserting, so a build without the ledger can be measured the same way)."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import random
import signal
import time
from collections import Counter, defaultdict
from typing import Any

import attrs

from actors._runtime.system import processes_in_session
from actors.errors import GoalStalled, HostTimeout
from actors.host import Host
from spine import Event, Kind

#: The ledger's kinds by name, so that a build without them is measured the same way.
STARTED, IN_DOUBT = "action.started", "action.in_doubt"

#: Seconds a tool waits before its effect and after it (the kill lands in either).
BEFORE, AFTER = 0.05, 0.15


def _append(args: dict[str, Any], ctx: Any) -> str:
    """One line per run: the session's tag, the call, the key it ran under."""
    time.sleep(BEFORE)
    key = getattr(ctx, "idempotency_key", "")
    with open(args["log"], "a") as f:
        f.write(f"{args['tag']} {args['tool']} {ctx.tool_use_id} {key}\n")
    time.sleep(AFTER)
    return "appended"


def _approved(args: dict[str, Any], ctx: Any) -> str:
    return _append(args, ctx)


def storm_tools():  # type: ignore[no-untyped-def]
    """The built-ins plus ``append`` (runs once), ``append_idem`` (declared idempotent)
    and ``append_gated`` (needs a human's approval every time)."""
    from actors.agents import Tool, builtin_tools
    from actors.agents.governance import Requirement

    params = {"type": "object"}
    idem = {"idempotent": True} if "idempotent" in attrs.fields_dict(Tool) else {}
    tools = [
        Tool(name="append", description="a", parameters=params, fn=_append, context=True),
        Tool(
            name="append_idem",
            description="a",
            parameters=params,
            fn=_append,
            context=True,
            **idem,
        ),
        Tool(
            name="append_gated",
            description="a",
            parameters=params,
            fn=_approved,
            context=True,
            requirement=Requirement(approval=True),
        ),
    ]
    reg = builtin_tools()
    for t in tools:
        reg = reg.with_tool(t)
    return reg


def objective(log: pathlib.Path, tag: str, *tools: str) -> str:
    """A goal run's objective: one response calling each of ``tools`` (concurrently)."""
    lines = [f"!tool {t} " + json.dumps({"log": str(log), "tag": tag, "tool": t}) for t in tools]
    return "\n".join(lines)


def started_call(h: Host, sid: str) -> Event | None:
    """The session's first tool call that passed the gate (its intent, or on a build
    without intents its admission)."""
    return next(
        (e for e in h.history(sid) if e.kind in (STARTED, Kind.ACTION_ADMITTED) and e.tool), None
    )


def _started_call(h: Host, sid: str) -> bool:
    return any(e.kind in (STARTED, Kind.ACTION_ADMITTED) and e.tool for e in h.history(sid))


def wait_for(predicate: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(0.01)


def end_of(h: Host, sid: str, timeout: float = 60) -> str:
    """How the run ended: converged, stalled, or still waiting (a human to ask)."""
    try:
        h.wait(sid, timeout=timeout)
        return "converged"
    except GoalStalled:
        return "stalled"
    except HostTimeout:
        return "waiting"


def kill_session_mid_call(h: Host, sid: str, rng: random.Random) -> None:
    """SIGKILL the session's process at a random point of its first tool call's run."""
    wait_for(lambda: _started_call(h, sid), 30)
    time.sleep(rng.uniform(0, BEFORE + AFTER))
    with contextlib.suppress(ProcessLookupError):
        os.kill(h.session_pid(sid), signal.SIGKILL)


def kill_system(h: Host) -> None:
    """What a host's death does: every process of its actor system SIGKILLed, by PID."""
    session = h.system_session
    for pid in processes_in_session(session):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not processes_in_session(session), 30)


@attrs.define
class Tally:
    """What the storm did, counted from the file and the logs."""

    runs: Counter[str] = attrs.field(factory=Counter)
    #: Calls of a tool run more than once (call -> runs), per tool.
    doubled: dict[str, dict[str, int]] = attrs.field(factory=lambda: defaultdict(dict))
    #: Calls of an idempotent tool run again under another key.
    rekeyed: int = 0
    #: Tool calls whose ledger has an intent and neither an outcome nor an in-doubt record.
    lost: int = 0
    in_doubt: Counter[str] = attrs.field(factory=Counter)
    #: Tool intents stored in a turn past the run's max_turns.
    past_budget: int = 0
    ends: Counter[str] = attrs.field(factory=Counter)

    def report(self) -> str:
        doubled = {t: len(c) for t, c in self.doubled.items()}
        return (
            f"runs={dict(self.runs)} doubled={doubled} rekeyed={self.rekeyed} "
            f"lost={self.lost} in_doubt={dict(self.in_doubt)} past_budget={self.past_budget} "
            f"ends={dict(self.ends)}"
        )


def tally(log: pathlib.Path, histories: dict[str, list[Event]], max_turns: int) -> Tally:
    t = Tally()
    keys: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    runs: Counter[tuple[str, str, str]] = Counter()
    for line in log.read_text().splitlines() if log.exists() else []:
        tag, tool, use_id, *key = line.split(" ")
        runs[(tag, tool, use_id)] += 1
        keys[(tag, tool, use_id)].add(key[0] if key else "")
        t.runs[tool] += 1
    for (tag, tool, use_id), n in runs.items():
        if n > 1:
            t.doubled[tool][f"{tag}/{use_id}"] = n
    t.rekeyed = sum(1 for k in keys.values() if len(k) > 1)
    for evs in histories.values():
        own = [e for e in evs if not e.goal or e.kind in (Kind.CONVERGED, Kind.STALLED)]
        ended = {e.call for e in own if e.kind in (Kind.ACTION_COMPLETED, Kind.ACTION_REJECTED)}
        for e in own:
            if e.kind == IN_DOUBT:
                ended.add(e.call)
                t.in_doubt[str(e.extra.get("resolution", ""))] += 1
        for e in own:
            if e.kind == STARTED:
                t.lost += e.call not in ended
                t.past_budget += e.turn > max_turns
            if e.kind in (Kind.CONVERGED, Kind.STALLED):
                t.ends[str(e.kind)] += 1
        if not any(e.kind == STARTED for e in own):
            # A build without intents: a tool admission past the budget ran past it.
            t.past_budget += sum(
                1 for e in own if e.kind == Kind.ACTION_ADMITTED and e.tool and e.turn > max_turns
            )
    return t
