"""The authority table over real HTTP: each escalation a token scoped to one session could
make on a live daemon (send a secret to a listener of its own, make the daemon request an
address of its choosing, raise its own trust or budgets) is refused, naming the key, and
nothing of it is stored; the operator's path keeps working."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import wait_for
from fake_models import FakeModelServer
from gateway_support import client, running_gateway

from actors.agents import ModelFactory
from actors.agents.profiles import Profile
from actors.gateway import GatewayHandle, create_token

pytestmark = pytest.mark.timeout(120)

CANARY = "VERTEBRA_TEST_CANARY"
CANARY_VALUE = "canary-value-that-must-never-leave-the-daemon"


@pytest.fixture(scope="module")
def server() -> Iterator[FakeModelServer]:
    """A model server on loopback: the listener an attacker runs, and the operator's."""
    s = FakeModelServer()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module")
def stranger() -> Iterator[FakeModelServer]:
    """A listener on loopback the operator never allowed: another local service (a
    database's HTTP port, an admin API) that a session must not make the daemon call."""
    s = FakeModelServer()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module")
def gw(
    tmp_path_factory: pytest.TempPathFactory, server: FakeModelServer
) -> Iterator[GatewayHandle]:
    mp = pytest.MonkeyPatch()
    # The session processes inherit the daemon's environment: the canary is in it.
    mp.setenv(CANARY, CANARY_VALUE)
    profiles = {
        "local": Profile(
            name="local",
            provider="openai",
            base_url=f"{server.url}/v1",
            api_key_env=CANARY,
            models=("fake-1",),
            default_model="fake-1",
        )
    }
    data = tmp_path_factory.mktemp("authz") / "data"
    try:
        factory = ModelFactory(profiles=profiles, retries=0)
        # The operator lets sessions name the keyless server, and only it.
        allowed = [f"{server.url}/v1"]
        with running_gateway(data, factory=factory, model_servers=allowed) as g:
            yield g
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def admin(gw: GatewayHandle) -> Iterator[httpx.Client]:
    with client(gw) as c:
        yield c


def _scoped(gw: GatewayHandle, admin: httpx.Client, sid: str, **meta: str) -> httpx.Client:
    r = admin.post("/v1/sessions", json={"id": sid, "metadata": meta})
    assert r.status_code == 201, r.text
    return client(gw, create_token(gw.host.data_dir, [sid]))


def _metadata(admin: httpx.Client, sid: str) -> dict[str, str]:
    """The metadata the session's stored events hold."""
    out: dict[str, str] = {}
    for ev in admin.get(f"/v1/sessions/{sid}/history").json()["events"]:
        for k, v in (ev.get("properties") or {}).items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = v
    return out


def _refused(r: httpx.Response, key: str) -> None:
    assert r.status_code == 403, r.text
    body = r.json()
    assert body["error"] == "forbidden_key" and key in body["message"], body


def _slash(c: httpx.Client, sid: str, text: str) -> dict[str, Any]:
    r = c.post(f"/v1/sessions/{sid}/messages", json={"text": text})
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


def _canary_sent(server: FakeModelServer) -> bool:
    return any(CANARY_VALUE in repr(req["headers"]) for req in server.requests)


def test_a_scoped_token_cannot_send_a_secret_to_a_listener_of_its_own(
    gw: GatewayHandle, admin: httpx.Client, server: FakeModelServer
) -> None:
    """Naming the daemon's variable as the key and a listener as the server is refused in
    every spelling and on every surface; the turn that runs afterwards sends no key."""
    sid = "exfil-1"
    listener = f"{server.url}/v1"
    with _scoped(gw, admin, sid) as mine:
        attack = {
            "ore.model.provider": "openai",
            "ore.model.base_url": listener,
            "ore.model.api_key_env": CANARY,
            "ore.model.name": "m",
        }
        _refused(mine.patch(f"/v1/sessions/{sid}/metadata", json=attack), "ore.model.api_key_env")
        for key in ("ore.model.api_key_env", "model.api_key_env", "x.token_env"):
            _refused(mine.patch(f"/v1/sessions/{sid}/metadata", json={key: CANARY}), key)
        ack = _slash(mine, sid, f"/set ore.model.api_key_env {CANARY}")
        assert ack["consumed"] and ack["notices"][0]["severity"] == "error"
        assert "operator only" in ack["notices"][0]["text"]
        # A keyless server the operator allows stays the session's choice (a local
        # llama.cpp).
        keyless = {k: v for k, v in attack.items() if k != "ore.model.api_key_env"}
        assert mine.patch(f"/v1/sessions/{sid}/metadata", json=keyless).status_code == 200
        seen = len(server.requests)
        _slash(mine, sid, "hello")
        server.wait_requests(seen + 1, timeout=30)
    assert "ore.model.api_key_env" not in _metadata(admin, sid)
    assert not _canary_sent(server)


def test_a_key_the_operator_paired_goes_only_to_its_server(
    gw: GatewayHandle, admin: httpx.Client, server: FakeModelServer
) -> None:
    """Once the operator pairs a key with a server, the session may not move the server,
    change the wire format (another vendor's default server) or drop the URL."""
    sid = "paired-1"
    meta = {"ore.model.base_url": f"{server.url}/v1", "ore.model.api_key_env": CANARY}
    with _scoped(gw, admin, sid, **meta) as mine:
        path = f"/v1/sessions/{sid}/metadata"
        _refused(
            mine.patch(path, json={"ore.model.base_url": "http://127.0.0.2:9/v1"}),
            "ore.model.base_url",
        )
        _refused(mine.patch(path, json={"ore.model.provider": "anthropic"}), "ore.model.provider")
        _refused(mine.patch(path, json={"ore.model.base_url": None}), "ore.model.base_url")
        ack = _slash(mine, sid, "/provider openai http://127.0.0.2:9/v1 m")
        assert ack["notices"][0]["severity"] == "error", ack
    assert _metadata(admin, sid) == meta


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data",
        "http://10.255.255.1:8080/v1",
        "http://[fd00::1]/v1",
        "https://collector.example/v1",
    ],
)
def test_a_scoped_token_cannot_point_the_daemon_at_an_address_of_its_choosing(
    gw: GatewayHandle, admin: httpx.Client, url: str
) -> None:
    """A model server the session names must be one the operator allows: the cloud
    metadata address, private networks and outside hosts are refused on PATCH and in
    chat."""
    sid = f"ssrf-{abs(hash(url)) % 10**8}"
    with _scoped(gw, admin, sid) as mine:
        r = mine.patch(f"/v1/sessions/{sid}/metadata", json={"ore.model.base_url": url})
        _refused(r, "ore.model.base_url")
        ack = _slash(mine, sid, f"/provider openai {url} m")
        text = ack["notices"][0]["text"]
        assert ack["notices"][0]["severity"] == "error" and "operator allows" in text, ack
    assert "ore.model.base_url" not in _metadata(admin, sid)


def _turn_end(c: httpx.Client, sid: str, after: int) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        evs = c.get(f"/v1/sessions/{sid}/history", params={"after": after}).json()["events"]
        return next((e for e in evs if e["kind"] == "turn.completed"), None)

    return wait_for(ended, timeout=30)  # type: ignore[no-any-return]


def test_a_scoped_token_cannot_reach_a_loopback_port_the_operator_did_not_allow(
    gw: GatewayHandle, admin: httpx.Client, server: FakeModelServer, stranger: FakeModelServer
) -> None:
    """The attack: a session's token points its model at another listener on loopback.
    Refused on PATCH (403 naming the key), on create, in chat (``/provider``, ``/set``),
    in every spelling of the key; the session's turns still go to the allowed server,
    and the listener receives nothing."""
    sid = "loopback-1"
    url = f"{stranger.url}/v1"
    with _scoped(gw, admin, sid) as mine:
        path = f"/v1/sessions/{sid}/metadata"
        for key in ("ore.model.base_url", "model.base_url"):
            _refused(mine.patch(path, json={"ore.model.provider": "openai", key: url}), key)
        # Trailing slashes, upper case, another spelling of the address: not the server.
        for other in (f"{stranger.url}/v1/", f"{stranger.url.upper()}/v1", f"{server.url}/v2"):
            _refused(mine.patch(path, json={"ore.model.base_url": other}), "ore.model.base_url")
        for text in (f"/provider openai {url} m", f"/set ore.model.base_url {url}"):
            ack = _slash(mine, sid, text)
            assert ack["consumed"] and ack["notices"][0]["severity"] == "error", ack
            assert "ore.model.base_url" in ack["notices"][0]["text"], ack
        # Only a provider, no server: its vendor's API, which the operator did not list.
        _refused(mine.patch(path, json={"ore.model.provider": "anthropic"}), "ore.model.provider")
        ack = _slash(mine, sid, f"/provider openai {server.url}/v1 fake-1")
        assert ack["notices"][0]["severity"] == "success", ack
        seen = len(server.requests)
        ack = _slash(mine, sid, "hello")
        server.wait_requests(seen + 1, timeout=30)
    token = create_token(gw.host.data_dir, ["loopback-2"])
    with client(gw, token) as born:
        body = {"id": "loopback-2", "metadata": {"ore.model.base_url": url}}
        _refused(born.post("/v1/sessions", json=body), "ore.model.base_url")
    assert _metadata(admin, sid)["ore.model.base_url"] == f"{server.url}/v1"
    assert stranger.requests == []


def test_the_model_client_refuses_a_server_the_operator_did_not_allow(
    gw: GatewayHandle, admin: httpx.Client, stranger: FakeModelServer
) -> None:
    """Whoever wrote it (the operator's own metadata, a stream from before the allowance
    changed), a turn sends nothing to a server not allowed now: it stores a refused
    ``net.egress`` and fails naming the key."""
    sid = "stale-1"
    meta = {"ore.model.provider": "openai", "ore.model.base_url": f"{stranger.url}/v1"}
    meta["ore.model.name"] = "m"
    r = admin.post("/v1/sessions", json={"id": sid, "metadata": meta})
    assert r.status_code == 201, r.text
    ack = _slash(admin, sid, "hello")
    done = _turn_end(admin, sid, ack["seq"])
    assert "ore.model.base_url" in str(done) and "operator allows" in str(done), done
    evs = admin.get(f"/v1/sessions/{sid}/history", params={"after": ack["seq"]}).json()
    egress = [e for e in evs["events"] if e["kind"] == "net.egress"]
    # (``allowed`` false is the default, left out of the wire form.)
    assert egress and not egress[0].get("allowed") and egress[0]["host"] == "127.0.0.1", egress
    assert stranger.requests == []


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("governance.trust", "elevated"),
        ("governance.capabilities", "shell,net"),
        ("governance.max_turns", "1000000"),
        ("governance.max_cost", "1e9"),
        ("governance.approvals", "off"),
        ("governance.egress_allow", "0.0.0.0/0"),
        ("governance.price.input", "0"),
        ("goal.depth", "0"),
    ],
)
def test_a_scoped_token_cannot_raise_its_own_policy(
    gw: GatewayHandle, admin: httpx.Client, key: str, value: str
) -> None:
    """Trust, capabilities, budgets, approvals, egress and prices are the operator's: the
    scoped token's PATCH, create and slash command are refused and nothing is stored; the
    admin token sets the same key."""
    sid = f"self-{key.replace('.', '-')}"
    with _scoped(gw, admin, sid, **{"governance.trust": "standard"}) as mine:
        _refused(mine.patch(f"/v1/sessions/{sid}/metadata", json={key: value}), key)
        _refused(mine.patch(f"/v1/sessions/{sid}/metadata", json={key: None}), key)
        ack = _slash(mine, sid, f"/set {key} {value}")
        assert ack["consumed"] and ack["notices"][0]["severity"] == "error", ack
        assert key in ack["notices"][0]["text"]
    assert _metadata(admin, sid).get(key) == ("standard" if key == "governance.trust" else None)
    r = admin.patch(f"/v1/sessions/{sid}/metadata", json={key: value})
    assert r.status_code == 200, r.text
    assert _metadata(admin, sid)[key] == value


def test_a_scoped_token_cannot_create_its_session_with_operator_keys(
    gw: GatewayHandle, admin: httpx.Client
) -> None:
    """The metadata a scoped token creates its own session with is held to the table too."""
    token = create_token(gw.host.data_dir, ["born-1"])
    with client(gw, token) as mine:
        body = {"id": "born-1", "metadata": {"governance.trust": "elevated"}}
        _refused(mine.post("/v1/sessions", json=body), "governance.trust")
        assert admin.get("/v1/sessions/born-1").status_code == 404
        body = {"id": "born-1", "metadata": {"ore.model.temperature": "0.5"}}
        assert mine.post("/v1/sessions", json=body).status_code == 201


def test_a_session_uses_the_operators_profile_by_name(
    gw: GatewayHandle, admin: httpx.Client, server: FakeModelServer
) -> None:
    """``ore.model.profile`` picks the operator's server and key; a model the profile does
    not list fails the turn naming the ones it allows, and sends nothing."""
    sid = "profile-1"
    with _scoped(gw, admin, sid) as mine:
        path = f"/v1/sessions/{sid}/metadata"
        assert mine.patch(path, json={"ore.model.profile": "local"}).status_code == 200
        seen = len(server.requests)
        _slash(mine, sid, "hello")
        req = server.wait_requests(seen + 1, timeout=30)[-1]
        headers = {k.lower(): v for k, v in req["headers"].items()}
        assert headers.get("authorization") == f"Bearer {CANARY_VALUE}", headers
        assert req["body"]["model"] == "fake-1"
        assert mine.patch(path, json={"ore.model.name": "gpt-huge"}).status_code == 200
        ack = _slash(mine, sid, "again")

        def failed() -> dict[str, Any] | None:
            evs = mine.get(f"/v1/sessions/{sid}/history", params={"after": ack["seq"]}).json()
            return next((e for e in evs["events"] if e["kind"] == "turn.completed"), None)

        done = wait_for(failed, timeout=30)
        assert "does not allow model 'gpt-huge'" in str(done), done
        assert len(server.requests) == seen + 1


def test_the_profiles_file_is_checked_naming_the_field(tmp_path: pathlib.Path) -> None:
    from actors.agents.profiles import ProfileError, load_profiles, parse_profiles

    assert load_profiles(str(tmp_path / "none.toml")) == {}
    good = parse_profiles(
        '[profiles.a]\nprovider = "openai"\nbase_url = "http://127.0.0.1:1/v1/"\n'
        'api_key_env = "A_KEY"\nmodels = ["m"]\n'
    )
    assert good["a"].base_url == "http://127.0.0.1:1/v1" and good["a"].models == ("m",)
    for text, problem in (
        ('[profiles.a]\nprovider = "gemini"\n', "provider must be one of"),
        ('[profiles.a]\nprovider = "openai"\nurl = "x"\n', "unknown fields url"),
        (
            '[profiles.a]\nprovider = "openai"\napi_key_env = "sk-abcdefghijklmnopqrstuvwxyz012"\n',
            "looks like a key",
        ),
        (
            '[profiles.a]\nprovider = "openai"\nmodels = ["m"]\ndefault_model = "n"\n',
            "default_model",
        ),
        ("[other]\n", "unknown tables other"),
        ("not toml [", "not TOML"),
    ):
        with pytest.raises(ProfileError, match=problem):
            parse_profiles(text)
