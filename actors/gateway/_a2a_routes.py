"""The A2A door's routes: the agent card (public, signed with the record key) at A2A's
well-known path, and the SDK's JSON-RPC endpoint at ``/a2a`` behind the bearer tokens."""

from __future__ import annotations

import functools
import os
from collections.abc import Awaitable, Callable
from typing import Any, cast

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from spine.seal import KeyStore

from .._version import __version__
from ._gateway import Gateway
from ._replies import HttpError, error_response
from ._routing import _grant
from ._tenants import retry_after

#: Where the JSON-RPC endpoint is, under the gateway's address.
RPC_PATH = "/a2a"
CARD_PATH = "/.well-known/agent-card.json"

try:
    from a2a.server.routes import DefaultServerCallContextBuilder, create_jsonrpc_routes
    from a2a.types import a2a_pb2 as pb
    from a2a.utils.signing import create_agent_card_signer
    from google.protobuf.json_format import MessageToDict

    from ._a2a import VertebraA2A

    INSTALLED = True
except ImportError:  # pragma: no cover - exercised only without the extra
    INSTALLED = False


def card(gw: Gateway, base: str) -> Any:
    """The agent card for a gateway reached at ``base``, signed (EdDSA, the record key)."""
    bearer = pb.SecurityScheme(
        http_auth_security_scheme=pb.HTTPAuthSecurityScheme(
            scheme="bearer", description="the gateway's admin token or a minted session token"
        )
    )
    requirement = pb.SecurityRequirement()
    requirement.schemes["bearer"].SetInParent()
    agent = pb.AgentCard(
        name="vertebra",
        description=(
            "Event-sourced agent sessions: each context is a durable session, each task a "
            "goal run served from the session's log (resumable with Last-Event-ID)."
        ),
        version=__version__,
        supported_interfaces=[
            pb.AgentInterface(
                url=base + RPC_PATH, protocol_binding="JSONRPC", protocol_version="1.0"
            )
        ],
        capabilities=pb.AgentCapabilities(streaming=True, push_notifications=False),
        security_schemes={"bearer": bearer},
        security_requirements=[requirement],
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            pb.AgentSkill(
                id="goal",
                name="goal run",
                description="Works toward the message as an objective until it converges "
                "or stalls; governed actions may ask for approval (input required).",
                tags=["goal", "durable"],
            )
        ],
    )
    key = KeyStore(os.path.join(gw.host.data_dir, "keys")).signing_key()
    signer = create_agent_card_signer(
        key.private_pem(), cast(Any, {"alg": "EdDSA", "kid": key.key_id, "typ": "JOSE"})
    )
    return signer(agent)


async def agent_card(gw: Gateway, request: Request) -> Response:
    base = str(request.base_url).rstrip("/")
    body = MessageToDict(card(gw, base))
    return JSONResponse(body, headers={"Cache-Control": "no-cache"})


class _Context(DefaultServerCallContextBuilder):
    """The SDK's call context plus the grant the route's token check found."""

    def build(self, request: Request) -> Any:
        ctx = super().build(request)
        ctx.state["grant"] = request.state.grant
        return ctx


def _guarded(
    gw: Gateway, endpoint: Callable[[Request], Awaitable[Response]]
) -> Callable[[Request], Awaitable[Response]]:
    @functools.wraps(endpoint)
    async def guarded(request: Request) -> Response:
        try:
            g = request.state.grant = _grant(gw, request)
            if g.tenant is not None and (wait := gw.tenants.take(g.tenant)) > 0:
                why = f"tenant {g.tenant!r} is over its request rate"
                raise HttpError(429, "rate_limited", why, {"Retry-After": retry_after(wait)})
        except HttpError as exc:
            return error_response(exc.status, exc.code, exc.message, exc.headers)
        return await endpoint(request)

    return guarded


def routes(gw: Gateway) -> list[Route]:
    """The door's routes, or none without the a2a extra."""
    if not INSTALLED:
        return []
    rpc = create_jsonrpc_routes(VertebraA2A(gw), rpc_url=RPC_PATH, context_builder=_Context())
    out = [Route(r.path, _guarded(gw, r.endpoint), methods=list(r.methods or ())) for r in rpc]
    out.append(Route(CARD_PATH, functools.partial(agent_card, gw), methods=["GET"]))
    return out
