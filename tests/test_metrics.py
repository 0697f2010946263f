"""Metrics: the log fold, the Prometheus text, `vertebra stats` and the gateway's
`GET /metrics` over a real daemon on loopback."""

from __future__ import annotations

import json
import pathlib
import re

import httpx
import pytest
from cli_support import run
from conftest import wait_for
from gateway_support import client, running_gateway
from test_projections_spans import PARENT, parent_events

from actors.gateway import create_token
from actors.otel import LogMetrics, prometheus_text
from projections import LATENCY_BUCKETS, MetricsFolder
from spine import LogSpec, open_log

pytestmark = pytest.mark.timeout(120)

# One sample line of the text format: a name, optional labels, a number.
SAMPLE = re.compile(r'^[a-z_:][a-z0-9_:]*(\{([a-z_]+="[^"\\]*",?)*\})? -?[0-9.e+]+$|^.*\+Inf.*$')


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
    session, seq and kind; the data directory's log, Thespian's records included, is JSON
    at the configured level."""
    import signal
    import subprocess

    from cli_support import CLI, env

    data = tmp_path / "data"
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
    logged = [json.loads(x) for x in (data / "vertebra.log").read_text().splitlines()]
    assert logged and all({"time", "level", "logger", "message"} <= set(x) for x in logged)
    assert any(x["level"] == "INFO" for x in logged)
    bad = run(data, "serve", "--log-level", "chatty")
    assert bad.returncode == 2 and "--log-level" in bad.stderr
