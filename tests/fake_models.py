"""A fake model server on loopback: real HTTP, real SSE, the three wire formats.

Each test queues the answers the server gives, in order, one per request; an answer is a
list of steps:

- ``("status", code, headers, body)``: answer with that status and body, no stream;
- ``("sse", [obj, ...])``: a 200 event stream, each object one event (``data: JSON``;
  Anthropic and Responses events also get their ``event:`` line from ``type``);
- ``("raw", b"...")``: bytes written as they are;
- ``("done",)``: ``data: [DONE]`` (the chat-completions end marker);
- ``("stall",)``: send nothing more until the server stops (a model thinking);
- ``("pause", seconds)``: wait, bounded by the server stopping.

The server keeps every request (path, headers, decoded JSON body) for assertions. With
no answer queued it echoes the last user message in the chat-completions format.
"""

from __future__ import annotations

import collections
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Step = tuple[Any, ...]


class FakeModelServer:
    """``route``, when given, answers a request from its body before the queue is asked
    (None: the queue answers): for concurrent callers, whose order is not fixed."""

    def __init__(self, route: Callable[[Any], list[Step] | None] | None = None) -> None:
        self.route = route
        self.answers: collections.deque[list[Step]] = collections.deque()
        self.requests: list[dict[str, Any]] = []
        self.probes: list[str] = []
        self.stopping = threading.Event()
        self.first_byte: list[float] = []
        self.lock = threading.Lock()
        self.got_request = threading.Condition(self.lock)
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _not_found(self) -> None:
                # The asking of a context window (llama.cpp's /props, vLLM's /models,
                # Ollama's /api/show): this server does not say, as a plain OpenAI one.
                with server.lock:
                    server.probes.append(self.path)
                self.send_response(404)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                self._not_found()

            def do_POST(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(n)
                if self.path.startswith("/api/"):
                    self._not_found()
                    return
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                with server.lock:
                    server.requests.append(
                        {"path": self.path, "headers": dict(self.headers), "body": body}
                    )
                    answer = server.route(body) if server.route is not None else None
                    if answer is None and server.answers:
                        answer = server.answers.popleft()
                    server.got_request.notify_all()
                if answer is None:
                    answer = [("sse", _echo_chunks(body)), ("done",)]
                server._answer(self, answer)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    def queue(self, *answers: list[Step]) -> None:
        with self.lock:
            self.answers.extend(answers)

    def wait_requests(self, n: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        with self.lock:
            while len(self.requests) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"the fake server got {len(self.requests)} of {n}")
                self.got_request.wait(left)
            return list(self.requests)

    def _answer(self, h: BaseHTTPRequestHandler, steps: list[Step]) -> None:
        started = False
        try:
            for step in steps:
                kind = step[0]
                if kind == "status":
                    _, code, headers, body = step
                    data = body.encode() if isinstance(body, str) else body
                    h.send_response(code)
                    for k, v in headers.items():
                        h.send_header(k, v)
                    h.send_header("content-length", str(len(data)))
                    h.send_header("content-type", "application/json")
                    h.end_headers()
                    h.wfile.write(data)
                    h.wfile.flush()
                    return
                if not started:
                    h.send_response(200)
                    h.send_header("content-type", "text/event-stream")
                    h.send_header("cache-control", "no-cache")
                    h.send_header("connection", "close")
                    h.end_headers()
                    h.wfile.flush()
                    h.close_connection = True
                    started = True
                if kind == "sse":
                    for obj in step[1]:
                        line = b""
                        if isinstance(obj, dict) and "type" in obj and "object" not in obj:
                            line += f"event: {obj['type']}\n".encode()
                        line += b"data: " + json.dumps(obj).encode() + b"\n\n"
                        self.first_byte.append(time.perf_counter())
                        h.wfile.write(line)
                        h.wfile.flush()
                elif kind == "raw":
                    h.wfile.write(step[1])
                    h.wfile.flush()
                elif kind == "done":
                    h.wfile.write(b"data: [DONE]\n\n")
                    h.wfile.flush()
                elif kind == "stall":
                    self.stopping.wait(60)
                elif kind == "pause":
                    self.stopping.wait(step[1])
        except (BrokenPipeError, ConnectionResetError):
            pass

    def close(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(5)


def _echo_chunks(body: Any) -> list[dict[str, Any]]:
    msgs = (body or {}).get("messages") or []
    text = next((m.get("content") for m in reversed(msgs) if m.get("role") == "user"), "")
    return [
        chunk(content=f"echo: {text}"),
        chunk(finish="stop"),
        usage_chunk(5, 2),
    ]


# -- chat-completions chunk builders -----------------------------------------------------


def chunk(
    content: str | None = None,
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    finish: str | None = None,
    reasoning: str | None = None,
    reasoning_key: str = "reasoning_content",
) -> dict[str, Any]:
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    if reasoning is not None:
        delta[reasoning_key] = reasoning
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "fake",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def usage_chunk(prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": usage}


def tool_delta(
    index: int | None, call_id: str | None, name: str | None, args: str | None
) -> dict[str, Any]:
    d: dict[str, Any] = {"type": "function"}
    if index is not None:
        d["index"] = index
    if call_id is not None:
        d["id"] = call_id
    fn: dict[str, Any] = {}
    if name is not None:
        fn["name"] = name
    if args is not None:
        fn["arguments"] = args
    d["function"] = fn
    return d
