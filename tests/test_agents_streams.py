"""Golden streams: the chunk sequences real servers send, and the events each must give.

Each golden runs twice: through the pure accumulator (objects fed one by one) and through
the HTTP provider against the fake server on loopback (real HTTP, real SSE framing).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from fake_models import FakeModelServer, chunk, tool_delta, usage_chunk

from actors.agents.accumulate import (
    AnthropicAccumulator,
    ChatAccumulator,
    ProviderStreamError,
    ResponsesAccumulator,
    SseDecoder,
)
from actors.agents.http import HttpProvider, ProviderError
from actors.agents.wire import (
    Message,
    ModelRequest,
    ReasoningDelta,
    Stopped,
    TextDelta,
    ToolCall,
    ToolCallDone,
    UsageSeen,
)
from spine import Usage

CALC = "calculator"


def _usage(raw: dict[str, Any], **kw: int) -> UsageSeen:
    return UsageSeen(Usage(**kw), raw)


_U1 = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}

GOLDENS: dict[str, tuple[str, list[Any], list[Any]]] = {
    # The standard shape: id, name and type once, arguments in pieces, usage at the end
    # in a chunk with no choices.
    "chat standard": (
        "openai",
        [
            chunk(content="Hel"),
            chunk(content="lo"),
            chunk(tool_calls=[tool_delta(0, "call_1", CALC, "")]),
            chunk(tool_calls=[tool_delta(0, None, None, '{"expres')]),
            chunk(tool_calls=[tool_delta(0, None, None, 'sion": "1+2"}')]),
            chunk(finish="tool_calls"),
            usage_chunk(10, 5),
        ],
        [
            TextDelta("Hel"),
            TextDelta("lo"),
            _usage(_U1, input_tokens=10, output_tokens=5),
            ToolCallDone(ToolCall(id="call_1", name=CALC, arguments='{"expression": "1+2"}')),
            Stopped("tool_use"),
        ],
    ),
    # Older llama.cpp: id, name and type on every delta; they must not be concatenated.
    "chat id and name repeated": (
        "openai",
        [
            chunk(tool_calls=[tool_delta(0, "call_9", CALC, '{"expression"')]),
            chunk(tool_calls=[tool_delta(0, "call_9", CALC, ': "2"}')]),
            chunk(finish="tool_calls"),
        ],
        [
            ToolCallDone(ToolCall(id="call_9", name=CALC, arguments='{"expression": "2"}')),
            Stopped("tool_use"),
        ],
    ),
    # Ollama: index 0 for every call; a different id opens a new call.
    "chat two calls at index 0": (
        "openai",
        [
            chunk(tool_calls=[tool_delta(0, "call_a", "clock", "{}")]),
            chunk(tool_calls=[tool_delta(0, "call_b", CALC, '{"expression": "3"}')]),
            chunk(finish="stop"),
        ],
        [
            ToolCallDone(ToolCall(id="call_a", name="clock", arguments="{}")),
            ToolCallDone(ToolCall(id="call_b", name=CALC, arguments='{"expression": "3"}')),
            Stopped("tool_use"),
        ],
    ),
    # No index at all: the same call while the id matches or is absent.
    "chat missing index": (
        "openai",
        [
            chunk(tool_calls=[tool_delta(None, "call_x", CALC, '{"expression": ')]),
            chunk(tool_calls=[tool_delta(None, None, None, '"4"}')]),
            chunk(tool_calls=[tool_delta(None, "call_y", "clock", "{}")]),
            chunk(finish="tool_calls"),
        ],
        [
            ToolCallDone(ToolCall(id="call_x", name=CALC, arguments='{"expression": "4"}')),
            ToolCallDone(ToolCall(id="call_y", name="clock", arguments="{}")),
            Stopped("tool_use"),
        ],
    ),
    # llama.cpp's progress and timings chunks, a chunk without choices, both reasoning
    # spellings, and the last usage winning.
    "chat reasoning and odd chunks": (
        "openai",
        [
            {"object": "chat.completion.chunk", "prompt_progress": {"total": 9, "processed": 4}},
            chunk(reasoning="Let me ", reasoning_key="reasoning"),
            chunk(reasoning="think.", reasoning_key="reasoning_content"),
            {"object": "chat.completion.chunk", "choices": []},
            chunk(content="Four."),
            usage_chunk(3, 1),
            chunk(finish="stop"),
            {"object": "chat.completion.chunk", "choices": [], "timings": {"predicted_ms": 5}},
            usage_chunk(9, 4, cached=6),
        ],
        [
            ReasoningDelta("Let me "),
            ReasoningDelta("think."),
            TextDelta("Four."),
            _usage(
                {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
                input_tokens=3,
                output_tokens=1,
            ),
            _usage(
                {
                    "prompt_tokens": 9,
                    "completion_tokens": 4,
                    "total_tokens": 13,
                    "prompt_tokens_details": {"cached_tokens": 6},
                },
                input_tokens=9,
                output_tokens=4,
                cache_read_tokens=6,
            ),
            Stopped("end_turn"),
        ],
    ),
    # Arguments that never become JSON: a call carrying the raw text and an error.
    "chat unparseable arguments": (
        "openai",
        [
            chunk(tool_calls=[tool_delta(0, "call_z", CALC, '{"expression": 1+')]),
            chunk(finish="length"),
        ],
        [
            ToolCallDone(
                ToolCall(
                    id="call_z",
                    name=CALC,
                    arguments=json.dumps('{"expression": 1+'),
                    error="*",
                )
            ),
            Stopped("max_tokens"),
        ],
    ),
    # Anthropic: input_json_delta fragments, cumulative message_delta usage, cache
    # tokens added back into input.
    "anthropic tool use": (
        "anthropic",
        [
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "usage": {
                        "input_tokens": 10,
                        "cache_read_input_tokens": 100,
                        "cache_creation_input_tokens": 5,
                        "output_tokens": 1,
                    },
                },
            },
            {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking"}},
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "thinking_delta", "thinking": "hmm"},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "signature_delta", "signature": "sig"},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "text", "text": ""},
            },
            {"type": "ping"},
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "text_delta", "text": "Let me "},
            },
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "text_delta", "text": "compute."},
            },
            {"type": "content_block_stop", "index": 1},
            {
                "type": "content_block_start",
                "index": 2,
                "content_block": {"type": "tool_use", "id": "toolu_1", "name": CALC, "input": {}},
            },
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "input_json_delta", "partial_json": '{"expr'},
            },
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "input_json_delta", "partial_json": 'ession": "2*3"}'},
            },
            {"type": "content_block_stop", "index": 2},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": 12},
            },
            {
                "type": "message_delta",
                "delta": {},
                "usage": {"output_tokens": 20},
            },
            {"type": "message_stop"},
        ],
        [
            _usage(
                {
                    "input_tokens": 10,
                    "cache_read_input_tokens": 100,
                    "cache_creation_input_tokens": 5,
                    "output_tokens": 1,
                },
                input_tokens=115,
                output_tokens=1,
                cache_read_tokens=100,
                cache_write_tokens=5,
            ),
            ReasoningDelta("hmm"),
            TextDelta("Let me "),
            TextDelta("compute."),
            _usage(
                {
                    "input_tokens": 10,
                    "cache_read_input_tokens": 100,
                    "cache_creation_input_tokens": 5,
                    "output_tokens": 12,
                },
                input_tokens=115,
                output_tokens=12,
                cache_read_tokens=100,
                cache_write_tokens=5,
            ),
            _usage(
                {
                    "input_tokens": 10,
                    "cache_read_input_tokens": 100,
                    "cache_creation_input_tokens": 5,
                    "output_tokens": 20,
                },
                input_tokens=115,
                output_tokens=20,
                cache_read_tokens=100,
                cache_write_tokens=5,
            ),
            ToolCallDone(ToolCall(id="toolu_1", name=CALC, arguments='{"expression": "2*3"}')),
            Stopped("tool_use"),
        ],
    ),
    # Responses: function_call_arguments.delta pieces, usage with cached and reasoning.
    "responses function call": (
        "responses",
        [
            {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}},
            {"type": "response.reasoning_summary_text.delta", "delta": "plan"},
            {"type": "response.output_text.delta", "item_id": "m1", "delta": "On "},
            {"type": "response.output_text.delta", "item_id": "m1", "delta": "it."},
            {
                "type": "response.output_item.added",
                "output_index": 1,
                "item": {
                    "type": "function_call",
                    "id": "fc_1",
                    "call_id": "call_abc",
                    "name": CALC,
                    "arguments": "",
                },
            },
            {
                "type": "response.function_call_arguments.delta",
                "item_id": "fc_1",
                "output_index": 1,
                "delta": '{"expression":',
            },
            {
                "type": "response.function_call_arguments.delta",
                "item_id": "fc_1",
                "output_index": 1,
                "delta": ' "5"}',
            },
            {
                "type": "response.completed",
                "response": {
                    "id": "resp_1",
                    "status": "completed",
                    "usage": {
                        "input_tokens": 30,
                        "input_tokens_details": {"cached_tokens": 10},
                        "output_tokens": 7,
                        "output_tokens_details": {"reasoning_tokens": 3},
                    },
                },
            },
        ],
        [
            ReasoningDelta("plan"),
            TextDelta("On "),
            TextDelta("it."),
            _usage(
                {
                    "input_tokens": 30,
                    "input_tokens_details": {"cached_tokens": 10},
                    "output_tokens": 7,
                    "output_tokens_details": {"reasoning_tokens": 3},
                },
                input_tokens=30,
                output_tokens=7,
                cache_read_tokens=10,
                reasoning_tokens=3,
            ),
            ToolCallDone(ToolCall(id="call_abc", name=CALC, arguments='{"expression": "5"}')),
            Stopped("tool_use"),
        ],
    ),
}

_ACC = {
    "openai": ChatAccumulator,
    "anthropic": AnthropicAccumulator,
    "responses": ResponsesAccumulator,
}


def _same(got: list[Any], want: list[Any]) -> None:
    # An expected error of "*" means "some error": its wording is checked elsewhere.
    assert len(got) == len(want), got
    for g, w in zip(got, want, strict=True):
        if isinstance(w, ToolCallDone) and w.call.error == "*":
            assert isinstance(g, ToolCallDone) and g.call.error
            assert (g.call.id, g.call.name, g.call.arguments) == (
                w.call.id,
                w.call.name,
                w.call.arguments,
            )
        else:
            assert g == w


@pytest.mark.parametrize("name", sorted(GOLDENS))
def test_each_golden_stream_gives_its_events_through_the_accumulator(name: str) -> None:
    """Fed chunk by chunk, the accumulator yields exactly the golden's events."""
    fmt, chunks, want = GOLDENS[name]
    acc = _ACC[fmt]()
    got: list[Any] = []
    for c in chunks:
        got.extend(acc.feed(c))
    got.extend(acc.finish())
    _same(got, want)


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    s = FakeModelServer()
    try:
        yield s
    finally:
        s.close()


def _request(text: str = "hi") -> ModelRequest:
    return ModelRequest(model="fake", messages=(Message(role="user", text=text),))


def _collect(provider: HttpProvider, req: ModelRequest | None = None) -> list[Any]:
    async def run() -> list[Any]:
        return [ev async for ev in provider.stream(req or _request())]

    return asyncio.run(asyncio.wait_for(run(), 20))


def _provider(server: FakeModelServer, fmt: str = "openai", **kw: Any) -> HttpProvider:
    kw.setdefault("timeout", 10.0)
    kw.setdefault("backoff", 0.01)
    return HttpProvider(fmt, base_url=server.url, api_key="k-test", **kw)


@pytest.mark.parametrize("name", sorted(GOLDENS))
def test_each_golden_stream_gives_its_events_over_real_http(
    name: str, server: FakeModelServer
) -> None:
    """Served as SSE by the fake server, each golden gives the same events end to end."""
    fmt, chunks, want = GOLDENS[name]
    steps: list[Any] = [("sse", chunks)]
    if fmt == "openai":
        steps.append(("done",))
    server.queue(steps)
    _same(_collect(_provider(server, fmt)), want)
    req = server.requests[0]
    assert (
        req["path"]
        == {
            "openai": "/v1/chat/completions",
            "anthropic": "/v1/messages",
            "responses": "/v1/responses",
        }[fmt]
    )
    assert req["body"]["stream"] is True
    if fmt == "anthropic":
        assert req["headers"]["x-api-key"] == "k-test"
        assert req["headers"]["anthropic-version"]
    else:
        assert req["headers"]["authorization"] == "Bearer k-test"


def test_a_429_is_retried_after_its_retry_after_and_then_succeeds(
    server: FakeModelServer,
) -> None:
    """A 429 before any output is retried (honouring Retry-After); the second try streams."""
    server.queue(
        [("status", 429, {"retry-after": "0"}, '{"error": "slow down"}')],
        [("sse", [chunk(content="ok"), chunk(finish="stop")]), ("done",)],
    )
    got = _collect(_provider(server))
    assert got == [TextDelta("ok"), Stopped("end_turn")]
    assert len(server.requests) == 2


def test_a_500_before_the_first_byte_is_retried(server: FakeModelServer) -> None:
    """A 5xx answer (nothing streamed yet) is retried with backoff."""
    server.queue(
        [("status", 503, {}, "overloaded")],
        [("sse", [chunk(content="fine")]), ("done",)],
    )
    assert _collect(_provider(server))[0] == TextDelta("fine")
    assert len(server.requests) == 2


def test_a_permanent_error_names_the_status_and_the_body(server: FakeModelServer) -> None:
    """A 4xx that retrying cannot fix fails at once with the status and a body excerpt."""
    server.queue([("status", 400, {}, '{"error": {"message": "unknown model fake"}}')])
    with pytest.raises(ProviderError, match=r"answered 400: .*unknown model fake"):
        _collect(_provider(server))
    assert len(server.requests) == 1


def test_retries_give_up_after_their_budget(server: FakeModelServer) -> None:
    """Four 500s with three retries: the error names the last status."""
    server.queue(*[[("status", 500, {}, "boom")] for _ in range(4)])
    with pytest.raises(ProviderError, match="answered 500: boom"):
        _collect(_provider(server, retries=3))
    assert len(server.requests) == 4


def test_an_error_after_output_started_is_never_retried(server: FakeModelServer) -> None:
    """A server error mid-stream ends the call with its message; no second request."""
    server.queue(
        [
            ("sse", [chunk(content="partial "), {"error": {"message": "boom", "code": 500}}]),
        ]
    )
    got: list[Any] = []

    async def run() -> None:
        async for ev in _provider(server).stream(_request()):
            got.append(ev)

    with pytest.raises(ProviderError, match="boom"):
        asyncio.run(asyncio.wait_for(run(), 20))
    assert got == [TextDelta("partial ")]
    assert len(server.requests) == 1


def test_a_stream_cut_off_mid_way_is_an_error_not_a_silent_end(
    server: FakeModelServer,
) -> None:
    """A stream that stops without its end marker still settles what it got."""
    server.queue([("sse", [chunk(content="half")])])  # closes with no [DONE]
    got = _collect(_provider(server))
    assert got[0] == TextDelta("half") and isinstance(got[-1], Stopped)


def test_a_server_that_stalls_after_one_chunk_times_out_with_a_clear_error(
    server: FakeModelServer,
) -> None:
    """Silence longer than the idle timeout ends the call naming ore.model.timeout."""
    server.queue([("sse", [chunk(content="first")]), ("stall",)])
    got: list[Any] = []

    async def run() -> None:
        async for ev in _provider(server, timeout=0.3).stream(_request()):
            got.append(ev)

    with pytest.raises(ProviderError, match=r"sent nothing for 0.3 s \(ore.model.timeout\)"):
        asyncio.run(asyncio.wait_for(run(), 20))
    assert got == [TextDelta("first")]


def test_a_stalled_call_is_cancelled_by_cancelling_its_task(server: FakeModelServer) -> None:
    """Cancelling the task ends a call whose server sends nothing at all."""
    server.queue([("stall",)])

    async def run() -> None:
        async def consume() -> None:
            async for _ in _provider(server).stream(_request()):
                pass

        task = asyncio.ensure_future(consume())
        while not server.requests:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(run(), 20))


def test_an_unreachable_server_fails_after_retries_naming_the_url() -> None:
    """Nothing listens on the port: connection errors are retried, then named."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    p = HttpProvider("openai", base_url=f"http://127.0.0.1:{port}/v1", api_key=None, backoff=0.01)
    with pytest.raises(ProviderError, match=f"cannot connect to http://127.0.0.1:{port}/v1"):
        _collect(p)


def test_content_and_reasoning_in_one_delta_are_both_read() -> None:
    """A delta carrying text and reasoning together (and a role) yields both."""
    acc = ChatAccumulator()
    c = chunk(content="A", reasoning="because")
    c["choices"][0]["delta"]["role"] = "assistant"
    assert acc.feed(c) == [TextDelta("A"), ReasoningDelta("because")]


def test_an_error_event_in_an_anthropic_stream_is_raised_with_its_message() -> None:
    """Anthropic's in-stream error event (overloaded) is an error, not an empty answer."""
    acc = AnthropicAccumulator()
    with pytest.raises(ProviderStreamError, match="overloaded_error Overloaded"):
        acc.feed({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})


def test_a_failed_response_is_raised_with_its_message() -> None:
    """A Responses stream that ends in response.failed raises with the server's message."""
    acc = ResponsesAccumulator()
    with pytest.raises(ProviderStreamError, match="quota"):
        acc.feed({"type": "response.failed", "response": {"error": {"message": "quota"}}})


@pytest.mark.parametrize(
    ("pieces", "want"),
    [
        ([b"data: a\n\n"], [("message", "a")]),
        ([b"event: x\ndata: 1\ndata: 2\n\n"], [("x", "1\n2")]),
        ([b"da", b"ta: sp", b"lit\n", b"\n"], [("message", "split")]),
        ([b": heartbeat\n\ndata: b\r\n\r\n"], [("message", "b")]),
        ([b"data: c\r", b"\n\r\n"], [("message", "c")]),
        ([b"data:nospace\n\n"], [("message", "nospace")]),
    ],
)
def test_the_sse_decoder_handles_framing_split_anywhere(
    pieces: list[bytes], want: list[tuple[str, str]]
) -> None:
    """Events split across reads, CRLF endings, comments and multi-line data decode."""
    d = SseDecoder()
    got: list[tuple[str, str]] = []
    for p in pieces:
        got.extend(d.feed(p))
    got.extend(d.close())
    assert got == want
