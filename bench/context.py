"""Context benchmark: a scripted 10,000-turn session with a 200 KB tool result every tenth
turn, its window 8k tokens, folded and viewed as the session does before each model call.

Per turn: the decider's part (`context_of`, from the folded state) and the agent's
(`model_view`, the estimate, whether compaction is due); when it is, a summary stands in
for the span `plan` names, stored as the ``context.compacted`` event the agent would
emit. Reports the pre-call overhead of turns with no compaction due (target: at most
5 ms at p99), the largest request as a share of the window (target: under 1), and tool
results without their call or calls without their result in any request (target: 0).

Run ``python bench/context.py`` (``--turns N`` for a shorter run). No processes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import orjson  # noqa: E402

from actors.agents.context import chars_of, due, estimate, model_view, plan  # noqa: E402
from actors.session.rules.state import SessionState, evolve  # noqa: E402
from actors.session.rules.views import context_of, history_before  # noqa: E402
from actors.spec import AgentSpec, TurnInput  # noqa: E402
from spine import Event, Kind  # noqa: E402

WINDOW = 8192
BIG = "r" * 200_000
META = {
    "ore.model.provider": "openai",
    "ore.model.base_url": "http://127.0.0.1:9/v1",
    "ore.model.name": "bench",
    "ore.model.context_window": str(WINDOW),
}


def _orphans(msgs: tuple) -> int:  # type: ignore[type-arg]
    asked = {c.id for m in msgs for c in m.tool_calls}
    answered = {m.tool_use_id for m in msgs if m.role == "tool"}
    return len(asked ^ answered)


def run(turns: int) -> dict[str, float]:
    st = SessionState(session_id="bench")
    seq = 0

    def add(ev: Event) -> None:
        nonlocal st, seq
        seq += 1
        st = evolve(st, ev, seq)

    add(Event(kind=Kind.PROPERTIES, properties=META))
    spec = AgentSpec.from_metadata(st.metadata)
    quiet: list[tuple[float, float]] = []
    worst = 0.0
    orphans = compactions = 0
    for n in range(1, turns + 1):
        add(Event(kind=Kind.USER_MESSAGE, text=f"message {n} " + "words " * 20))
        t0, c0 = time.perf_counter(), time.thread_time()
        ti = TurnInput(
            session_id="bench",
            turn=n,
            text=st.pending[0][1],
            history=history_before(st),
            spec=spec,
            context=context_of(st, spec),
        )
        system, msgs, _ = model_view(ti, None)
        is_due = due(ti.context, chars_of(system, msgs))  # type: ignore[arg-type]
        spent = (time.perf_counter() - t0, time.thread_time() - c0)
        if is_due:
            p = plan(ti, ti.context.keep_recent) or plan(ti, 0)  # type: ignore[union-attr]
            assert p is not None
            add(
                Event(
                    kind=Kind.CONTEXT_COMPACTED,
                    text=f"summary up to {p.last}",
                    extra={"fromSeq": p.first, "toSeq": p.last},
                )
            )
            compactions += 1
            ti = TurnInput(
                session_id="bench",
                turn=n,
                text=ti.text,
                history=history_before(st),
                spec=spec,
                context=context_of(st, spec),
            )
            system, msgs, _ = model_view(ti, None)
        else:
            quiet.append(spent)
        worst = max(worst, estimate(ti.context, chars_of(system, msgs)) / WINDOW)  # type: ignore[arg-type]
        orphans += _orphans(msgs)
        add(Event(kind=Kind.TURN_STARTED, turn=n))
        if n % 10 == 0:
            call = orjson.dumps({"q": n}).decode()
            add(Event(kind=Kind.TOOL_CALL, tool="fetch", tool_use_id=f"c{n}", input=call))
            add(Event(kind=Kind.TOOL_RESULT, tool="fetch", tool_use_id=f"c{n}", result=BIG))
        add(Event(kind=Kind.ASSISTANT, text=f"answer {n}"))
        add(Event(kind=Kind.TURN_COMPLETED, turn=n, stop_reason="end_turn"))
    wall = sorted(w for w, _ in quiet)
    cpu = sorted(c for _, c in quiet)
    return {
        "turns": turns,
        "events": seq,
        "compactions": compactions,
        "pre-call p50 ms": statistics.median(wall) * 1e3,
        "pre-call p99 ms": wall[int(len(wall) * 0.99)] * 1e3,
        # CPU time of this thread: what the work costs, without the waits of a shared
        # machine's scheduler (which the wall clock's p99 mostly measures there).
        "pre-call p99 cpu ms": cpu[int(len(cpu) * 0.99)] * 1e3,
        "largest request / window": worst,
        "orphaned calls or results": orphans,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=10_000)
    for k, v in run(ap.parse_args().turns).items():
        print(f"{k:28} {v:.3f}" if isinstance(v, float) else f"{k:28} {v}")


if __name__ == "__main__":
    main()
