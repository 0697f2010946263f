"""Governance: the gate as a table, the session's decisions about actions and approvals as
tables, and the egress guard against addresses and a real HTTP server on loopback."""

from __future__ import annotations

import http.server
import ipaddress
import json
import threading
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from actors.agents.egress import EgressRefused, classify, http_get, resolve, verdict
from actors.agents.governance import (
    Fault,
    Policy,
    PolicyError,
    Requirement,
    Spent,
    Verdict,
    gate,
)
from actors.agents.tools import HTTP_GET, ToolContext
from actors.session.rules import commands as c
from actors.testing import SessionKit
from projections import project
from spine import Kind

# -- the gate ----------------------------------------------------------------------------

NET = Requirement(capabilities=frozenset({"net"}))
ELEVATED = Requirement(trust="elevated")
APPROVE = Requirement(approval=True)
NONE = Requirement()


@pytest.mark.parametrize(
    ("md", "action", "need", "spent", "want"),
    [
        ({}, "model", NONE, Spent(), (Verdict.ADMIT, None)),
        ({}, "calculator", NONE, Spent(), (Verdict.ADMIT, None)),
        ({"governance.max_turns": "2"}, "model", NONE, Spent(turns=2), (Verdict.ADMIT, None)),
        (
            {"governance.max_turns": "2"},
            "model",
            NONE,
            Spent(turns=3),
            (Verdict.REJECT, Fault.BUDGET_EXCEEDED),
        ),
        (
            {"governance.max_tokens": "100"},
            "model",
            NONE,
            Spent(tokens=100),
            (Verdict.REJECT, Fault.BUDGET_EXCEEDED),
        ),
        ({"governance.max_tokens": "100"}, "model", NONE, Spent(tokens=99), (Verdict.ADMIT, None)),
        (
            {"governance.max_tool_calls": "1"},
            "calculator",
            NONE,
            Spent(tool_calls=1),
            (Verdict.REJECT, Fault.BUDGET_EXCEEDED),
        ),
        (
            {"governance.max_tool_calls": "1"},
            "model",
            NONE,
            Spent(tool_calls=5),
            (Verdict.ADMIT, None),
        ),
        ({"governance.capabilities": "net"}, "http_get", NET, Spent(), (Verdict.ADMIT, None)),
        (
            {"governance.capabilities": "clock"},
            "http_get",
            NET,
            Spent(),
            (Verdict.REJECT, Fault.CAPABILITY_DENIED),
        ),
        ({"governance.capabilities": ""}, "calculator", NONE, Spent(), (Verdict.ADMIT, None)),
        ({}, "shell", ELEVATED, Spent(), (Verdict.PENDING, None)),
        (
            {"governance.approvals": "off"},
            "shell",
            ELEVATED,
            Spent(),
            (Verdict.REJECT, Fault.TRUST_TOO_LOW),
        ),
        ({"governance.trust": "elevated"}, "shell", ELEVATED, Spent(), (Verdict.ADMIT, None)),
        ({}, "deploy", APPROVE, Spent(), (Verdict.PENDING, None)),
        (
            {"governance.approvals": "off"},
            "deploy",
            APPROVE,
            Spent(),
            (Verdict.REJECT, Fault.NEEDS_APPROVAL),
        ),
        (
            {"governance.max_cost": "1", "governance.price.input": "2"},
            "model",
            NONE,
            Spent(input_tokens=500_000),
            (Verdict.REJECT, Fault.BUDGET_EXCEEDED),
        ),
        (
            {"governance.max_cost": "1", "governance.price.input": "2"},
            "calculator",
            NONE,
            Spent(input_tokens=499_999),
            (Verdict.ADMIT, None),
        ),
        (
            {"governance.max_cost": "0"},
            "model",
            NONE,
            Spent(input_tokens=10**9),
            (Verdict.ADMIT, None),
        ),
        (
            {"governance.trust": "sandboxed", "governance.approvals": "off"},
            "http_get",
            Requirement(trust="standard"),
            Spent(),
            (Verdict.REJECT, Fault.TRUST_TOO_LOW),
        ),
    ],
)
def test_the_gate_decides_from_trust_capabilities_budgets_and_approvals(
    md: dict[str, str], action: str, need: Requirement, spent: Spent, want: Any
) -> None:
    """Budgets first, then capabilities, then trust and approval."""
    assert gate(Policy.from_metadata(md), action, need, spent) == want


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("governance.trust", "root"),
        ("governance.approvals", "maybe"),
        ("governance.max_tokens", "-1"),
        ("governance.max_tool_calls", "many"),
        ("governance.max_cost", "cheap"),
        ("governance.price.output", "-3"),
    ],
)
def test_a_bad_policy_value_is_named(key: str, value: str) -> None:
    """A governance value that does not parse names its key."""
    with pytest.raises(PolicyError, match=key):
        Policy.from_metadata({key: value})


# -- the session's decisions -------------------------------------------------------------


def _turn(kit: SessionKit, md: dict[str, str] | None = None) -> None:
    if md:
        kit.set_metadata(md)
    kit.send("go")


def _govern(kit: SessionKit, action: str, use_id: str, need: Requirement = NONE) -> Any:
    turn = kit.state.running.turn  # type: ignore[union-attr]
    return kit.run(c.Govern(turn=turn, action=action, tool_use_id=use_id, input="{}", need=need))


def test_an_admitted_action_is_recorded_with_a_call_id_from_the_stream() -> None:
    """Given a running turn, when the worker asks about a tool, then action.admitted is
    stored with call = its own seq, with the call's intent (action.started, its
    idempotency key) in the same append, and the worker gets admit with that call and key."""
    kit = SessionKit()
    _turn(kit)
    out = _govern(kit, "calculator", "t1")
    ev, intent = out.events
    assert (ev.kind, ev.action, ev.call, ev.trust) == (
        Kind.ACTION_ADMITTED,
        "calculator",
        ev.seq,
        "standard",
    )
    key = f"s1/1/{ev.seq}"
    assert (intent.kind, intent.call, intent.extra["idempotencyKey"]) == (
        Kind.ACTION_STARTED,
        ev.seq,
        key,
    )
    (ans,) = out.effects
    assert isinstance(ans, c.AnswerWorker) and (ans.verdict, ans.call) == ("admit", ev.seq)
    assert ans.key == key


@pytest.mark.parametrize(
    ("md", "need", "fault"),
    [
        ({"governance.capabilities": "clock"}, NET, "capability_denied"),
        ({"governance.max_tool_calls": "0"}, NONE, "budget_exceeded"),
        ({"governance.approvals": "off"}, APPROVE, "needs_approval"),
        ({"governance.approvals": "off"}, ELEVATED, "trust_too_low"),
    ],
)
def test_each_refusal_is_stored_with_its_fault_and_answered(
    md: dict[str, str], need: Requirement, fault: str
) -> None:
    """Every rejection path: action.rejected with the fault; the worker hears reject."""
    kit = SessionKit()
    _turn(kit, md)
    out = _govern(kit, "tool", "t1", need)
    (ev,) = out.events
    assert (ev.kind, ev.fault) == (Kind.ACTION_REJECTED, fault)
    assert out.effects[0].verdict == "reject" and out.effects[0].fault == fault


def test_a_bad_policy_admits_nothing() -> None:
    """An unreadable governance value rejects the action and names the problem."""
    kit = SessionKit()
    kit.send("go")
    kit.run(c.Progress(turn=1))  # the turn runs
    kit.set_metadata({"governance.trust": "root"})
    out = _govern(kit, "calculator", "t1")
    (ev,) = out.events
    assert ev.kind == Kind.ACTION_REJECTED and "governance.trust" in ev.error


def test_a_second_tool_call_over_budget_is_rejected_mid_turn() -> None:
    """max_tool_calls = 1: the first call is admitted, the second of the turn rejected."""
    kit = SessionKit()
    _turn(kit, {"governance.max_tool_calls": "1"})
    assert _govern(kit, "calculator", "a").events[0].kind == Kind.ACTION_ADMITTED
    ev = _govern(kit, "calculator", "b").events[0]
    assert (ev.kind, ev.fault) == (Kind.ACTION_REJECTED, "budget_exceeded")


FETCH = Requirement(trust="standard", capabilities=frozenset({"net"}), egress="url")


@pytest.mark.parametrize(
    ("trust", "url", "resolved", "allow", "want"),
    [
        # A sandboxed fetch would wait for a human: a refused destination is refused first.
        ("sandboxed", "http://169.254.169.254/latest/meta-data/", None, "", "metadata"),
        ("sandboxed", "http://127.0.0.1:9/", None, "", "loopback"),
        ("sandboxed", "http://[::1]/", None, "", "loopback"),
        ("sandboxed", "http://intranet.example/", ("10.0.0.7",), "", "private"),
        ("sandboxed", "http://nowhere.example/", (), "", "dns_failure"),
        ("standard", "http://169.254.169.254/", None, "", "metadata"),
        # Allowed destinations go on to trust and approvals as before.
        ("sandboxed", "http://127.0.0.1:9/", None, "127.0.0.1", "pending"),
        ("sandboxed", "http://example.com/", ("93.184.216.34",), "", "pending"),
        ("standard", "http://example.com/", ("93.184.216.34",), "", "admitted"),
        # A name nobody looked up is left to the tool's own guard when it dials.
        ("sandboxed", "http://example.com/", None, "", "pending"),
        # No URL to check: the tool refuses the call itself.
        ("sandboxed", "ftp://169.254.169.254/", None, "", "pending"),
    ],
)
def test_the_gate_refuses_what_the_egress_guard_would_before_asking_anyone(
    trust: str, url: str, resolved: tuple[str, ...] | None, allow: str, want: str
) -> None:
    """A fetch whose destination the guard refuses is rejected (fault egress_refused, the
    guard's net.egress decision stored) without an action.pending; others are unchanged."""
    kit = SessionKit()
    _turn(kit, {"governance.trust": trust, "governance.egress_allow": allow})
    turn = kit.state.running.turn  # type: ignore[union-attr]
    args = json.dumps({"url": url})
    cmd = c.Govern(
        turn=turn, action="http_get", tool_use_id="f1", input=args, need=FETCH, resolved=resolved
    )
    out = kit.run(cmd)
    if want == "pending":
        assert out.kinds == ["action.pending"] and not out.effects
        return
    if want == "admitted":
        assert out.kinds == ["action.admitted", "action.started"]
        assert out.effects[0].verdict == "admit"
        return
    assert out.kinds == ["action.rejected", "net.egress"]
    rej, dial = out.events
    assert (rej.fault, rej.call) == ("egress_refused", rej.seq)
    assert f"refused: {want}" in rej.error
    assert (dial.allowed, dial.reason) == (False, want)
    (ans,) = out.effects
    assert (ans.verdict, ans.fault) == ("reject", "egress_refused")
    p = project(kit.events)
    assert (p.pending, p.egress_blocked, p.rejected) == ((), 1, 1)


def _pending(kit: SessionKit) -> int:
    out = _govern(kit, "deploy", "d1", APPROVE)
    (ev,) = out.events
    assert ev.kind == Kind.ACTION_PENDING and not out.effects
    return int(ev.call)


def test_an_approval_admits_a_waiting_action_once() -> None:
    """Pending, then approved: action.approval and action.admitted are stored, the worker
    hears admit; approving again is a duplicate that stores nothing."""
    kit = SessionKit()
    _turn(kit)
    call = _pending(kit)
    out = kit.run(c.Decide(request_id="r1", key="k1", call=call, approve=True, note="ok"))
    assert [e.kind for e in out.events] == [
        Kind.ACTION_APPROVAL,
        Kind.ACTION_ADMITTED,
        Kind.ACTION_STARTED,
    ]
    assert out.events[0].allowed and out.events[0].reason == "ok"
    assert out.effects[0].verdict == "admit" and out.effects[0].call == call
    again = kit.run(c.Decide(request_id="r2", key="k2", call=call, approve=True))
    assert again.reply.duplicate and not again.events and not again.effects


def test_a_rejection_refuses_the_waiting_action() -> None:
    """Rejected: action.rejected with fault approval_rejected; approving it later is an error."""
    kit = SessionKit()
    _turn(kit)
    call = _pending(kit)
    out = kit.run(c.Decide(request_id="r1", key="k1", call=call, approve=False, note="no"))
    assert out.events[-1].kind == Kind.ACTION_REJECTED
    assert out.events[-1].fault == "approval_rejected"
    late = kit.run(c.Decide(request_id="r2", key="k2", call=call, approve=True))
    assert late.error == "InvalidRequest" and "already rejected" in late.reply.message


def test_deciding_an_unknown_call_is_a_clear_error() -> None:
    """No action waits under that call: InvalidRequest naming it."""
    kit = SessionKit()
    out = kit.run(c.Decide(request_id="r1", key="k1", call=99, approve=True))
    assert out.error == "InvalidRequest" and "no action 99" in out.reply.message


def test_a_restart_keeps_a_waiting_turn_open_and_an_approval_resumes_it() -> None:
    """After a crash, a turn waiting for an approval is not closed; the approval stores
    its decision and starts the turn again in resume mode, and the resumed worker's
    question about the same call is answered from the stream without a second admission
    (only the call's intent is stored: the approval is used once)."""
    kit = SessionKit()
    _turn(kit)
    kit.run(c.Progress(turn=1, events=()))
    call = _pending(kit)
    out = kit.restart()
    assert Kind.TURN_CANCELLED not in out.kinds
    assert kit.state.stored.open_turn is not None
    out = kit.run(c.Decide(request_id="r1", key="k1", call=call, approve=True))
    (start,) = [e for e in out.effects if isinstance(e, c.StartTurn)]
    assert start.input.resume and start.turn == 1
    asked = _govern(kit, "deploy", "d1", APPROVE)
    assert asked.kinds == [Kind.ACTION_STARTED] and asked.events[0].call == call
    assert asked.effects[0].verdict == "admit"
    again = _govern(kit, "deploy", "d1", APPROVE)
    assert not again.events and again.effects[0].verdict == "reject"


def test_an_interrupt_ends_a_waiting_turn_and_withdraws_its_actions() -> None:
    """Interrupting a turn that waits: the pending action is rejected (cancelled), the turn
    cancelled; after a restart too."""
    for restart in (False, True):
        kit = SessionKit()
        _turn(kit)
        call = _pending(kit)
        if restart:
            kit.restart()
        out = kit.interrupt()
        kinds = [(e.kind, e.call, e.fault) for e in out.events if e.kind == Kind.ACTION_REJECTED]
        assert kinds == [(Kind.ACTION_REJECTED, call, "cancelled")]
        assert Kind.TURN_CANCELLED in out.kinds
        assert not kit.state.stored.pending_actions


def test_the_projection_lists_pending_actions_and_counts_like_the_seed() -> None:
    """pending is additive; admitted/completed/rejected and the ledger follow the seed."""
    kit = SessionKit()
    _turn(kit, {"governance.capabilities": "clock"})
    _govern(kit, "clock", "c1")
    _govern(kit, "http_get", "h1", NET)
    call = _pending(kit)
    p = project(kit.events)
    assert [x.call for x in p.pending] == [call]
    # The turn's first model call was admitted as the turn started.
    assert (p.admitted, p.rejected) == (2, 1)
    kit.run(c.Decide(request_id="r", key="k", call=call, approve=True))
    p = project(kit.events)
    assert p.pending == () and p.admitted == 3
    assert [(a.action, str(a.state), a.fault) for a in p.actions][1:] == [
        ("clock", "running", ""),
        ("http_get", "blocked", "capability_denied"),
        ("deploy", "running", ""),
    ]


# -- the egress guard --------------------------------------------------------------------


def _ip(text: str) -> Any:
    return ipaddress.ip_address(text)


ADDRESSES = [
    ("8.8.8.8", "public"),
    ("1.1.1.1", "public"),
    ("93.184.216.34", "public"),
    ("2606:4700:4700::1111", "public"),
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("::1", "loopback"),
    ("10.0.0.1", "private"),
    ("172.16.5.4", "private"),
    ("192.168.1.1", "private"),
    ("fd12:3456::1", "private"),
    ("169.254.1.1", "link_local"),
    ("fe80::1", "link_local"),
    ("169.254.169.254", "metadata"),
    ("169.254.170.2", "metadata"),
    ("100.100.100.200", "metadata"),
    ("fd00:ec2::254", "metadata"),
    ("0.0.0.0", "unspecified"),
    ("::", "unspecified"),
    ("224.0.0.1", "multicast"),
    ("ff02::1", "multicast"),
    ("100.64.0.1", "shared"),
    ("100.127.255.254", "shared"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "reserved"),
    ("192.0.2.10", "private"),
    ("198.18.0.1", "private"),
    ("::ffff:127.0.0.1", "loopback"),
    ("::ffff:10.1.2.3", "private"),
    ("::ffff:169.254.169.254", "metadata"),
    ("::ffff:8.8.8.8", "public"),
    ("64:ff9b::7f00:1", "loopback"),
    ("2002:7f00:1::", "loopback"),
    ("2002:a00:1::", "private"),
    ("2001:db8::1", "private"),
]


@pytest.mark.parametrize(("text", "reason"), ADDRESSES)
def test_each_address_gets_its_verdict(text: str, reason: str) -> None:
    """Every address class the guard refuses, and public ones it lets through."""
    assert classify(_ip(text)) == reason
    d = verdict("h", [_ip(text)])
    assert d.allowed == (reason == "public") and d.reason == reason


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("2130706433", "loopback"),  # decimal
        ("0177.0.0.1", "loopback"),  # octal
        ("0x7f.0.0.1", "loopback"),  # hex
        ("0x7f000001", "loopback"),
        ("127.1", "loopback"),  # short form
        ("017700000001", "loopback"),
        ("0xa9.0xfe.0xa9.0xfe", "metadata"),
        ("2852039166", "metadata"),
        ("0", "unspecified"),
        ("localhost", "loopback"),
        ("[::1]".strip("[]"), "loopback"),
    ],
)
def test_spellings_of_an_address_resolve_to_it_and_are_refused(name: str, reason: str) -> None:
    """Decimal, octal, hex and short IPv4 forms and names are checked as they resolve."""
    d = verdict(name, resolve(name, 80))
    assert not d.allowed and d.reason == reason


def test_a_name_with_one_private_address_among_public_ones_is_refused() -> None:
    """Every resolved address must pass; the decision names the refused one."""
    d = verdict("mixed.example", [_ip("93.184.216.34"), _ip("10.0.0.7")])
    assert (d.allowed, d.host, d.reason) == (False, "10.0.0.7", "private")


def test_the_allowlist_admits_cidrs_and_names() -> None:
    """governance.egress_allow takes CIDRs and host names."""
    assert verdict("db", [_ip("10.0.0.7")], ["10.0.0.0/8"]).reason == "allowlisted"
    assert verdict("db.internal", [_ip("10.0.0.7")], ["db.internal"]).allowed
    assert not verdict("other", [_ip("10.0.0.7")], ["db.internal", "10.1.0.0/16"]).allowed


def test_a_name_that_does_not_resolve_is_refused() -> None:
    """No address, no connection: reason dns_failure."""
    assert verdict("nowhere.invalid", resolve("nowhere.invalid", 80)).reason == "dns_failure"


class _Handler(http.server.BaseHTTPRequestHandler):
    redirect_to = ""

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.redirect_to and self.path == "/jump":
            self.send_response(302)
            self.send_header("location", self.redirect_to)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        body = b"hello from the test server"
        key = self.headers.get("idempotency-key")
        if key:
            body += f" (idempotency key {key})".encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def servers() -> Iterator[tuple[str, str]]:
    """A server on 127.0.0.1 and one on 127.0.0.2 that redirects /jump to the first."""
    a = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    handler_b = type("B", (_Handler,), {})
    b = http.server.ThreadingHTTPServer(("127.0.0.2", 0), handler_b)
    url_a = f"http://127.0.0.1:{a.server_address[1]}/"
    handler_b.redirect_to = url_a
    url_b = f"http://127.0.0.2:{b.server_address[1]}/jump"
    threads = [
        threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.02}) for s in (a, b)
    ]
    for t in threads:
        t.start()
    try:
        yield url_a, url_b
    finally:
        for s in (a, b):
            s.shutdown()
            s.server_close()


def test_http_get_refuses_loopback_by_default_and_reaches_it_when_allowlisted(
    servers: tuple[str, str],
) -> None:
    """The loopback server is refused (and the decision recorded), then reached when the
    allowlist names it."""
    url, _ = servers
    seen: list[Any] = []
    with pytest.raises(EgressRefused, match="loopback"):
        http_get(url, record=seen.append)
    assert [(d.host, d.allowed, d.reason) for d in seen] == [("127.0.0.1", False, "loopback")]
    seen.clear()
    body = http_get(url, allow=["127.0.0.1/32"], record=seen.append)
    assert body.startswith("HTTP 200") and "hello from the test server" in body
    assert [(d.allowed, d.reason) for d in seen] == [(True, "allowlisted")]


def test_http_get_sends_the_calls_idempotency_key(servers: tuple[str, str]) -> None:
    """The tool hands the call's key to the server it reaches (Idempotency-Key)."""
    url, _ = servers
    ctx = ToolContext(emit=lambda e: None, egress_allow=("127.0.0.1/32",), idempotency_key="s/1/7")
    assert "(idempotency key s/1/7)" in HTTP_GET.fn({"url": url}, ctx)
    bare = attrs.evolve(ctx, idempotency_key="")
    assert "idempotency key" not in HTTP_GET.fn({"url": url}, bare)


def test_a_redirect_from_an_allowed_host_to_loopback_is_refused(
    servers: tuple[str, str],
) -> None:
    """Every hop is checked again: 127.0.0.2 is allowed, its redirect to 127.0.0.1 is not."""
    _, jump = servers
    seen: list[Any] = []
    with pytest.raises(EgressRefused, match=r"127\.0\.0\.1.*loopback"):
        http_get(jump, allow=["127.0.0.2"], record=seen.append)
    assert [(d.host, d.allowed) for d in seen] == [("127.0.0.2", True), ("127.0.0.1", False)]


def test_only_http_urls_are_fetched() -> None:
    """file:, ftp: and host-less URLs are refused before any lookup."""
    for bad in ("file:///etc/passwd", "ftp://example.com/", "http:///nohost"):
        with pytest.raises(ValueError, match="only http and https"):
            http_get(bad)


def test_actions_in_flight_when_a_turn_is_cut_off_are_ended_with_a_fault() -> None:
    """An admitted action with no end gets action.completed with fault cancelled on an
    interrupt, and crash on a restart (the turn's model call); a tool call that started is
    in doubt instead (reason cancelled or crash), so the ledger never keeps a call running."""
    for restart in (False, True):
        kit = SessionKit()
        _turn(kit, {"governance.in_doubt": "fail"})
        call = _govern(kit, "calculator", "t1").events[0].call
        out = kit.restart() if restart else kit.interrupt()
        fault = "crash" if restart else "cancelled"
        ends = [(e.call, e.fault) for e in out.events if e.kind == Kind.ACTION_COMPLETED]
        assert ends and all(f == fault and c != call for c, f in ends)
        doubt = [(e.call, e.reason) for e in out.events if e.kind == Kind.ACTION_IN_DOUBT]
        assert doubt == [(call, fault)]
        p = project(kit.events)
        assert {str(a.state) for a in p.actions} == {"done", "in_doubt"}


def test_a_refused_destination_is_refused_after_capabilities_and_before_approval() -> None:
    """gate(): a missing capability is named first; otherwise a destination the egress
    guard refuses is refused where an approval would have been asked."""
    sandboxed = Policy(trust="sandboxed")
    spent = Spent()
    assert gate(sandboxed, "http_get", FETCH, spent) == (Verdict.PENDING, None)
    assert gate(sandboxed, "http_get", FETCH, spent, egress_refused=True) == (
        Verdict.REJECT,
        Fault.EGRESS_REFUSED,
    )
    no_net = Policy(trust="sandboxed", capabilities=frozenset())
    assert gate(no_net, "http_get", FETCH, spent, egress_refused=True) == (
        Verdict.REJECT,
        Fault.CAPABILITY_DENIED,
    )
