"""What goes over the wire to real model servers: the full request of a second turn in
each format, connections that close before a byte, answers that are not a stream, and
connections kept for the next turn."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from fake_models import FakeModelServer, chunk

from actors.agents.formats import conversation
from actors.agents.http import HttpProvider
from actors.agents.wire import ModelRequest, ToolSpec

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    s = FakeModelServer()
    try:
        yield s
    finally:
        s.close()


def _provider(url: str, fmt: str = "openai", **kw: Any) -> HttpProvider:
    kw.setdefault("timeout", 10.0)
    kw.setdefault("backoff", 0.01)
    return HttpProvider(fmt, base_url=url, api_key="k-test", **kw)


def _collect(provider: HttpProvider, req: ModelRequest) -> list[Any]:
    async def run() -> list[Any]:
        return [ev async for ev in provider.stream(req)]

    return asyncio.run(asyncio.wait_for(run(), 20))


# -- the second turn's request, whole, in each format ------------------------------------

_ARGS = '{"expression": "2+3"}'
#: The session's history after a first turn that called a tool, as the session hands it.
SECOND_TURN = (
    ("user", "what is 2+3?"),
    ("assistant", "Let me compute."),
    ("tool.call", json.dumps({"id": "c1", "name": "calculator", "input": _ARGS})),
    ("tool.result", json.dumps({"id": "c1", "name": "calculator", "result": "5"})),
    ("assistant", "It is 5."),
)
_SCHEMA = {"type": "object", "properties": {"expression": {"type": "string"}}}


def _second_turn() -> ModelRequest:
    return ModelRequest(
        model="fake",
        messages=conversation(SECOND_TURN, "and times 4?"),
        tools=(ToolSpec(name="calculator", description="arithmetic", parameters=_SCHEMA),),
        system="be brief",
        max_output_tokens=100,
    )


GOLDEN_REQUESTS: dict[str, tuple[list[Any], dict[str, Any]]] = {
    "openai": (
        [("sse", [chunk(content="20"), chunk(finish="stop")]), ("done",)],
        {
            "model": "fake",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "what is 2+3?"},
                {
                    "role": "assistant",
                    "content": "Let me compute.",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "calculator", "arguments": _ARGS},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "5"},
                {"role": "assistant", "content": "It is 5."},
                {"role": "user", "content": "and times 4?"},
            ],
            "stream": True,
            "stream_options": {"include_usage": True},
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "calculator",
                        "description": "arithmetic",
                        "parameters": _SCHEMA,
                    },
                }
            ],
            "max_tokens": 100,
        },
    ),
    "responses": (
        [("sse", [{"type": "response.output_text.delta", "delta": "20"}])],
        {
            "model": "fake",
            "input": [
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "what is 2+3?"}],
                },
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "Let me compute."}],
                },
                {
                    "type": "function_call",
                    "call_id": "c1",
                    "name": "calculator",
                    "arguments": _ARGS,
                },
                {"type": "function_call_output", "call_id": "c1", "output": "5"},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "It is 5."}],
                },
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "and times 4?"}],
                },
            ],
            "stream": True,
            "store": False,
            "instructions": "be brief",
            "tools": [
                {
                    "type": "function",
                    "name": "calculator",
                    "description": "arithmetic",
                    "parameters": _SCHEMA,
                }
            ],
            "max_output_tokens": 100,
        },
    ),
    "anthropic": (
        [
            (
                "sse",
                [
                    {
                        "type": "content_block_start",
                        "index": 0,
                        "content_block": {"type": "text", "text": "20"},
                    },
                    {"type": "message_stop"},
                ],
            )
        ],
        {
            "model": "fake",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "what is 2+3?"}]},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Let me compute."},
                        {
                            "type": "tool_use",
                            "id": "c1",
                            "name": "calculator",
                            "input": {"expression": "2+3"},
                        },
                    ],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "5"}],
                },
                {"role": "assistant", "content": [{"type": "text", "text": "It is 5."}]},
                {"role": "user", "content": [{"type": "text", "text": "and times 4?"}]},
            ],
            "stream": True,
            "system": "be brief",
            "tools": [{"name": "calculator", "description": "arithmetic", "input_schema": _SCHEMA}],
            "max_tokens": 100,
        },
    ),
}


@pytest.mark.parametrize("fmt", sorted(GOLDEN_REQUESTS))
def test_a_second_turn_request_is_sent_whole_in_each_wire_format(
    fmt: str, server: FakeModelServer
) -> None:
    """The body a server gets for a turn after one that called a tool is exactly the
    documented shape of its format: every Responses input item carries its type."""
    answer, want = GOLDEN_REQUESTS[fmt]
    server.queue(answer)
    _collect(_provider(server.url, fmt), _second_turn())
    got = server.requests[0]["body"]
    assert got == want
    if fmt == "responses":
        assert all("type" in item for item in got["input"])


# -- a connection closed before any byte -------------------------------------------------


class ClosingProxy:
    """A TCP proxy on loopback that closes its first ``closes`` connections as soon as it
    accepts them (a proxy whose server is down, a kept connection the server dropped) and
    relays the later ones to ``target`` (None: it closes every one)."""

    def __init__(self, closes: int, target: int | None = None) -> None:
        import socket
        import threading

        self.closes = closes
        self.target = target
        self.accepted = 0
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"
        self._threads: list[threading.Thread] = []
        self._open: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        import socket
        import threading

        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.accepted += 1
            if self.target is None or self.accepted <= self.closes:
                conn.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self._open += [conn, upstream]
            for a, b in ((conn, upstream), (upstream, conn)):
                t = threading.Thread(target=self._pipe, args=(a, b), daemon=True)
                t.start()
                self._threads.append(t)

    @staticmethod
    def _pipe(src: Any, dst: Any) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(1)
            except OSError:
                pass

    def close(self) -> None:
        import socket

        try:
            # Wake the accept loop: closing a listening socket does not interrupt accept().
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        for s in self._open:
            s.close()
        self._thread.join(5)
        for t in self._threads:
            t.join(5)


def _hi() -> ModelRequest:
    from actors.agents.wire import Message

    return ModelRequest(model="fake", messages=(Message(role="user", text="hi"),))


def test_a_connection_closed_before_any_byte_is_retried_then_named() -> None:
    """A server that accepts and closes at once is retried like a refused connection;
    the final error says so and names the cause, and the call's fault is transient."""
    from actors.agents.http import ProviderError
    from actors.agents.model_call import _fault_of

    proxy = ClosingProxy(closes=10**6)
    try:
        with pytest.raises(ProviderError) as err:
            _collect(_provider(proxy.url, retries=2), _hi())
        assert proxy.accepted == 3
    finally:
        proxy.close()
    text = str(err.value)
    assert "closed the connection before answering, 3 times" in text, text
    assert "ReadError" in text and "broke off" not in text
    assert _fault_of(err.value) == "transient"


def test_a_call_succeeds_after_connections_closed_before_any_byte(
    server: FakeModelServer,
) -> None:
    """Two connections closed at once, then a server that answers: the turn streams."""
    from actors.agents.wire import Stopped, TextDelta

    server.queue([("sse", [chunk(content="hello"), chunk(finish="stop")]), ("done",)])
    proxy = ClosingProxy(closes=2, target=server.port)
    try:
        got = _collect(_provider(proxy.url, retries=3), _hi())
        assert proxy.accepted == 3
    finally:
        proxy.close()
    assert got == [TextDelta("hello"), Stopped("end_turn")]
    assert len(server.requests) == 1


# -- a 200 that is not an event stream ---------------------------------------------------

WHOLE_ANSWERS: dict[str, dict[str, Any]] = {
    "openai": {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Let me compute.",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "calculator", "arguments": _ARGS},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19},
    },
    "responses": {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Let me compute."}],
            },
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "c1",
                "name": "calculator",
                "arguments": _ARGS,
            },
        ],
        "usage": {"input_tokens": 12, "output_tokens": 7, "total_tokens": 19},
    },
    "anthropic": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me compute."},
            {"type": "tool_use", "id": "c1", "name": "calculator", "input": {"expression": "2+3"}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 12, "output_tokens": 7},
    },
}


@pytest.mark.parametrize("fmt", sorted(WHOLE_ANSWERS))
def test_a_whole_json_answer_to_a_stream_request_is_read_as_that_formats_response(
    fmt: str, server: FakeModelServer
) -> None:
    """A plain JSON 200 gives its text, tool calls, stop reason and usage, as the stream
    it stands for would have."""
    from actors.agents.wire import Stopped, TextDelta, ToolCallDone, UsageSeen

    server.queue([("status", 200, {}, json.dumps(WHOLE_ANSWERS[fmt]))])
    got = _collect(_provider(server.url, fmt), _hi())
    assert [e for e in got if isinstance(e, TextDelta)] == [TextDelta("Let me compute.")]
    calls = [e.call for e in got if isinstance(e, ToolCallDone)]
    assert [(c.id, c.name, json.loads(c.arguments), c.error) for c in calls] == [
        ("c1", "calculator", {"expression": "2+3"}, "")
    ]
    (usage,) = [e.usage for e in got if isinstance(e, UsageSeen)][-1:]
    assert (usage.input_tokens, usage.output_tokens) == (12, 7)
    assert got[-1] == Stopped("tool_use")


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ("<html>502 Bad Gateway</html>", "<html>502 Bad Gateway</html>"),
        ('{"status": "ok"}', '{"status": "ok"}'),
        ("", "no body"),
    ],
)
def test_a_200_that_is_neither_a_stream_nor_a_response_fails_naming_what_came(
    body: str, named: str, server: FakeModelServer
) -> None:
    """Never an empty answer stored silently: the error names the content type and the
    start of the body."""
    from actors.agents.http import ProviderError

    server.queue([("status", 200, {}, body)])
    with pytest.raises(ProviderError) as err:
        _collect(_provider(server.url, "openai"), _hi())
    text = str(err.value)
    assert "answered 200 with application/json, not an event stream" in text, text
    assert named in text


# -- connections kept for the next call --------------------------------------------------


class KeepAliveServer:
    """A chat-completions server on loopback that keeps its connections open (HTTP/1.1,
    chunked bodies, as uvicorn-based proxies send them) and counts them."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.connections = 0
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                server.connections += 1

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                server.requests += 1
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                events = [chunk(content="ok"), chunk(finish="stop")]
                for data in [*(json.dumps(e) for e in events), "[DONE]"]:
                    piece = f"data: {data}\n\n".encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    self.wfile.flush()
                # The end of the body comes after the end marker, in a write of its own.
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(5)


def test_chat_completions_calls_reuse_one_kept_connection() -> None:
    """Ten calls in a row to a keep-alive server go over one connection: the body is
    read to its end past [DONE], so the pool keeps the connection."""
    from actors.agents.wire import Stopped, TextDelta

    ka = KeepAliveServer()
    try:
        provider = _provider(ka.url)

        async def turns() -> list[list[Any]]:
            return [[ev async for ev in provider.stream(_hi())] for _ in range(10)]

        got = asyncio.run(asyncio.wait_for(turns(), 20))
        assert all(g == [TextDelta("ok"), Stopped("end_turn")] for g in got)
        assert (ka.requests, ka.connections) == (10, 1)
    finally:
        ka.close()


def test_an_event_stream_under_another_content_type_is_still_read(
    server: FakeModelServer,
) -> None:
    """A server that labels its event stream application/json still gives its events."""
    from actors.agents.wire import Stopped, TextDelta

    body = "".join(
        f"data: {json.dumps(e)}\n\n" for e in (chunk(content="hi"), chunk(finish="stop"))
    )
    server.queue([("status", 200, {}, body + "data: [DONE]\n\n")])
    got = _collect(_provider(server.url), _hi())
    assert got == [TextDelta("hi"), Stopped("end_turn")]
