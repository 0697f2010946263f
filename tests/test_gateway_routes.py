"""The gateway's routes are one explicit list that `create_app` builds the application from
(equal to the OpenAPI document), and a closed Host is recognised by its error class."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from gateway_support import client, running_gateway
from starlette.routing import Route

from actors.errors import ActorsError, HostClosed
from actors.gateway import ROUTES, GatewayHandle, RouteSpec, create_app
from actors.gateway._app import PAGES, openapi_bytes

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayHandle]:
    """One gateway over one daemon for the module."""
    with running_gateway(tmp_path_factory.mktemp("routes") / "data") as g:
        yield g


def _served(gw: GatewayHandle) -> list[tuple[str, str]]:
    app = create_app(gw.gateway)
    out = []
    for r in app.routes:
        assert isinstance(r, Route) and r.methods is not None
        out += [(m, r.path) for m in sorted(r.methods - {"HEAD"})]
    return out


def test_the_apps_routes_are_the_explicit_list_and_the_openapi_paths(gw: GatewayHandle) -> None:
    """create_app serves ROUTES in order, then the API description and the page; every
    documented (method, path) has a route and every route is documented."""
    assert isinstance(ROUTES, tuple) and all(isinstance(r, RouteSpec) for r in ROUTES)
    served = _served(gw)
    pages = [("GET", "/openapi.json"), *(("GET", p) for p in PAGES)]
    # The A2A door follows: the SDK's JSON-RPC endpoint and the agent card, described by
    # the card (the protocol's own description), not by openapi.json.
    doors = [("POST", "/a2a"), ("GET", "/.well-known/agent-card.json")]
    assert served == [(r.method, r.path) for r in ROUTES] + pages + doors
    served = served[: -len(doors)]
    spec = json.loads(openapi_bytes())
    documented = {
        (m.upper(), p) for p, ops in spec["paths"].items() for m in ops if m != "parameters"
    }
    assert set(served) == documented and len(served) == len(documented)


def test_building_the_app_again_leaves_the_route_list_as_it_was(gw: GatewayHandle) -> None:
    """No registry grows as a side effect: two applications serve the same routes."""
    before = tuple(ROUTES)
    assert _served(gw) == _served(gw)
    assert before == ROUTES


def test_a_closed_host_raises_host_closed_and_the_gateway_answers_503(gw: GatewayHandle) -> None:
    """After Host.close a call raises HostClosed (still an ActorsError, same message), and
    the gateway maps it by class to 503 unavailable."""
    gw.host.close()
    with pytest.raises(HostClosed, match=r"^the host is closed$") as info:
        gw.host.get("anyone")
    assert isinstance(info.value, ActorsError)
    with client(gw) as http:
        r = http.post("/v1/sessions", json={"id": "after-close"})
    assert r.status_code == 503, r.text
    assert r.json()["error"] == "unavailable" and "the host is closed" in r.text
