"""The session's executor as tables: one decision carried out through recording ports."""

from __future__ import annotations

import typing
from typing import Any

import attrs
import pytest

from actors import messages as m
from actors.interceptors import Ingress, SlashCommands
from actors.session.rules import commands as c
from actors.session.rules.state import SessionState
from actors.session.shell.executor import EFFECTS, Executor, Ports, RecordingPorts
from actors.spec import AgentSpec, TurnInput
from spine import Kind, MemoryLog
from spine.seal import SigningKey

SID = "s1"


def _executor(ports: RecordingPorts | None = None) -> tuple[Executor, RecordingPorts]:
    log = MemoryLog()
    key = SigningKey.generate()
    p = ports or RecordingPorts(
        log=log, session_id=SID, interceptors=[SlashCommands()], key=lambda: key
    )
    p.log = log
    ex = Executor(log, p, c.Session(stored=SessionState(session_id=SID)))
    ex.run(c.Open(create=True))
    p.clear()
    return ex, p


def _receive(text: str, key: str, rid: str = "r1") -> c.Receive:
    return c.Receive(request_id=rid, ingress=Ingress(kind=Kind.USER_MESSAGE, key=key, text=text))


_TURN_INPUT = TurnInput(session_id=SID, turn=1, text="hi")

EFFECT_CASES: list[c.Effect] = [
    c.StartTurn(turn=1, spec=AgentSpec(), input=_TURN_INPUT),
    c.CancelTurn(turn=1),
    c.AnswerWorker(turn=1, action="a1", tool_use_id="t1", verdict="allow", call=1),
    c.CreateChild(turn=1, tool_use_id="t1", child="s1.c1"),
    c.CancelChildren(children=("s1.c1",)),
    c.EndSubscriptions(),
    c.StopSelf(reason="closed"),
]


def test_the_effects_table_covers_every_effect_the_decider_can_ask_for() -> None:
    """Each effect class of the decider's vocabulary has exactly one entry in the table."""
    assert set(EFFECTS) == set(typing.get_args(c.Effect))


@pytest.mark.parametrize("effect", EFFECT_CASES, ids=lambda e: type(e).__name__)
def test_each_effect_is_carried_out_by_its_port(effect: c.Effect) -> None:
    """A decision's effect reaches the port the table names for it, and nothing else."""
    ex, ports = _executor()
    ex.apply(c.Decision(state=ex.state, effects=(effect,)))
    assert ports.effects == [effect]
    assert ports.stops == ([effect.reason] if isinstance(effect, c.StopSelf) else [])


@attrs.define
class _Intercepting(RecordingPorts):
    """Records the log's last seq each time the interceptor port runs."""

    seen: list[tuple[str, int]] = attrs.field(factory=list)

    def intercept(self, effect: c.RunInterceptors, state: c.Session) -> c.Command | None:
        self.seen.append((effect.request_id, self.log.last_seq(SID)))
        return super().intercept(effect, state)


def test_commands_effects_yield_are_decided_in_order_after_the_decision_is_applied() -> None:
    """Two interceptor runs in one decision both run before either's command is decided,
    and their commands are then decided in the order the effects came."""
    log = MemoryLog()
    ex, ports = _executor(_Intercepting(log=log, session_id=SID, interceptors=[SlashCommands()]))
    before = ex.log.last_seq(SID)
    two = (
        c.RunInterceptors(
            request_id="a", ingress=Ingress(kind=Kind.USER_MESSAGE, key="ka", text="one")
        ),
        c.RunInterceptors(
            request_id="b", ingress=Ingress(kind=Kind.USER_MESSAGE, key="kb", text="two")
        ),
    )
    ex.apply(c.Decision(state=ex.state, effects=two))
    assert ports.seen == [("a", before), ("b", before)]
    texts = [r.event().text for r in ex.log.read(SID, before, None) if r.kind == Kind.USER_MESSAGE]
    assert texts == ["one", "two"]
    acks = [r for r in ports.replies if isinstance(r, m.Ack)]
    assert [a.request_id for a in acks] == ["a", "b"]


def test_a_key_stored_before_is_answered_as_then_and_changes_nothing() -> None:
    """The log finds the key stored: the ack names the first delivery's seq, marked
    duplicate, and nothing follows the interceptor run (no event, live item, turn)."""
    ex, ports = _executor()
    ex.run(_receive("hello", "k1"))
    first = next(r for r in ports.replies if isinstance(r, m.Ack))
    state, last = ex.state, ex.log.last_seq(SID)
    ports.clear()
    ex.run(_receive("hello", "k1", rid="r2"))
    again: Any = ports.last_reply
    assert isinstance(again, m.Ack) and again.duplicate and again.seq == first.seq
    assert ex.log.last_seq(SID) == last and ex.state.stored == state.stored
    assert [type(e) for e in ports.effects] == [c.RunInterceptors]
    assert ports.live == [] and ports.records == []


def test_the_actor_and_the_kit_carry_effects_out_through_the_one_table_only() -> None:
    """Neither shell keeps an effect dispatch of its own: both lend ports to the executor."""
    from actors.session.shell.execution import IncarnationPorts
    from actors.session.shell.incarnation import Incarnation
    from actors.session.shell.kit import SessionKit

    assert not hasattr(Incarnation, "_effect") and not hasattr(SessionKit, "_effect")
    wanted = {n for n in vars(Ports) if not n.startswith("_")}
    assert wanted <= set(dir(IncarnationPorts)) and wanted <= set(dir(RecordingPorts))
