"""The web page end to end in headless Chromium (the system's package) driven by Playwright."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import wait_for
from gateway_support import client, running_gateway

from actors.gateway import GatewayHandle

pytestmark = pytest.mark.timeout(120)

CHROMIUM = os.environ.get("VERTEBRA_CHROMIUM", "/usr/bin/chromium")
#: Screenshots land here (git-ignored); CI keeps the directory as the run's artifacts.
ARTIFACTS = pathlib.Path(
    os.environ.get(
        "VERTEBRA_TEST_ARTIFACTS", pathlib.Path(__file__).resolve().parent.parent / "test-artifacts"
    )
)
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

if not shutil.which(CHROMIUM):
    pytest.skip(f"no Chromium at {CHROMIUM} (.ci/run installs it)", allow_module_level=True)


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayHandle]:
    with running_gateway(tmp_path_factory.mktemp("web") / "data") as g:
        yield g


@pytest.fixture(scope="module")
def page(gw: GatewayHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One page in a fresh browser profile, opened at the address the daemon prints."""
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("profile")),
            executable_path=CHROMIUM,
            headless=True,
            args=ARGS,
        )
        try:
            ctx.set_default_timeout(20_000)
            pg = ctx.new_page()
            pg.goto(gw.page_url)
            yield pg
        finally:
            ctx.close()


def _shot(page: Any, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"browser-{name}.png"), full_page=True)


def _transcript(page: Any) -> list[tuple[str, str]]:
    return page.eval_on_selector_all(  # type: ignore[no-any-return]
        "#transcript > div", "els => els.map(e => [e.className, e.textContent])"
    )


def test_the_page_creates_a_session_and_streams_the_reply(page: Any, gw: GatewayHandle) -> None:
    """Create a session from the list, send a message, watch the reply stream in."""
    assert "token" not in page.url  # the token left the address bar
    page.fill("#new-id", "web-1")
    page.click("#create button")
    page.wait_for_selector("#session-list li.active[data-id='web-1']")
    page.wait_for_function("document.getElementById('conn').textContent === 'live'")
    page.fill("#input", "!slow 0.15 streaming words arrive one by one")
    page.press("#input", "Enter")
    page.wait_for_selector(".msg.user:has-text('streaming words')")
    # Part of the reply shows while the turn is still running.
    partial = page.wait_for_selector(".assistant.streaming:has-text('words')")
    assert partial.text_content() != "streaming words arrive one by one"
    _shot(page, "streaming")
    page.wait_for_selector(".assistant:not(.streaming):has-text('words arrive one by one')")
    page.wait_for_function("document.getElementById('usage').textContent.includes('turns')")
    _shot(page, "streamed")


def test_the_interrupt_button_cuts_a_slow_turn_off(page: Any, gw: GatewayHandle) -> None:
    """A slow turn shows its first words; Interrupt ends it as cancelled, keeping them."""
    page.fill("#input", "!slow 0.5 a b c d e f")
    page.press("#input", "Enter")
    page.wait_for_selector(".assistant.streaming:has-text('a')")
    page.click("#interrupt")
    cancelled = page.wait_for_selector(".assistant.cancelled")
    text = cancelled.text_content()
    assert text.endswith("[interrupted]") and "f" not in text.removesuffix("[interrupted]")
    with client(gw) as http:
        kinds = [e["kind"] for e in http.get("/v1/sessions/web-1/history").json()["events"]]
    assert kinds.count("turn.cancelled") == 1
    _shot(page, "interrupted")


def test_a_dropped_connection_resumes_without_loss_or_repeats(page: Any, gw: GatewayHandle) -> None:
    """Dropping the stream mid-turn reconnects from the last id: each message once."""
    page.fill("#input", "!slow 0.1 after the drop every word is here")
    page.press("#input", "Enter")
    page.wait_for_selector(".assistant.streaming:has-text('after')")
    page.evaluate("window.vertebraStream.drop()")
    page.wait_for_selector(".assistant:not(.streaming):has-text('the drop every word is here')")
    users = [t for c, t in _transcript(page) if "user" in c]
    assert users.count("!slow 0.1 after the drop every word is here") == 1


def test_tool_calls_show_and_the_session_list_switches_sessions(
    page: Any, gw: GatewayHandle
) -> None:
    """A tool call and its result appear; a second session starts empty and switching
    back shows the first one's transcript again."""
    page.fill("#input", '!tool search {"q": "event sourcing"}')
    page.press("#input", "Enter")
    page.wait_for_selector(".msg.tool:has-text('search')")
    page.wait_for_selector(".msg.tool:has-text('←')")
    with client(gw) as http:
        last = http.get("/v1/sessions/web-1").json()["last_seq"]
    page.wait_for_function(f"document.getElementById('transcript').dataset.lastSeq == '{last}'")
    first = _transcript(page)
    page.fill("#new-id", "web-2")
    page.click("#create button")
    page.wait_for_selector("#session-list li.active[data-id='web-2']")
    page.wait_for_function("document.getElementById('transcript').dataset.lastSeq == '1'")
    assert _transcript(page) == []
    page.click("#session-list li[data-id='web-1']")
    page.wait_for_function(f"document.getElementById('transcript').dataset.lastSeq == '{last}'")
    assert _transcript(page) == first
    _shot(page, "tools")


def test_a_reload_replays_the_same_transcript(page: Any, gw: GatewayHandle) -> None:
    """After a reload the page rebuilds the transcript from seq 0, identical to before."""
    with client(gw) as http:
        last = http.get("/v1/sessions/web-1").json()["last_seq"]
    page.wait_for_function(f"document.getElementById('transcript').dataset.lastSeq == '{last}'")
    before = _transcript(page)
    page.reload()
    page.wait_for_function(f"document.getElementById('transcript').dataset.lastSeq == '{last}'")
    after = _transcript(page)
    assert after == before and len(after) >= 6
    _shot(page, "reloaded")


def test_a_pending_action_shows_its_input_and_is_approved_in_the_transcript(
    page: Any, gw: GatewayHandle
) -> None:
    """The governance panel shows a waiting action with its input text (not
    ``[object Object]``) and Approve and Reject; Approve runs it, the panel empties and the
    transcript shows the request and the decision."""
    with client(gw) as http:
        meta = {"governance.trust": "sandboxed", "governance.egress_allow": "127.0.0.1"}
        assert (
            http.post("/v1/sessions", json={"id": "web-gov", "metadata": meta}).status_code == 201
        )
    page.reload()
    page.click("#session-list li[data-id='web-gov']")
    page.wait_for_selector("#session-list li.active[data-id='web-gov']")
    page.fill("#input", '!tool http_get {"url": "http://127.0.0.1:9/"}')
    page.press("#input", "Enter")
    prompt = page.wait_for_selector("#pending .pending:has-text('http_get')")
    text = prompt.text_content()
    assert '{"url":"http://127.0.0.1:9/"}' in text and "[object Object]" not in text
    asked = page.wait_for_selector(".note.approval:has-text('approval asked')")
    assert 'http_get {"url":"http://127.0.0.1:9/"}' in asked.text_content()
    _shot(page, "approval")
    page.click("#pending button.approve")
    page.wait_for_function("document.querySelectorAll('#pending .pending').length === 0")
    page.wait_for_selector(".note.approval.approved:has-text('approved: http_get')")
    with client(gw) as http:
        evs = http.get("/v1/sessions/web-gov/history").json()["events"]
    approvals = [e for e in evs if e["kind"] == "action.approval"]
    assert len(approvals) == 1 and approvals[0].get("allowed") is True


def test_a_goal_run_with_children_renders_and_fills_the_fan_out_tree(
    page: Any, gw: GatewayHandle
) -> None:
    """ "Run as goal" submits the input as a goal: the transcript shows the run start, the
    two children spawned and folded back and the converged answer; the fan-out panel
    shows both children done with their results."""
    with client(gw) as http:
        assert http.post("/v1/sessions", json={"id": "web-goal"}).status_code == 201
    page.reload()
    page.click("#session-list li[data-id='web-goal']")
    page.wait_for_selector("#session-list li.active[data-id='web-goal']")
    spawns = [
        "!tool spawn " + json.dumps({"objective": o})
        for o in ('!tool calculator {"expression": "6*7"}', "hello child")
    ]
    page.fill("#input", "\n".join(spawns))
    page.click("#goal")
    page.wait_for_selector(".note.goal:has-text('goal run started')")
    page.wait_for_selector(".msg.goal.converged:has-text('calculator returned 42')")
    assert page.locator(".note.child:has-text('spawned web-goal-')").count() == 2
    page.wait_for_function("document.querySelectorAll('#fanout li.child.done').length === 2")
    tree = page.locator("#fanout").text_content()
    assert "calculator returned 42" in tree and "[scripted] hello child" in tree
    # The children's mirrored turns never closed the parent's own reply bubble.
    final = page.locator(".assistant:has-text('spawn returned')")
    assert final.count() == 1 and "streaming" not in (final.get_attribute("class") or "")
    with client(gw) as http:
        w = http.get("/v1/sessions/web-goal/goals/wait", params={"timeout": 30}).json()
    assert w["state"] == "converged"
    _shot(page, "goal")


def test_steer_regenerate_and_the_branch_switcher_on_the_page(page: Any, gw: GatewayHandle) -> None:
    """Input while a turn runs is a steer; a message's regenerate button answers it again
    on a new branch, the branch panel lists both and switches back on a click."""
    page.fill("#new-id", "web-conv")
    page.click("#create button")
    page.wait_for_selector("#session-list li.active[data-id='web-conv']")
    page.wait_for_function("document.getElementById('conn').textContent === 'live'")
    page.fill("#input", "!slow 0.2 one two three four five")
    page.press("#input", "Enter")
    page.wait_for_selector(".assistant.streaming:has-text('one')")
    page.fill("#input", "and six")
    page.press("#input", "Enter")
    page.wait_for_selector(".msg.user.steer:has-text('steer: and six')")
    # No tool batch, no safe point: dropped at the turn's end and answered as the next turn.
    page.wait_for_selector(".note.steer:has-text('runs as the next turn')")
    page.wait_for_selector(".assistant:not(.streaming):has-text('[scripted] and six')")
    user = page.locator(".msg.user:has-text('!slow')").first
    assert user.text_content() == "!slow 0.2 one two three four five"
    page.fill("#input", "hello")
    page.press("#input", "Enter")
    page.wait_for_selector(".assistant:not(.streaming):has-text('[scripted] hello')")
    page.locator(".msg.user:has-text('hello') .msg-regenerate").click()
    page.wait_for_selector(".msg.user:has-text('(again) hello')")
    page.wait_for_function("document.querySelectorAll('#branches li').length === 2")
    page.locator("#branches li:not(.active)").click()
    page.wait_for_selector(".note:has-text('switched to the branch')")
    page.wait_for_function(
        "document.querySelector('#branches li.active') &&"
        " document.querySelectorAll('#branches li')[0].classList.contains('active')"
    )
    _shot(page, "branches")


def test_timers_are_set_listed_fired_and_cancelled_on_the_page(
    page: Any, gw: GatewayHandle
) -> None:
    """The timers panel sets a reminder that fires into the transcript and a schedule that
    it lists (a goal run's marked so) and cancels on a click."""
    with client(gw) as http:
        assert http.post("/v1/sessions", json={"id": "web-timer"}).status_code == 201
    page.reload()
    page.click("#session-list li[data-id='web-timer']")
    page.wait_for_selector("#session-list li.active[data-id='web-timer']")
    page.fill("#timer-when", "+0.5")
    page.fill("#timer-text", "page reminder")
    page.click("#timer-form button")
    page.wait_for_selector(".note.timer:has-text('set: next at')")
    page.wait_for_selector(".note.timer:has-text('fired')")
    page.wait_for_selector(".assistant:not(.streaming):has-text('[scripted] page reminder')")
    page.fill("#timer-when", "0 9 * * 1-5")
    page.fill("#timer-text", "weekly summary")
    page.check("#timer-goal")
    page.click("#timer-form button")
    listed = page.wait_for_selector("#timers li:has-text('weekly summary')")
    assert "goal: weekly summary (0 9 * * 1-5 UTC, next" in listed.text_content()
    _shot(page, "timers")
    page.click("#timers li button.cancel")
    page.wait_for_function("document.querySelectorAll('#timers li').length === 0")
    page.wait_for_selector(".note.timer:has-text('cancelled')")
    with client(gw) as http:
        evs = http.get("/v1/sessions/web-timer/history").json()["events"]
    assert [e["kind"] for e in evs].count("timer.fired") == 1
    (goal,) = [e for e in evs if e["kind"] == "timer.set" and e.get("run") == "goal"]
    assert goal["cron"] == "0 9 * * 1-5"


def test_a_budget_pause_is_raised_from_the_page(
    page: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """With the operator's prices, a model call past the budget pauses: the budget panel
    shows the spending and the paused call, and a raise from it lets the same turn go on."""
    prices = {"version": "web-1", "currency": "EUR", "models": {"*": {"input": 1e6, "output": 1e6}}}
    data = tmp_path_factory.mktemp("web-budget") / "data"
    with running_gateway(data, prices=prices) as g:
        with client(g) as http:
            meta = {"ore.model.name": "scripted", "governance.max_cost": "1"}
            assert (
                http.post("/v1/sessions", json={"id": "web-money", "metadata": meta}).status_code
                == 201
            )
        pg = page.context.new_page()
        try:
            pg.goto(g.page_url)
            pg.click("#session-list li[data-id='web-money']")
            pg.wait_for_function("document.getElementById('conn').textContent === 'live'")
            pg.fill("#input", "spend it")
            pg.press("#input", "Enter")
            pg.wait_for_selector(".assistant:not(.streaming):has-text('[scripted] spend it')")
            pg.fill("#input", "and more")
            pg.press("#input", "Enter")
            pg.wait_for_selector(".note.budget:has-text('paused for the budget')")
            pg.wait_for_selector("#budget:has-text('of 1 EUR')")
            pg.fill("#budget-paused input", "50")
            pg.click("#budget-paused button.raise")
            pg.wait_for_selector(".note.budget:has-text('budget raised by 50')")
            pg.wait_for_selector(".assistant:not(.streaming):has-text('[scripted] and more')")
            pg.wait_for_function("document.querySelectorAll('#budget-paused .paused').length === 0")
            pg.wait_for_selector("#budget:has-text('of 51 EUR')")
            _shot(pg, "budget")
        finally:
            pg.close()


def test_a_compaction_shows_where_a_summary_replaced_a_span_and_opens_it(
    page: Any, gw: GatewayHandle
) -> None:
    """After ``/compact`` the next turn summarises the older conversation: the transcript
    marks where, naming the seqs the summary stands for; opened, the marker shows the
    summary and lists those events, read back from the history; the status panel counts
    the compaction and the window's fill."""
    with client(gw) as http:
        meta = {"ore.model.context_window": "4096", "context.keep_recent": "1"}
        created = http.post("/v1/sessions", json={"id": "web-ctx", "metadata": meta})
        assert created.status_code == 201
    page.reload()
    page.click("#session-list li[data-id='web-ctx']")
    page.wait_for_selector("#session-list li.active[data-id='web-ctx']")
    for text in ("first words said", "second words said", "/compact", "third words said"):
        page.fill("#input", text)
        page.press("#input", "Enter")
        if not text.startswith("/"):
            page.wait_for_selector(f".assistant:not(.streaming):has-text('{text}')")
    marker = page.wait_for_selector(".note.compaction[data-from]")
    first, last = int(marker.get_attribute("data-from")), int(marker.get_attribute("data-to"))
    assert 1 <= first < last
    assert f"a summary stands for events {first}-{last}" in marker.text_content()
    page.click(".note.compaction summary")
    page.wait_for_selector(".compaction-summary", state="visible")
    page.click(".compaction-open")
    page.wait_for_function(
        f"document.querySelectorAll('.compaction-events li').length === {last - first + 1}"
    )
    listed = page.eval_on_selector_all(
        ".compaction-events li", "els => els.map(e => [e.value, e.textContent])"
    )
    assert [seq for seq, _ in listed] == list(range(first, last + 1))
    assert any(t.startswith("user.message first words said") for _, t in listed), listed
    assert not any("third words said" in t for _, t in listed)
    page.wait_for_function("document.getElementById('usage').textContent.includes('compactions1')")
    _shot(page, "compaction")


def test_a_goal_run_nothing_drives_shows_interrupted_until_it_is_resumed(
    page: Any, tmp_path: pathlib.Path
) -> None:
    """A Host stopped mid-run, a new one on the same data directory that does not resume
    it: the page's goal row says interrupted (with how to resume); once resumed it says
    running, then converged."""
    data = tmp_path / "data"
    with running_gateway(data) as first, client(first) as http:
        assert http.post("/v1/sessions", json={"id": "web-cut"}).status_code == 201
        goal = {"objective": "!slow 0.6 one two three four five six seven eight"}
        assert http.post("/v1/sessions/web-cut/goals", json=goal).status_code == 201
        kinds = lambda: [e.kind for e in first.host.history("web-cut")]  # noqa: E731
        wait_for(lambda: "turn.started" in kinds())
    with running_gateway(data) as second:
        tab = page.context.new_page()
        try:
            tab.goto(second.page_url)
            tab.click("#session-list li[data-id='web-cut']")
            row = "document.getElementById('usage').textContent"
            tab.wait_for_function(f"{row}.includes('goal runinterrupted')")
            assert "vertebra resume web-cut" in tab.locator("#usage").text_content()
            _shot(tab, "goal-interrupted")
            second.host.resume("web-cut")
            tab.wait_for_function(f"{row}.includes('goal runrunning')")
            tab.wait_for_function(f"{row}.includes('goal runconverged')")
        finally:
            tab.close()
