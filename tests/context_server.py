"""A chat-completions server on loopback that enforces a context window, as llama.cpp
and OpenAI do: a request over it is refused with the real error shape (400,
``exceed_context_size_error`` or ``context_length_exceeded``), never answered.

It counts tokens its own way (a quarter of the characters of every message, plus four a
message), so the session's estimate has to be calibrated to agree with it. It keeps the
raw bytes of every request, for comparing requests byte for byte.

Answers: a summariser's request (its system prompt is the summariser's) gets a short
summary; a user message ``!blob N`` gets a call of the ``blob`` tool for N characters,
``!recall SEQ`` one of ``recall`` for the first 500 characters of event SEQ;
a tool result gets "got it"; anything else gets ``reply to <first word>``.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
from fake_models import chunk, tool_delta, usage_chunk

from actors.agents.context import SUMMARY_SYSTEM, leaves_out, model_view
from actors.agents.formats import chat_body
from actors.agents.tools import RECALL, Tool, ToolRegistry
from actors.agents.wire import ModelRequest
from actors.session.rules import commands as cmd
from actors.session.rules.state import SessionState, fold
from actors.session.rules.turns import settle
from spine import Event, Kind


def _blob(args: dict[str, Any]) -> str:
    return "b" * int(args.get("n", 10))


BLOB = Tool(
    name="blob",
    description="Returns n characters.",
    parameters={"type": "object", "properties": {"n": {"type": "integer"}}},
    fn=_blob,
)
TOOLS = ToolRegistry.of([BLOB])


def replayed(events: list[Event], session_id: str) -> list[bytes]:
    """Each turn's first answered request as the log gives it (chat-completions JSON):
    the state before the turn, with the context events the turn stored (its window
    answer, its compactions). One pass: the state is folded once, turn after turn."""
    out = []
    starts = [i for i, e in enumerate(events) if e.kind == Kind.TURN_STARTED]
    st, done = SessionState(session_id=session_id), 0
    for n, at in enumerate(starts):
        st = fold(st, events[done:at])
        done = at
        end = starts[n + 1] if n + 1 < len(starts) else len(events)
        ctx_events = [
            e for e in events[at:end] if e.kind in (Kind.CONTEXT_WINDOW, Kind.CONTEXT_COMPACTED)
        ]
        d = settle(cmd.Session(stored=fold(st, ctx_events)), cmd.Settle())
        (start,) = [x for x in d.effects if isinstance(x, cmd.StartTurn)]
        ti = start.input
        system, msgs, _ = model_view(ti, ti.spec.system)
        tools = TOOLS.with_tool(RECALL) if leaves_out(ti) else TOOLS
        req = ModelRequest(
            model=ti.spec.model,
            messages=msgs,
            tools=tools.specs(),
            system=system,
            temperature=ti.spec.temperature,
            max_output_tokens=ti.spec.max_output_tokens,
            thinking_level=ti.spec.thinking_level,
            include_usage=ti.spec.include_usage,
        )
        out.append(orjson.dumps(chat_body(req)))
    return out


def count(body: dict[str, Any]) -> int:
    """The server's own token count of a request."""
    n = 0
    for m in body.get("messages") or []:
        text = m.get("content") or ""
        for c in m.get("tool_calls") or []:
            text += json.dumps(c)
        n += len(text) // 4 + 4
    n += len(json.dumps(body.get("tools") or [])) // 4
    return n


def overflow(style: str, tokens: int, n_ctx: int) -> dict[str, Any]:
    if style == "openai":
        return {
            "error": {
                "message": f"This model's maximum context length is {n_ctx} tokens. However, "
                f"your messages resulted in {tokens} tokens. Please reduce the length of the "
                "messages.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        }
    return {
        "error": {
            "code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": tokens,
            "n_ctx": n_ctx,
        }
    }


class WindowServer:
    """``n_ctx`` tokens enforced; ``announce``: ``/props`` tells it (llama.cpp)."""

    def __init__(
        self, n_ctx: int, *, announce: bool = True, style: str = "llama", keep_raw: bool = True
    ) -> None:
        self.n_ctx = n_ctx
        self.announce = announce
        self.style = style
        #: Every chat request: (raw body, tokens counted, accepted, is a summary call); the
        #: raw body is left out (empty) unless ``keep_raw``: a long run would hold them all.
        self.log: list[tuple[bytes, int, bool, bool]] = []
        self.keep_raw = keep_raw
        #: The SHA-256 of each answered request that is not a summary's and ends with the
        #: user's message: the first request of each turn, for comparing with a replay.
        self.turn_digests: list[bytes] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, code: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/props" and server.announce:
                    props = {"default_generation_settings": {"n_ctx": server.n_ctx}}
                    self._json(200, props)
                else:
                    self._json(404, {"error": "not found"})

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                if not self.path.endswith("/chat/completions"):
                    self._json(404, {"error": "not found"})
                    return
                body = json.loads(raw)
                tokens = count(body)
                msgs = body.get("messages") or []
                summary = bool(msgs) and msgs[0].get("content") == SUMMARY_SYSTEM
                ok = tokens <= server.n_ctx
                first = ok and not summary and bool(msgs) and msgs[-1].get("role") == "user"
                with server.lock:
                    server.log.append((raw if server.keep_raw else b"", tokens, ok, summary))
                    if first:
                        server.turn_digests.append(hashlib.sha256(raw).digest())
                if not ok:
                    self._json(400, overflow(server.style, tokens, server.n_ctx))
                    return
                self._stream([*server.answer(msgs, summary), usage_chunk(tokens, 5)])

            def _stream(self, chunks: list[dict[str, Any]]) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                for obj in chunks:
                    self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
                self.wfile.write(b"data: [DONE]\n\n")
                self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    def answer(self, msgs: list[dict[str, Any]], summary: bool) -> list[dict[str, Any]]:
        last = msgs[-1] if msgs else {}
        if summary:
            return [
                chunk(content=f"summary of {len(last.get('content') or '')} chars"),
                chunk(finish="stop"),
            ]
        if last.get("role") == "tool":
            return [chunk(content="got it"), chunk(finish="stop")]
        text = str(last.get("content") or "")
        if text.startswith(("!blob ", "!recall ")):
            name, n = text[1:].split()[:2]
            args = json.dumps({"n": int(n)} if name == "blob" else {"seq": int(n), "length": 500})
            return [
                chunk(tool_calls=[tool_delta(0, f"call_{len(msgs)}", name, args)]),
                chunk(finish="tool_calls"),
            ]
        return [chunk(content=f"reply to {text.split()[0] if text else ''}"), chunk(finish="stop")]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(5)
