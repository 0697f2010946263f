"""The HTTP + SSE gateway and the live web page (the ``http`` extra).

`start_gateway` serves a daemon's sessions over HTTP on a thread of the calling
program; ``vertebra serve --http 127.0.0.1:8080`` does the same from the command line.
"""

from ._app import ROUTES, create_app
from ._gateway import Gateway
from ._limits import Limits
from ._routing import RouteSpec
from ._server import GatewayError, GatewayHandle, is_loopback, parse_bind, start_gateway
from ._tenants import Quotas
from ._tokens import Grant, TokenStore, admin_token, create_token

__all__ = [
    "ROUTES",
    "Gateway",
    "GatewayError",
    "GatewayHandle",
    "Grant",
    "Limits",
    "Quotas",
    "RouteSpec",
    "TokenStore",
    "admin_token",
    "create_app",
    "create_token",
    "is_loopback",
    "parse_bind",
    "start_gateway",
]
