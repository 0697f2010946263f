"""The provider registry: one module per wire format, one table the factory, the HTTP
client and ``/provider`` read, and a provider name stored as given."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from fake_models import FakeModelServer
from test_agents_loop import Recorder

from actors.agents import ModelAgent, ModelFactory
from actors.agents.base import AgentError
from actors.agents.http import HttpProvider
from actors.agents.providers import (
    PROVIDERS,
    WireFormat,
    bearer_headers,
    default_servers,
    known_providers,
)
from actors.agents.wire import ModelRequest, Stopped, StreamEvent, TextDelta
from actors.session.rules.commands import StartTurn
from actors.spec import AgentSpec
from actors.testing import SessionKit
from projections import model_settings
from spine import Kind

# -- a tiny wire format, defined here and nowhere else ----------------------------------


def _tiny_body(req: ModelRequest) -> dict[str, Any]:
    return {"engine": req.model, "say": [m.text for m in req.messages], "stream": True}


class _TinyAccumulator:
    """``{"w": text}`` chunks are words; ``{"end": reason}`` ends the call."""

    def __init__(self) -> None:
        self.stopped = False

    def feed(self, chunk: Mapping[str, Any], /) -> list[StreamEvent]:
        if "w" in chunk:
            return [TextDelta(str(chunk["w"]))]
        if "end" in chunk:
            self.stopped = True
            return [Stopped(str(chunk["end"]))]
        return []

    def finish(self) -> list[StreamEvent]:
        return [] if self.stopped else [Stopped("end_turn")]


def _tiny_whole(body: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    return [{"w": body["said"]}, {"end": "end_turn"}] if "said" in body else None


TINY = WireFormat(
    name="tiny",
    default_base_url="http://127.0.0.1:9/v0",
    path="/speak",
    body=_tiny_body,
    headers=bearer_headers,
    accumulator=_TinyAccumulator,
    whole=_tiny_whole,
)


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> WireFormat:
    monkeypatch.setitem(PROVIDERS, TINY.name, TINY)
    return TINY


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    s = FakeModelServer()
    try:
        yield s
    finally:
        s.close()


def test_a_registered_format_is_spoken_by_the_factory_and_the_http_client(
    tiny: WireFormat, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One registry entry is all a new format needs: the factory builds it, the client
    posts its body with its headers to its path and reads its stream, and a whole JSON
    answer goes through its own reader."""
    monkeypatch.setenv("TINY_KEY", "t0k")
    spec = AgentSpec(provider="tiny", model="m1", base_url=server.url, api_key_env="TINY_KEY")
    server.queue(
        [("sse", [{"w": "Hello "}, {"w": "there."}, {"end": "end_turn"}])],
        [("status", 200, {}, '{"said": "Whole."}')],
    )
    factory = ModelFactory(tools=None, backoff=0.01, model_servers=default_servers([server.url]))
    agent = factory.build(spec, "s1")
    assert isinstance(agent, ModelAgent)
    r = Recorder()
    fin = r.run(agent, "hi")
    assert (fin.stop_reason, r.text()) == ("end_turn", "Hello there.")
    sent = server.requests[0]
    assert sent["path"] == "/v1/speak"
    assert sent["body"] == {"engine": "m1", "say": ["hi"], "stream": True}
    assert sent["headers"]["authorization"] == "Bearer t0k"
    again = Recorder()
    whole = again.run(factory.build(spec, "s1"), "once more")
    assert (whole.stop_reason, again.text()) == ("end_turn", "Whole.")


def test_a_registered_format_is_a_name_the_provider_command_takes(tiny: WireFormat) -> None:
    """/provider accepts a registered name and lists it among the known ones."""
    assert "tiny" in known_providers()
    kit = SessionKit(model_servers=["http://127.0.0.1:9/v0"])
    out = kit.send("/provider tiny http://127.0.0.1:9/v0")
    assert any("provider set to tiny" in text for *_rest, text in out.live), out.live
    assert kit.state.stored.metadata["ore.model.provider"] == "tiny"
    assert any("tiny" in text for *_rest, text in kit.send("/help").live)


def test_the_settings_keep_a_provider_name_no_module_provides() -> None:
    """Projections store and read the provider name as given; no list of names there."""
    assert model_settings({"ore.model.provider": "gemini"}).check().provider == "gemini"
    assert AgentSpec.from_metadata({"ore.model.provider": "gemini"}).provider == "gemini"


def test_an_unknown_provider_fails_the_turn_naming_it_and_the_known_ones() -> None:
    """The factory refuses a name no module provides with an error that lists the names."""
    with pytest.raises(AgentError) as err:
        ModelFactory().build(AgentSpec(provider="gemini", model="m"), "s1")
    assert "'gemini'" in str(err.value)
    assert "scripted, openai, responses, anthropic" in str(err.value)
    with pytest.raises(ValueError, match="unknown wire format 'gemini', known: openai"):
        HttpProvider("gemini", base_url=None, api_key=None)


def test_an_unknown_provider_fails_its_turn_and_the_session_serves_the_next() -> None:
    """A provider name no module provides is stored; the turn it runs ends with that
    error, and after /provider names a known one the next turn runs."""
    kit = SessionKit()
    kit.send("/set ore.model.provider gemini")
    assert kit.state.stored.metadata["ore.model.provider"] == "gemini"
    (start,) = [e for e in kit.send("hello").effects if isinstance(e, StartTurn)]
    with pytest.raises(AgentError) as err:
        ModelFactory().build(start.spec, start.input.session_id)
    out = kit.start_failed(str(err.value))
    (done,) = [e for e in out.events if e.kind == Kind.TURN_COMPLETED]
    assert done.stop_reason == "error" and "'gemini'" in done.error, done.error
    kit.send("/provider scripted")
    (nxt,) = [e for e in kit.send("hello again").effects if isinstance(e, StartTurn)]
    assert nxt.spec.provider == "scripted"
    assert isinstance(ModelFactory().build(nxt.spec, nxt.input.session_id), ModelAgent)
