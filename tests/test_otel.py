"""OpenTelemetry export: the SDK's in-memory exporter, `vertebra trace` to a file and to an
OTLP/HTTP collector stand-in on loopback, and the live exporter actor on real processes."""

from __future__ import annotations

import http.server
import json
import pathlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from actor_helpers import governed_tools
from cli_support import run
from conftest import wait_for
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_projections_spans import CHILD, PARENT, child_events, parent_events

from actors.agents import ModelFactory
from actors.host import Host
from actors.otel import (
    export_stats,
    otlp_json,
    readable_spans,
    start_trace_export,
    stop_trace_export,
)
from projections import spans_from, spans_of_tree
from spine import Kind, LogSpec, open_log

pytestmark = pytest.mark.timeout(120)


class Collector:
    """An OTLP/HTTP collector stand-in: keeps every request body it is sent."""

    def __init__(self) -> None:
        self.bodies: list[tuple[str, bytes]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                with outer.lock:
                    outer.bodies.append((self.headers.get("content-type", ""), body))
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}
        )
        self.thread.start()

    def proto_spans(self, encoding: str = "") -> list[Any]:
        """Every span received, as protobuf objects whichever of OTLP/HTTP's encodings it
        came in (only ``json`` or ``protobuf`` requests when ``encoding`` says so)."""
        with self.lock:
            bodies = list(self.bodies)
        out = []
        for ctype, body in bodies:
            if ctype == "application/x-protobuf" and encoding in ("", "protobuf"):
                req = ExportTraceServiceRequest()
                req.ParseFromString(body)
            elif ctype == "application/json" and encoding in ("", "json"):
                req = _from_otlp_json(json.loads(body))
            else:
                continue
            for rs in req.resource_spans:
                for ss in rs.scope_spans:
                    out.extend(ss.spans)
        return out

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def _from_otlp_json(doc: dict[str, Any]) -> Any:
    """An OTLP/JSON request as the protobuf message: OTLP/JSON writes ids as hex where
    protobuf's JSON mapping expects base64."""
    import base64

    from google.protobuf.json_format import ParseDict

    def b64(hex_id: str) -> str:
        return base64.b64encode(bytes.fromhex(hex_id)).decode()

    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = b64(span[key])
                for link in span.get("links", []):
                    link["traceId"], link["spanId"] = b64(link["traceId"]), b64(link["spanId"])
    return ParseDict(doc, ExportTraceServiceRequest())


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    try:
        yield c
    finally:
        c.close()


def _attrs(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        v = kv.value
        out[kv.key] = getattr(v, v.WhichOneof("value"))
    return out


def test_the_sdk_in_memory_exporter_takes_the_folded_spans_unchanged() -> None:
    """Span records become SDK spans with the same ids, parents, kinds, times, events,
    links and attributes."""
    spans = spans_of_tree({PARENT: parent_events(), CHILD: child_events()}, PARENT)
    mem = InMemorySpanExporter()
    mem.export(readable_spans(spans))
    got = mem.get_finished_spans()
    assert len(got) == len(spans)
    for rec, sdk in zip(spans, got, strict=True):
        assert format(sdk.context.trace_id, "032x") == rec.trace_id
        assert format(sdk.context.span_id, "016x") == rec.span_id
        assert (format(sdk.parent.span_id, "016x") if sdk.parent else "") == rec.parent_span_id
        assert sdk.name == rec.name and sdk.kind.name == rec.kind
        assert sdk.status.status_code.name == rec.status
        assert dict(sdk.attributes) == dict(rec.attributes)
        assert [e.name for e in sdk.events] == [e.name for e in rec.events]
        assert [format(lk.context.span_id, "016x") for lk in sdk.links] == [
            lk.span_id for lk in rec.links
        ]
    tool = next(s for s in got if s.name == "execute_tool shell")
    assert tool.attributes["vertebra.governance.fault"] == "capability_denied"
    assert tool.end_time - tool.start_time == 20_000_000


def _store(data: pathlib.Path) -> None:
    data.mkdir()
    log = open_log(LogSpec.sqlite(str(data / "spine.db")))
    try:
        for sid, events in ((PARENT, parent_events()), (CHILD, child_events())):
            log.append(sid, [e.__class__(**{**_fields(e), "seq": 0}) for e in events])
    finally:
        log.close()


def _fields(e: Any) -> dict[str, Any]:
    import attrs

    return {f.name: getattr(e, f.name) for f in attrs.fields(type(e))}


def test_vertebra_trace_writes_otlp_json_and_posts_it_to_a_collector(
    tmp_path: pathlib.Path, collector: Collector
) -> None:
    """The file and the collector get the same document: the parent's traces and the
    child's linked trace, with ids that do not change from one run to the next."""
    data = tmp_path / "data"
    _store(data)
    out = tmp_path / "t.json"
    r = run(data, "trace", PARENT, "--otlp-json", str(out), "--otlp-endpoint", collector.url)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert [(c, json.loads(b)) for c, b in collector.bodies] == [("application/json", doc)]
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    expected = spans_of_tree({PARENT: parent_events(), CHILD: child_events()}, PARENT)
    assert doc == otlp_json(expected)
    assert len(spans) == 14
    by_id = {s["spanId"]: s for s in spans}
    spawn = next(s for s in spans if s["name"] == f"invoke_agent {CHILD}")
    (child_turn,) = [s for s in spans if s.get("links")]
    assert child_turn["links"][0]["spanId"] == spawn["spanId"]
    assert child_turn["traceId"] != spawn["traceId"]
    assert by_id[spawn["parentSpanId"]]["name"] == "invoke_agent"
    again = tmp_path / "again.json"
    assert run(data, "trace", PARENT, "--otlp-json", str(again)).returncode == 0
    assert again.read_bytes() == out.read_bytes()
    tree = run(data, "trace", PARENT)
    assert tree.returncode == 0 and "execute_tool deploy" in tree.stdout
    assert "14 spans in 5 traces" in tree.stderr
    missing = run(data, "trace", "no-such-session")
    assert missing.returncode != 0 and "no-such-session" in missing.stderr


@pytest.fixture
def mp(tmp_path: pathlib.Path, no_leftover_processes):  # type: ignore[no-untyped-def]
    h = Host(
        tmp_path / "data",
        base="multiprocTCPBase",
        timeout=20,
        factory=ModelFactory(tools=governed_tools(), backoff=0.01),
    )
    try:
        yield h
    finally:
        h.close()


def test_the_live_exporter_sends_the_same_spans_as_the_offline_fold(
    mp: Host, collector: Collector
) -> None:
    """Turns with a tool call and a refusal, exported live over OTLP/HTTP (protobuf), arrive
    as exactly the spans a fold of the stored log gives, token counts matching the status."""
    addr = start_trace_export(mp, collector.url, interval=0.05, encoding="protobuf")
    try:
        sid = mp.create(metadata={"governance.capabilities": "net,clock"})
        for text in ('!tool calculator {"expression": "2+2"}', '!tool shell {"log": "x"}', "hi"):
            ack = mp.send(sid, text)
            assert mp.wait_turn(sid, ack.seq).kind == Kind.TURN_COMPLETED
        history = mp.history(sid)
        expected = spans_from(history, sid)
        got = wait_for(
            lambda: (
                len(collector.proto_spans("protobuf")) >= len(expected)
                and collector.proto_spans("protobuf")
            ),
            30,
        )
        assert sorted((s.trace_id.hex(), s.span_id.hex(), s.name) for s in got) == sorted(
            (s.trace_id, s.span_id, s.name) for s in expected
        )
        roots = [s for s in got if s.name == "invoke_agent"]
        status = wait_for(lambda: (st := mp.status(sid)).turns == 3 and st, 20)
        assert sum(_attrs(s)["gen_ai.usage.input_tokens"] for s in roots) == (
            status.usage.input_tokens
        )
        assert sum(_attrs(s)["gen_ai.usage.output_tokens"] for s in roots) == (
            status.usage.output_tokens
        )
        shell = next(s for s in got if s.name == "execute_tool shell")
        assert _attrs(shell)["vertebra.governance.decision"] == "rejected"
        stats = export_stats(mp, addr)
        assert stats["exported"] == len(expected) and stats["dropped"] == 0
        assert stats["folded"] >= len(history) - 2
    finally:
        stop_trace_export(mp, addr)


def test_a_down_collector_drops_spans_and_never_holds_a_session_up(mp: Host) -> None:
    """With nothing listening at the endpoint and a tiny queue, turns complete as usual and
    the spans that did not fit are counted as dropped."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    url = f"http://127.0.0.1:{port}/v1/traces"
    addr = start_trace_export(mp, url, max_queue=2, interval=30.0, timeout=0.5)
    try:
        sid = mp.create()
        for i in range(3):
            ack = mp.send(sid, f"hello {i}")
            assert mp.wait_turn(sid, ack.seq).kind == Kind.TURN_COMPLETED
        # A chat and a turn span per turn; the queue holds two while the export waits.
        stats = wait_for(lambda: (x := export_stats(mp, addr))["dropped"] == 4 and x, 20)
        assert (stats["queued"], stats["depth"], stats["exported"]) == (2, 2, 0)
    finally:
        stop_trace_export(mp, addr)


def test_serve_exports_live_to_the_collector_what_trace_reads_from_the_log(
    tmp_path: pathlib.Path, collector: Collector, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """`serve --otlp-endpoint` exports each turn's spans as it ends, with content when the
    standard capture switch is set; `vertebra trace` gives the same ids from the log."""
    import signal
    import subprocess

    from cli_support import CLI, env

    data = tmp_path / "data"
    daemon = subprocess.Popen(
        [*CLI, "--data", str(data), "serve", "--quiet", "--otlp-endpoint", collector.url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true"),
    )
    try:
        wait_for(lambda: (data / "daemon.json").exists() or daemon.poll() is not None, 30)
        assert daemon.poll() is None, daemon.stderr.read() if daemon.stderr else ""
        info = json.loads(wait_for(lambda: (data / "daemon.json").read_text() or None, 10))
        no_leftover_processes.append(info["system_session"])
        out = run(data, "send", "chat-1", "hello otel", "--create")
        assert out.returncode == 0, out.stderr
        got = wait_for(lambda: len(collector.proto_spans()) >= 2 and collector.proto_spans(), 30)
        turn = next(s for s in got if s.name == "invoke_agent")
        assert "hello otel" in _attrs(turn)["gen_ai.input.messages"]
        out = run(data, "trace", "chat-1", "--otlp-json", "-")
        assert out.returncode == 0, out.stderr
        spans = json.loads(out.stdout)["resourceSpans"][0]["scopeSpans"][0]["spans"]
        assert sorted((s["traceId"], s["spanId"]) for s in spans) == sorted(
            (s.trace_id.hex(), s.span_id.hex()) for s in got
        )
        assert all("gen_ai.input.messages" not in json.dumps(s) for s in spans)
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(30)
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait(10)
    assert daemon.returncode == 0


def test_a_batch_the_sink_lost_is_read_back_from_the_spine(mp: Host, collector: Collector) -> None:
    """Given only the last record of one turn and then of the next, the exporter primes its
    fold from the spine (exporting nothing old) and reads the gap back: the second turn's
    spans arrive whole, exactly as the offline fold gives them."""
    from actors import messages as m
    from spine import encode_event

    sid = mp.create()
    for text in (
        '!tool calculator {"expression": "1+1"}',
        '!tool calculator {"expression": "2+2"}',
    ):
        ack = mp.send(sid, text)
        assert mp.wait_turn(sid, ack.seq).kind == Kind.TURN_COMPLETED
    history = mp.history(sid)
    ends = [e for e in history if e.kind == Kind.TURN_COMPLETED]
    addr = start_trace_export(mp, collector.url, interval=0.05)
    try:
        for end in ends:
            batch = m.SinkBatch(
                session_id=sid, sink_id="lost", records=((end.seq, end.kind, encode_event(end)),)
            )
            mp._asys.tell(addr, batch)
        offline = spans_from(history, sid)
        first, second = offline[0].trace_id, offline[-1].trace_id
        got = wait_for(
            lambda: (
                {s.trace_id.hex() for s in collector.proto_spans()} >= {first, second}
                and collector.proto_spans()
            ),
            30,
        )
        # Nothing before the first record seen is exported: the first turn's tool span
        # ended before it; its model calls and the turn itself end with it.
        assert sorted(s.name for s in got if s.trace_id.hex() == first) == [
            "chat",
            "chat",
            "invoke_agent",
        ]
        whole = sorted((s.span_id, s.name) for s in offline if s.trace_id == second)
        assert sorted((s.span_id.hex(), s.name) for s in got if s.trace_id.hex() == second) == (
            whole
        )
        assert "execute_tool calculator" in {name for _, name in whole}
    finally:
        stop_trace_export(mp, addr)


def test_the_live_exporter_registers_again_with_a_runner_restarted_after_a_kill(
    mp: Host, collector: Collector
) -> None:
    """SIGKILL of the Runner: the guardian starts another, the exporter notices and registers
    its sink with it, and the spans of a turn after the restart reach the collector whole."""
    import os
    import signal

    addr = start_trace_export(mp, collector.url, interval=0.05)
    try:
        sid = mp.create()
        ack = mp.send(sid, '!tool calculator {"expression": "1+1"}')
        assert mp.wait_turn(sid, ack.seq).kind == Kind.TURN_COMPLETED
        before = spans_from(mp.history(sid), sid)
        wait_for(lambda: len(collector.proto_spans()) >= len(before), 30)
        runner = mp.runner_pid()
        os.kill(runner, signal.SIGKILL)
        wait_for(lambda: mp.runner_pid() != runner, 20)
        wait_for(lambda: export_stats(mp, addr)["reregistered"] >= 1, 20)
        ack = mp.send(sid, '!tool calculator {"expression": "2+2"}', key="after-kill")
        assert mp.wait_turn(sid, ack.seq).kind == Kind.TURN_COMPLETED
        offline = spans_from(mp.history(sid), sid)
        after = offline[-1].trace_id
        assert after not in {s.trace_id for s in before}
        whole = sorted((s.span_id, s.name) for s in offline if s.trace_id == after)
        assert "execute_tool calculator" in {name for _, name in whole}

        def arrived() -> list[tuple[str, str]] | None:
            got = sorted(
                (s.span_id.hex(), s.name)
                for s in collector.proto_spans()
                if s.trace_id.hex() == after
            )
            return got if got == whole else None

        assert wait_for(arrived, 30) == whole
        assert export_stats(mp, addr)["dropped"] == 0
    finally:
        stop_trace_export(mp, addr)


def _tree(spans: list[dict[str, Any]]) -> list[tuple[str, str, str, str, tuple[str, ...]]]:
    """Spans as (trace, span, name, parent span, linked spans), sorted: the shape to compare
    between the file, the collector and the fold."""
    return sorted((s["trace"], s["span"], s["name"], s["parent"], tuple(s["links"])) for s in spans)


def test_a_run_with_tools_and_a_child_exports_the_same_span_tree_to_a_file_and_a_collector(
    mp: Host, collector: Collector, tmp_path: pathlib.Path
) -> None:
    """The issue's acceptance run: a tool-calling turn, then a goal that spawns a child
    which calls a tool, on real processes. Exported live to the collector stand-in and by
    `vertebra trace --otlp-json FILE`, both hold exactly the fold's span tree: one trace
    per turn under its invoke_agent, chat and tool spans beneath it, the spawn span under
    the parent's turn, the child's turns in traces of their own linked to it; the turns'
    tokens add up to each session's status."""
    addr = start_trace_export(mp, collector.url, interval=0.05)
    try:
        sid = mp.create()
        ack = mp.send(sid, '!tool calculator {"expression": "2+2"}')
        assert mp.wait_turn(sid, ack.seq).kind == Kind.TURN_COMPLETED
        objective = '!tool calculator {"expression": "6*7"}'
        mp.submit(sid, "!tool spawn " + json.dumps({"objective": objective}))
        assert mp.wait(sid, timeout=60) == "spawn returned calculator returned 42"
        history = mp.history(sid)
        (child,) = [e.child for e in history if e.kind == Kind.CHILD_SPAWNED]
        streams = {sid: history, child: mp.history(child)}
        expected = spans_of_tree(streams, sid)
        want = _tree(
            [
                {
                    "trace": s.trace_id,
                    "span": s.span_id,
                    "name": s.name,
                    "parent": s.parent_span_id,
                    "links": [lk.span_id for lk in s.links],
                }
                for s in expected
            ]
        )

        def live() -> list[Any] | None:
            got = collector.proto_spans()
            return got if len(got) >= len(expected) else None

        got = wait_for(live, 30)
        assert (
            _tree(
                [
                    {
                        "trace": s.trace_id.hex(),
                        "span": s.span_id.hex(),
                        "name": s.name,
                        "parent": s.parent_span_id.hex(),
                        "links": [lk.span_id.hex() for lk in s.links],
                    }
                    for s in got
                ]
            )
            == want
        )
        out = tmp_path / "trace.json"
        r = run(mp.data_dir, "trace", sid, "--otlp-json", str(out))
        assert r.returncode == 0, r.stderr
        filed = json.loads(out.read_text())["resourceSpans"][0]["scopeSpans"][0]["spans"]
        assert (
            _tree(
                [
                    {
                        "trace": s["traceId"],
                        "span": s["spanId"],
                        "name": s["name"],
                        "parent": s.get("parentSpanId", ""),
                        "links": [lk["spanId"] for lk in s.get("links", [])],
                    }
                    for s in filed
                ]
            )
            == want
        )

        # The tree: every span hangs under its trace's one invoke_agent root.
        by_span = {s.span_id: s for s in expected}
        roots = {s.trace_id: s for s in expected if s.name == "invoke_agent"}
        assert len(roots) == len({s.trace_id for s in expected})
        for s in expected:
            if s.name != "invoke_agent":
                assert by_span[s.parent_span_id].trace_id == s.trace_id
                assert s.parent_span_id == roots[s.trace_id].span_id, s.name
        names = sorted(s.name for s in expected)
        assert names.count("execute_tool calculator") == 2
        assert "execute_tool spawn" in names and names.count("chat") >= 4
        (spawn,) = [s for s in expected if s.name == f"invoke_agent {child}"]
        child_roots = [s for s in roots.values() if s.attribute("gen_ai.conversation.id") == child]
        assert child_roots and all(
            [lk.span_id for lk in s.links] == [spawn.span_id] for s in child_roots
        )
        # Token figures: each session's status counts its own turns and its children's (the
        # parent's rolls the child's up): the invoke_agent spans of those add up to it.
        for session, members in ((sid, {sid, child}), (child, {child})):
            turns = [s for s in roots.values() if s.attribute("gen_ai.conversation.id") in members]
            status = mp.status(session)  # exact: folded up to the stream's last seq
            for attr, total in (
                ("gen_ai.usage.input_tokens", status.usage.input_tokens),
                ("gen_ai.usage.output_tokens", status.usage.output_tokens),
            ):
                assert sum(s.attribute(attr) for s in turns) == total, (session, attr)
            assert total > 0
        # What the collector got carries the same figures as the file.
        live_tokens = sorted(
            _attrs(s)["gen_ai.usage.output_tokens"] for s in got if s.name == "invoke_agent"
        )
        file_tokens = sorted(
            int(a["value"]["intValue"])
            for s in filed
            if s["name"] == "invoke_agent"
            for a in s["attributes"]
            if a["key"] == "gen_ai.usage.output_tokens"
        )
        assert live_tokens == file_tokens
        assert export_stats(mp, addr)["dropped"] == 0
    finally:
        stop_trace_export(mp, addr)
