"""The telemetry route, daemon-wide and for the admin token only: ``GET /metrics``, the
Prometheus text of the log's figures, the Runner's counters and the sessions' states."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from ..otel._metrics import CONTENT_TYPE, prometheus_text, session_states
from ._gateway import Gateway, call


async def metrics(gw: Gateway, request: Request) -> Response:
    def collect() -> str:
        folder = gw.metrics.update(gw.log)
        states = session_states(gw.host.sessions())
        runtime = gw.host.runner_stats()
        return prometheus_text(folder, dict(runtime.counters), states, runtime=runtime)

    return Response(await call(collect), media_type=CONTENT_TYPE)
