"""The one rule for cut-off output: a model call's text that did not reach its end rides
on the event closing the turn, never as assistant.message, with the usage seen so far."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fake_models import FakeModelServer

from actors.agents import ModelAgent
from actors.agents.http import HttpProvider
from actors.session.rules.commands import Finished, Govern, Progress
from actors.session.shell.worker import TurnWorker
from actors.spec import AgentSpec, TurnInput
from actors.testing import SessionKit
from spine import Kind, Usage

pytestmark = pytest.mark.timeout(60)

_SEEN = Usage(input_tokens=7, output_tokens=5)


def _interrupted(kit: SessionKit) -> Any:
    return kit.interrupt()


def _failed(kit: SessionKit) -> Any:
    return kit.finish("error", text=" and th", error="the stream broke off", usage=_SEEN)


def _closed(kit: SessionKit) -> Any:
    return kit.close()


@pytest.mark.parametrize(
    ("cut", "closing"),
    [
        (_interrupted, Kind.TURN_CANCELLED),
        (_closed, Kind.TURN_CANCELLED),
        (_failed, Kind.TURN_COMPLETED),
    ],
    ids=["interrupt", "close", "stream failed"],
)
def test_partial_text_rides_on_the_closing_event_with_the_usage_seen(
    cut: Callable[[SessionKit], Any], closing: str
) -> None:
    """Cut off or failed, a turn's partial text is on its closing event (not an
    assistant.message), its usage is what was seen, and the next turn's history has it."""
    kit = SessionKit()
    kit.send("tell me")
    kit.progress(text="Once upon a time", usage=_SEEN)
    out = cut(kit)
    want = "Once upon a time" + (" and th" if cut is _failed else "")
    assert not [e for e in out.events if e.kind == Kind.ASSISTANT]
    (end,) = [e for e in out.events if e.kind == closing]
    assert end.text == want and end.usage == _SEEN
    assert kit.state.stored.history[-1][:2] == ("assistant", want)


def test_a_model_call_that_ended_still_stores_its_message() -> None:
    """An answer that ended is an assistant.message, and turn.completed carries no text."""
    kit = SessionKit()
    kit.send("hi")
    out = kit.finish("end_turn", text="hello", usage=_SEEN)
    assert [e.text for e in out.events if e.kind == Kind.ASSISTANT] == ["hello"]
    (done,) = [e for e in out.events if e.kind == Kind.TURN_COMPLETED]
    assert done.text == "" and done.usage == _SEEN


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    s = FakeModelServer()
    try:
        yield s
    finally:
        s.close()


def test_an_anthropic_turn_cancelled_after_usage_keeps_the_output_tokens(
    server: FakeModelServer,
) -> None:
    """A real Messages stream reports usage mid-way and goes silent; however long text is
    batched, the usage reaches the session at once, so the interrupt's turn.cancelled keeps
    the output tokens the server reported."""
    server.queue(
        [
            (
                "sse",
                [
                    {"type": "message_start",
                     "message": {"usage": {"input_tokens": 7, "output_tokens": 1}}},
                    {"type": "content_block_start", "index": 0,
                     "content_block": {"type": "text", "text": ""}},
                    {"type": "content_block_delta", "index": 0,
                     "delta": {"type": "text_delta", "text": "Once upon"}},
                    {"type": "content_block_delta", "index": 0,
                     "delta": {"type": "text_delta", "text": " a time"}},
                    {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 5}},
                ],
            ),
            ("stall",),
        ]
    )  # fmt: skip
    kit = SessionKit()
    kit.send("tell me")
    got = threading.Condition()
    handed: list[Any] = []

    def send(msg: Any) -> None:
        assert not isinstance(msg, Govern)
        with got:
            handed.append(msg)
            got.notify_all()

    # Text is batched for ten seconds: only what is handed back at once can arrive.
    worker = TurnWorker(send, 1, 10.0)
    provider = HttpProvider("anthropic", base_url=server.url, api_key=None, timeout=10.0)
    agent = ModelAgent(AgentSpec(model="fake"), provider, flush_interval=10.0)
    worker.start(agent, TurnInput(session_id="s", turn=1, text="tell me", model_call=1))

    def reported() -> bool:
        return any(
            isinstance(m, Progress) and m.usage is not None and m.usage.output_tokens == 5
            for m in handed
        )

    with got:
        assert got.wait_for(reported, 5), handed
        for m in list(handed):
            assert isinstance(m, Progress)
            kit.progress(text=m.text, events=m.events, usage=m.usage)
    out = kit.interrupt()
    worker.cancel()
    assert worker.done.wait(5)
    assert isinstance(handed[-1], Finished)
    (cancelled,) = [e for e in out.events if e.kind == Kind.TURN_CANCELLED]
    assert cancelled.usage == Usage(input_tokens=7, output_tokens=5)
    assert cancelled.text.startswith("Once upon")
