"""Metrics: the log fold, the Prometheus text, `vertebra stats` and the gateway's
`GET /metrics` over a real daemon on loopback."""

from __future__ import annotations

import json
import pathlib
import re

import attrs
import httpx
import pytest
from cli_support import run
from conftest import wait_for
from gateway_support import client, running_gateway
from prometheus_client.parser import text_string_to_metric_families
from test_projections_spans import PARENT, parent_events

from actors.gateway import create_token
from actors.otel import LogMetrics, prometheus_text
from projections import LATENCY_BUCKETS, MetricsFolder
from spine import Event, Kind, LogSpec, Usage, open_log

pytestmark = pytest.mark.timeout(120)

# One sample line of the text format: a name, optional labels, a number.
SAMPLE = re.compile(r'^[a-z_:][a-z0-9_:]*(\{([a-z_]+="[^"\\]*",?)*\})? -?[0-9.e+]+$|^.*\+Inf.*$')


def parsed(text: str) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    """The exposition text through an independent parser (Prometheus' own client): each
    family's type and samples; a malformed line raises."""
    out: dict[str, list[tuple[str, dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        out[f"{fam.name}:{fam.type}"] = [(s.name, dict(s.labels), s.value) for s in fam.samples]
    return out


def _histogram(fams: dict[str, list[tuple[str, dict[str, str], float]]], name: str) -> list[float]:
    """The cumulative bucket counts of histogram ``name``, checked for shape: increasing,
    ending with +Inf equal to the count."""
    samples = fams[f"{name}:histogram"]
    buckets = [(lab["le"], v) for n, lab, v in samples if n == f"{name}_bucket"]
    count = next(v for n, _, v in samples if n == f"{name}_count")
    values = [v for _, v in buckets]
    assert values == sorted(values) and buckets[-1] == ("+Inf", count), buckets
    return values


def _sample(text: str, line: str) -> float:
    for row in text.splitlines():
        if row.startswith(line + " "):
            return float(row.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {line!r} in\n{text}")


def test_the_log_fold_counts_turns_tokens_calls_and_latency() -> None:
    """The hand-written log's four turns: two completed, one failed, one cancelled; tokens
    summed by type; every turn's latency in the histogram from event times."""
    m = MetricsFolder()
    for ev in parent_events():
        m.feed(PARENT, ev, ev.seq)
    assert m.turns == {"completed": 2, "cancelled": 1, "error": 1}
    assert m.tokens == {
        "input": 67,
        "output": 10,
        "cache_read": 8,
        "cache_write": 0,
        "reasoning": 0,
    }
    assert (m.model_calls, m.tool_calls, m.tool_errors) == (5, 2, 1)
    assert m.actions == {"admitted": 6, "rejected": 1, "pending": 1}
    assert m.egress == {"allowed": 1, "blocked": 0}
    # 10 ms a seq: turns of 0.13 s (seqs 4..17), 0.08 s, 0.02 s and 0.03 s.
    assert m.latency_count == 4 and m.latency_sum == pytest.approx(0.26)
    assert m.latency_buckets[LATENCY_BUCKETS.index(0.05)] == 2
    assert m.latency_buckets[LATENCY_BUCKETS.index(0.1)] == 3
    assert m.latency_buckets[LATENCY_BUCKETS.index(0.25)] == 4
    assert (m.position, m.open_turns) == (33, 0)


def test_a_childs_events_mirrored_onto_its_parent_are_counted_once() -> None:
    """A child's turn, tokens and failed model call are counted from its own stream; their
    copies on the parent's stream (attributed to the child by goal) add nothing."""
    own = [
        Event(kind=Kind.ACTION_ADMITTED, action="model", call=3),
        Event(kind=Kind.ACTION_COMPLETED, action="model", call=3, fault="error"),
        Event(kind=Kind.TURN_COMPLETED, turn=1, usage=Usage(input_tokens=7, output_tokens=2)),
    ]
    m = MetricsFolder()
    for ev in own:
        m.feed("p-k", ev)
    for ev in own:
        m.feed("p", attrs.evolve(ev, goal="p-k"))
    assert (m.model_calls, m.model_faults, m.actions["admitted"]) == (1, 1, 1)
    assert m.turns["completed"] == 1 and m.tokens["input"] == 7


def test_the_text_format_is_well_formed_and_complete() -> None:
    """Every line is a comment or a sample; the histogram's buckets are cumulative and end
    with +Inf equal to the count; runner counters and session states appear when given."""
    m = MetricsFolder()
    for ev in parent_events():
        m.feed(PARENT, ev, ev.seq)
    text = prometheus_text(
        m, {"restarts": 2, "poisoned": 1, "sink_dropped": 3}, {"live": 1, "passivated": 2}
    )
    for line in text.splitlines():
        assert line.startswith("# ") or SAMPLE.match(line), line
    assert _sample(text, "vertebra_session_restarts_total") == 2
    assert _sample(text, "vertebra_sessions_poisoned_total") == 1
    assert _sample(text, "vertebra_sink_dropped_total") == 3
    assert _sample(text, 'vertebra_sessions{state="passivated"}') == 2
    assert _sample(text, 'vertebra_tokens_total{type="cache_read"}') == 8
    buckets = [
        float(x)
        for x in re.findall(
            r'^vertebra_turn_duration_seconds_bucket\{le="[^"]+"\} (\S+)$', text, re.M
        )
    ]
    assert buckets == sorted(buckets) and buckets[-1] == 4
    assert _sample(text, "vertebra_turn_duration_seconds_count") == 4


def test_log_metrics_follow_the_log_incrementally(tmp_path: pathlib.Path) -> None:
    """A second update folds only what was appended since the first."""
    log = open_log(LogSpec.sqlite(str(tmp_path / "spine.db")))
    try:
        events = parent_events()
        log.append(
            PARENT,
            [
                e.__class__(kind=e.kind, turn=e.turn, usage=e.usage, stop_reason=e.stop_reason)
                for e in events[:17]
            ],
        )
        lm = LogMetrics()
        assert lm.update(log).turns["completed"] == 1
        log.append(
            "other",
            [
                e.__class__(kind=e.kind, turn=e.turn, usage=e.usage, stop_reason=e.stop_reason)
                for e in events[:17]
            ],
        )
        folder = lm.update(log)
        assert folder.turns["completed"] == 2 and folder.events == 34
        assert folder.tokens["input"] == 120
    finally:
        log.close()


def test_vertebra_stats_reads_the_log_without_a_daemon(tmp_path: pathlib.Path) -> None:
    """`vertebra stats` prints the text format from the spine alone and says there is no
    daemon; `--json` gives the same figures as an object."""
    data = tmp_path / "data"
    data.mkdir()
    log = open_log(LogSpec.sqlite(str(data / "spine.db")))
    try:
        log.append(
            PARENT,
            [
                e.__class__(kind=e.kind, turn=e.turn, usage=e.usage, stop_reason=e.stop_reason)
                for e in parent_events()
            ],
        )
    finally:
        log.close()
    out = run(data, "stats")
    assert out.returncode == 0, out.stderr
    assert _sample(out.stdout, 'vertebra_turns_total{outcome="cancelled"}') == 1
    assert "no daemon runs" in out.stderr
    js = run(data, "stats", "--json")
    figures = json.loads(js.stdout)
    assert figures["tokens"]["input"] == 67 and figures["turns"]["error"] == 1
    assert "runner" not in figures


def test_get_metrics_serves_the_daemons_figures_to_the_admin_token(tmp_path: pathlib.Path) -> None:
    """The gateway's /metrics answers the Prometheus text with live sessions and tokens
    after a turn; a scoped token gets 403 and no token 401."""
    with running_gateway(tmp_path / "data") as gw, client(gw) as http:
        assert http.post("/v1/sessions", json={"id": "s-1"}).status_code == 201
        assert http.post("/v1/sessions/s-1/messages", json={"text": "hello"}).status_code == 201

        def scraped() -> str | None:
            resp = http.get("/metrics")
            assert resp.status_code == 200, resp.text
            assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")
            text = resp.text
            done = _sample(text, 'vertebra_turns_total{outcome="completed"}') >= 1
            return text if done else None

        text = wait_for(scraped, 30)
        assert _sample(text, 'vertebra_sessions{state="live"}') >= 1
        assert _sample(text, 'vertebra_tokens_total{type="output"}') > 0
        assert _sample(text, "vertebra_session_restarts_total") == 0
        assert httpx.get(f"{gw.url}/metrics").status_code == 401
        scoped = create_token(gw.host.data_dir, ["s-1"])
        with client(gw, scoped) as other:
            assert other.get("/metrics").status_code == 403


def test_serve_with_json_logs_prints_one_object_per_line(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """`serve --log-format json` prints every line as a JSON object, events with their
    session, seq and kind; in the data directory's log, JSON at the configured level, every
    record a session process wrote names its session, incarnation and seq (a second
    incarnation after a SIGKILL too), Thespian's own records are there, and `vertebra
    stats` against the daemon shows the append latency and queue depths."""
    import os
    import signal
    import subprocess

    from cli_support import CLI, env

    data = tmp_path / "data"
    log_file = data / "vertebra.log"

    def logged() -> list[dict[str, object]]:
        return (
            [json.loads(x) for x in log_file.read_text().splitlines()] if log_file.exists() else []
        )

    def serving(incarnation: int) -> dict[str, object] | None:
        want = f"incarnation {incarnation} serving"
        return next(
            (
                x
                for x in logged()
                if x["logger"] == "vertebra.session" and want in str(x["message"])
            ),
            None,
        )

    daemon = subprocess.Popen(
        [*CLI, "--data", str(data), "serve", "--log-format", "json", "--log-level", "info"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )
    try:
        wait_for(lambda: (data / "daemon.json").exists() or daemon.poll() is not None, 30)
        assert daemon.poll() is None, daemon.stderr.read() if daemon.stderr else ""
        info = json.loads(wait_for(lambda: (data / "daemon.json").read_text() or None, 10))
        no_leftover_processes.append(info["system_session"])
        out = run(data, "send", "chat-1", "hello logs", "--create")
        assert out.returncode == 0, out.stderr
        first = wait_for(lambda: serving(1), 20)
        os.kill(int(first["pid"]), signal.SIGKILL)  # type: ignore[call-overload]
        out = run(data, "send", "chat-1", '!tool calculator {"expression": "1+1"}')
        assert out.returncode == 0, out.stderr
        second = wait_for(lambda: serving(2), 20)
        stats = run(data, "stats")
        assert stats.returncode == 0, stats.stderr
        fams = parsed(stats.stdout)
        assert _histogram(fams, "vertebra_spine_append_duration_seconds")[-1] >= 4
        assert {lab["queue"] for _, lab, _ in fams["vertebra_ingress_depth:gauge"]} == {
            "pending",
            "in_flight",
            "queued",
        }
        assert "vertebra_sink_queue_depth:gauge" in fams
        figures = json.loads(run(data, "stats", "--json").stdout)
        assert figures["spine_append"]["count"] >= 4 and figures["runner"]["restarts"] == 1
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            stdout, _ = daemon.communicate(timeout=30)
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait(10)
    assert daemon.returncode == 0
    lines = [json.loads(x) for x in stdout.splitlines()]
    assert {x["logger"] for x in lines} == {"vertebra.daemon", "vertebra.events"}
    events = [x for x in lines if x["logger"] == "vertebra.events"]
    # The printed events are the sink's live view: in order, though a stop may cut it short.
    seqs = [x["seq"] for x in events]
    assert seqs and seqs == sorted(set(seqs))
    assert {x["session"] for x in events} == {"chat-1"}
    assert all(isinstance(x["kind"], str) and x["kind"] for x in events)
    rows = logged()
    assert rows and all({"time", "level", "logger", "pid", "message"} <= set(x) for x in rows)
    assert all(x["level"] != "DEBUG" for x in rows)
    # Thespian's own log, routed into ours at the configured level.
    assert any(x["logger"] == "thespian" and x["level"] == "INFO" for x in rows)
    for incarnation, start in ((1, first), (2, second)):
        mine = [x for x in rows if x["pid"] == start["pid"]]
        # A spare process (started ahead of need) logs its standby before it has a
        # session; from its first record as the session on, every record names it.
        at = next(i for i, x in enumerate(mine) if "session" in x)
        assert all("session" not in x and x["logger"] != "vertebra.session" for x in mine[:at])
        own = mine[at:]
        assert own and all(
            x["session"] == "chat-1"
            and x["incarnation"] == incarnation
            and isinstance(x["seq"], int)
            for x in own
        ), own
    assert second["seq"] >= 3
    # The second incarnation stopped when the daemon did, after its own appends.
    later = [x for x in rows if x["pid"] == second["pid"] and "kind" in x]
    assert all(isinstance(x["kind"], str) for x in later)
    bad = run(data, "serve", "--log-level", "chatty")
    assert bad.returncode == 2 and "--log-level" in bad.stderr


def test_thespians_own_log_reaches_ours_only_at_the_configured_level(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thespian's internal log calls land in the data directory's log as logger
    ``thespian`` when at or above the configured level, with the process's context."""
    import logging

    from thespian.system.utilis import thesplog

    from actors._runtime.logformat import FORMAT_ENV, LEVEL_ENV, set_context
    from actors._runtime.system import route_thespian_log

    monkeypatch.setenv(FORMAT_ENV, "json")
    monkeypatch.setenv(LEVEL_ENV, "WARNING")
    route_thespian_log(str(tmp_path))
    set_context(session="ctx-1", incarnation=3)
    try:
        thesplog("quiet %s", "detail", level=logging.INFO)
        thesplog("loud %s", "detail", level=logging.WARNING)
    finally:
        from actors._runtime import logformat

        logformat._context.clear()
    rows = [json.loads(x) for x in (tmp_path / "vertebra.log").read_text().splitlines()]
    assert [(x["logger"], x["level"], x["message"]) for x in rows] == [
        ("thespian", "WARNING", "loud detail")
    ]
    assert (rows[0]["session"], rows[0]["incarnation"]) == ("ctx-1", 3)


def test_the_append_histogram_gathers_in_one_process_and_merges_in_another() -> None:
    """Observations fall in the first bucket whose bound they do not exceed; a taken delta
    starts over, and merged deltas add up to every observation."""
    from actors._runtime.histogram import Histogram

    h = Histogram((0.001, 0.01))
    for v in (0.0005, 0.001, 0.002, 5.0):
        h.observe(v)
    assert (h.counts, h.count, h.cumulative()) == ([2, 1, 1], 4, [2, 3, 4])
    counts, total = h.take()
    assert counts == (2, 1, 1) and total == pytest.approx(5.0035)
    assert h.count == 0 and h.sum == 0.0
    runner = Histogram((0.001, 0.01))
    runner.add(counts, total)
    runner.add((0, 1, 0), 0.005)
    runner.add((1, 1), 9.0)  # another bucket layout: ignored, not mixed in
    assert runner.counts == [2, 2, 1] and runner.sum == pytest.approx(5.0085)


def test_the_registry_reports_ingress_per_session_by_queue() -> None:
    """Requests waiting for a process are ``pending``, keyed ingress forwarded and not yet
    committed is ``in_flight``, stored messages the session reports waiting are ``queued``;
    sessions with none are left out and the totals add up."""
    from actors import messages as m
    from actors.runner.rules.registry import Registry
    from actors.session.protocol import Appended, SessionReady

    r = Registry()
    r.load("a", 3)  # stored, no process: passivated
    r.load("b", 3)
    send = m.SendMessage(request_id="r1", session_id="a", text="hi", key="k1")
    r.route("a", send, "client", 0.0)  # brings it back: waits for the process
    assert r.queues() == {"a": (1, 0, 0)}
    inc = r.entries["a"].incarnation
    r.bind("a", inc, "addr-a")
    r.session_ready(SessionReady(session_id="a", incarnation=inc, last_seq=3), 0.0)
    assert r.queues() == {"a": (0, 1, 0)}
    r.appended(Appended(session_id="a", incarnation=inc, keys=("k1",), queued=2), 0.0)
    assert r.queues() == {"a": (0, 0, 2)}
    stats = r.stats()
    assert (stats["ingress_pending"], stats["ingress_in_flight"], stats["ingress_queued"]) == (
        0,
        0,
        2,
    )


def test_get_metrics_shows_ingress_queued_behind_a_turn_and_the_append_latency(
    tmp_path: pathlib.Path,
) -> None:
    """While a slow turn runs, two more messages wait: /metrics (parsed by Prometheus' own
    parser) shows them queued for that session, a depth for the gateway's sink, and a spine
    append histogram whose count covers every turn's appends."""
    with running_gateway(tmp_path / "data") as gw, client(gw) as http:
        assert http.post("/v1/sessions", json={"id": "q-1"}).status_code == 201
        slow = "!slow 0.3 " + " ".join(f"w{i}" for i in range(40))
        assert http.post("/v1/sessions/q-1/messages", json={"text": slow}).status_code == 201
        for text in ("next", "and next"):
            assert http.post("/v1/sessions/q-1/messages", json={"text": text}).status_code == 201

        def queued() -> dict[str, list[tuple[str, dict[str, str], float]]] | None:
            resp = http.get("/metrics")
            assert resp.status_code == 200, resp.text
            fams = parsed(resp.text)
            depth = {
                lab["queue"]: v
                for _, lab, v in fams["vertebra_session_ingress_depth:gauge"]
                if lab["session"] == "q-1"
            }
            return fams if depth.get("queued") == 2 else None

        fams = wait_for(queued, 30)
        totals = {lab["queue"]: v for _, lab, v in fams["vertebra_ingress_depth:gauge"]}
        assert totals["queued"] == 2
        sinks = fams["vertebra_sink_queue_depth:gauge"]
        assert sinks and all(v >= 0 for _, _, v in sinks)
        assert "vertebra_sink_pending_batches:gauge" in fams
        assert http.post("/v1/sessions/q-1/interrupt", json={}).status_code in (200, 202)

        def settled() -> dict[str, list[tuple[str, dict[str, str], float]]] | None:
            fams = parsed(http.get("/metrics").text)
            turns = sum(v for _, _, v in fams["vertebra_turns:counter"])
            depth = fams.get("vertebra_session_ingress_depth:gauge", [])
            return fams if turns >= 3 and not depth else None

        fams = wait_for(settled, 60)
        buckets = _histogram(fams, "vertebra_spine_append_duration_seconds")
        # Each turn appends at least its start and its end, separately.
        assert buckets[-1] >= 6
        total = next(
            v
            for n, _, v in fams["vertebra_spine_append_duration_seconds:histogram"]
            if n.endswith("_sum")
        )
        assert total > 0
        _histogram(fams, "vertebra_turn_duration_seconds")
