"""The page as a conversation tool, in headless Chromium: answers rendered as markdown
(and model-written HTML shown as text), each answer's time, tokens and latency, the event
inspector, and the session list's mark on a session waiting for an approval. Screenshots
are read back pixel by pixel in the browser (a canvas), so a blank or unchanged picture
fails the test."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from gateway_support import client, running_gateway
from test_gateway_browser import ARGS, ARTIFACTS, CHROMIUM

from actors.gateway import GatewayHandle

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayHandle]:
    with running_gateway(tmp_path_factory.mktemp("web-conv") / "data") as g:
        yield g


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("profile")),
            executable_path=CHROMIUM,
            headless=True,
            args=ARGS,
            viewport={"width": 1280, "height": 800},
        )
        try:
            ctx.set_default_timeout(20_000)
            yield ctx
        finally:
            ctx.close()


@pytest.fixture(scope="module")
def page(browser: Any, gw: GatewayHandle) -> Any:
    pg = browser.new_page()
    pg.goto(gw.page_url)
    return pg


@pytest.fixture(scope="module")
def lab(browser: Any) -> Any:
    """A blank page that decodes screenshots in a canvas (nothing is loaded into it)."""
    return browser.new_page()


_STATS = """async ([a, b]) => {
  const load = async (b64) => {
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const img = await createImageBitmap(new Blob([bytes], { type: "image/png" }));
    const c = new OffscreenCanvas(img.width, img.height);
    const g = c.getContext("2d");
    g.drawImage(img, 0, 0);
    return { w: img.width, h: img.height, d: g.getImageData(0, 0, img.width, img.height).data };
  };
  const x = await load(a);
  const colors = new Set();
  let dark = 0;
  for (let i = 0; i < x.d.length; i += 4) {
    colors.add((x.d[i] << 16) | (x.d[i + 1] << 8) | x.d[i + 2]);
    if (x.d[i] + x.d[i + 1] + x.d[i + 2] < 150) dark++;
  }
  const out = { w: x.w, h: x.h, colors: colors.size, dark: dark / (x.w * x.h), changed: null };
  if (b) {
    const y = await load(b);
    if (y.w !== x.w || y.h !== x.h) out.changed = 1;
    else {
      let diff = 0;
      for (let i = 0; i < x.d.length; i += 4) {
        if (x.d[i] !== y.d[i] || x.d[i + 1] !== y.d[i + 1] || x.d[i + 2] !== y.d[i + 2]) diff++;
      }
      out.changed = diff / (x.w * x.h);
    }
  }
  return out;
}"""


def _shot(target: Any, name: str) -> bytes:
    png: bytes = target.screenshot(path=str(ARTIFACTS / f"browser-conv-{name}.png"))
    return png


def _stats(lab: Any, png: bytes, other: bytes | None = None) -> dict[str, Any]:
    b64 = [base64.b64encode(x).decode() if x else None for x in (png, other)]
    return lab.evaluate(_STATS, b64)  # type: ignore[no-any-return]


def _open(page: Any, gw: GatewayHandle, sid: str, meta: dict[str, str] | None = None) -> None:
    with client(gw) as http:
        body: dict[str, Any] = {"id": sid, **({"metadata": meta} if meta else {})}
        assert http.post("/v1/sessions", json=body).status_code == 201
    page.reload()
    page.click(f"#session-list li[data-id='{sid}']")
    page.wait_for_selector(f"#session-list li.active[data-id='{sid}']")
    page.wait_for_function("document.getElementById('conn').textContent === 'live'")


def _say(gw: GatewayHandle, sid: str, text: str) -> None:
    with client(gw) as http:
        assert http.post(f"/v1/sessions/{sid}/messages", json={"text": text}).status_code < 300


def _answer(page: Any, n: int) -> Any:
    """The ``n``-th finished answer (1-based), once its turn's line is there."""
    page.wait_for_function(
        f"document.querySelectorAll('.msg.assistant:not(.streaming) > .meta').length >= {n}"
    )
    return page.locator(".msg.assistant:not(.streaming)").nth(n - 1)


def _history(gw: GatewayHandle, sid: str) -> list[dict[str, Any]]:
    with client(gw) as http:
        return http.get(f"/v1/sessions/{sid}/history").json()["events"]  # type: ignore[no-any-return]


MARKDOWN = (
    "\n# A heading\n\nSome **strong** words, *emphasis* and `inline code`.\n\n"
    "```python\nx = 1\nprint('<b>not bold</b>')\n```\n\n- one\n- two\n\n1. first\n2. second\n\n"
    "[a link](https://example.com/docs) and [a trap](javascript:alert(1))"
)


def test_an_answer_renders_as_markdown_built_from_nodes(
    page: Any, lab: Any, gw: GatewayHandle
) -> None:
    """Headings, emphasis, code, lists and links become elements; a link keeps only a
    safe address and opens with ``rel=noopener``; the picture of the answer shows the
    dark code block a plain answer does not have."""
    _open(page, gw, "md-1")
    _say(gw, "md-1", "a plain answer")
    plain = _answer(page, 1)
    _say(gw, "md-1", MARKDOWN)
    md = _answer(page, 2)
    body = md.locator(".body.md")
    assert body.locator("h1").text_content() == "A heading"
    assert body.locator("strong").text_content() == "strong"
    assert body.locator("em").text_content() == "emphasis"
    assert body.locator("p code").text_content() == "inline code"
    code = body.locator("pre code")
    assert code.text_content() == "x = 1\nprint('<b>not bold</b>')"
    assert code.get_attribute("data-lang") == "python"
    assert body.locator("b").count() == 0
    assert body.locator("ul li").all_text_contents() == ["one", "two"]
    assert body.locator("ol li").all_text_contents() == ["first", "second"]
    links = body.locator("a")
    assert links.count() == 1
    assert links.get_attribute("href") == "https://example.com/docs"
    assert "noopener" in (links.get_attribute("rel") or "").split()
    assert "[a trap](javascript:alert(1))" in (body.text_content() or "")
    # The code block is laid out as a block of its own, inside the bubble.
    pre, bubble = body.locator("pre").bounding_box(), md.bounding_box()
    assert pre and bubble and pre["height"] > 20 and pre["width"] > 50
    assert bubble["y"] <= pre["y"] and pre["y"] + pre["height"] <= bubble["y"] + bubble["height"]
    plain_png, md_png = _shot(plain, "plain"), _shot(md, "markdown")
    s_plain, s_md = _stats(lab, plain_png), _stats(lab, md_png)
    assert s_plain["colors"] > 10 and s_md["colors"] > 10  # text drawn, not blank
    assert s_md["h"] > 3 * s_plain["h"]
    assert s_md["dark"] > 0.05 > s_plain["dark"]  # the code block's dark background


TABLE_AND_NESTED = (
    "\n| tool | calls | <b>share</b> |\n|:-----|------:|:---:|\n| calculator | 12 | *most* |\n"
    "| clock | 3 | a \\| b |\n\nSteps:\n\n- outer one\n  - inner one\n  - inner two\n"
    "    1. deepest\n- outer two\n"
)


def test_tables_and_nested_lists_render_as_elements_laid_out_as_such(
    page: Any, lab: Any, gw: GatewayHandle
) -> None:
    """A pipe table becomes a table (header cells, aligned columns, an escaped pipe kept
    in its cell, markup in a cell as text), and an indented list nests under its item; on
    the screen the cells sit in a grid and the nested items are indented."""
    _open(page, gw, "md-table")
    _say(gw, "md-table", "a plain answer")
    plain = _answer(page, 1)
    _say(gw, "md-table", TABLE_AND_NESTED)
    md = _answer(page, 2)
    body = md.locator(".body.md")
    table = body.locator("table")
    assert table.locator("thead th").all_text_contents() == ["tool", "calls", "<b>share</b>"]
    assert body.locator("b").count() == 0
    rows = table.locator("tbody tr")
    assert rows.count() == 2
    assert rows.nth(0).locator("td").all_text_contents() == ["calculator", "12", "most"]
    assert rows.nth(1).locator("td").all_text_contents() == ["clock", "3", "a | b"]
    assert rows.nth(0).locator("td em").text_content() == "most"
    aligns = [
        c.evaluate("e => getComputedStyle(e).textAlign") for c in rows.nth(0).locator("td").all()
    ]
    assert aligns == ["left", "right", "center"]
    outer = body.locator(":scope > ul > li")
    assert outer.count() == 2
    assert outer.nth(0).locator(":scope > ul > li").count() == 2
    deepest = outer.nth(0).locator("ul > li ol > li")
    assert deepest.all_text_contents() == ["deepest"]
    # Laid out as a grid and as an indented tree, inside the bubble.
    a, b = (
        rows.nth(0).locator("td").nth(0).bounding_box(),
        rows.nth(0).locator("td").nth(1).bounding_box(),
    )
    below = rows.nth(1).locator("td").nth(0).bounding_box()
    assert a and b and below
    assert b["x"] >= a["x"] + a["width"] - 1 and abs(a["y"] - b["y"]) < 2
    assert below["y"] >= a["y"] + a["height"] - 1 and abs(below["x"] - a["x"]) < 2
    o, i, d = (
        x.bounding_box() for x in (outer.nth(0), outer.nth(0).locator("ul > li").first, deepest)
    )
    assert o and i and d and o["x"] < i["x"] < d["x"]
    box, bubble = table.bounding_box(), md.bounding_box()
    assert (
        box
        and bubble
        and bubble["x"] <= box["x"]
        and box["x"] + box["width"] <= bubble["x"] + bubble["width"]
    )
    s_plain = _stats(lab, _shot(plain, "table-plain"))
    s_md = _stats(lab, _shot(md, "table"))
    assert s_md["colors"] > 10 and s_md["h"] > 3 * s_plain["h"]


HOSTILE = '<script>window.__pwned = 1</script><img src="x" onerror="window.__pwned = 2"><b>b</b>'


def test_html_in_an_answer_renders_as_text_not_markup(
    page: Any, lab: Any, gw: GatewayHandle
) -> None:
    """A model answer holding ``<script>`` and ``<img onerror>`` shows those characters:
    no element is made of them, nothing of them runs, and the text is on the screen."""
    _open(page, gw, "md-html")
    _say(gw, "md-html", "plain words only")
    plain = _answer(page, 1)
    _say(gw, "md-html", HOSTILE)
    answer = _answer(page, 2)
    body = answer.locator(".body")
    assert body.locator("script, img, b").count() == 0
    assert page.locator("#transcript script, #transcript img").count() == 0
    assert HOSTILE in (body.text_content() or "")
    assert page.evaluate("window.__pwned") is None
    assert answer.is_visible()
    # The markup is drawn as characters: a longer picture than a short plain answer.
    s = _stats(lab, _shot(answer, "html-as-text"), None)
    s_plain = _stats(lab, _shot(plain, "html-plain"))
    assert s["colors"] > 10 and s["w"] * s["h"] > 2 * s_plain["w"] * s_plain["h"]


def _iso(t: str) -> float:
    return datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp() * 1000


def test_each_answer_shows_its_time_tokens_and_latency(page: Any, gw: GatewayHandle) -> None:
    """The line under an answer names its turn's end time, the tokens of its
    ``turn.completed`` usage and the latency from the turn's start to its last event."""
    _open(page, gw, "md-meta")
    _say(gw, "md-meta", "!slow 0.1 a b c d")
    answer = _answer(page, 1)
    meta = answer.locator(".meta")
    evs = _history(gw, "md-meta")
    (done,) = [e for e in evs if e["kind"] == "turn.completed"]
    usage = done["usage"]
    assert meta.get_attribute("data-input-tokens") == str(usage["inputTokens"])
    assert meta.get_attribute("data-output-tokens") == str(usage["outputTokens"])
    assert meta.get_attribute("data-time") == done["time"]
    turn = [e for e in evs if e.get("turn") == done["turn"] and "time" in e]
    start = _iso(next(e["time"] for e in turn if e["kind"] == "turn.started"))
    expected = max(_iso(e["time"]) for e in turn) - start
    latency = float(meta.get_attribute("data-latency-ms") or "nan")
    assert abs(latency - expected) < 2 and latency > 200  # four words, 0.1 s apart
    text = meta.text_content() or ""
    assert f"{usage['inputTokens']} in / {usage['outputTokens']} out tokens" in text
    assert " ms" in text or " s" in text
    box, bubble = meta.bounding_box(), answer.bounding_box()
    assert box and bubble and box["height"] > 5
    assert bubble["y"] < box["y"] and box["y"] + box["height"] <= bubble["y"] + bubble["height"]


def test_the_inspector_shows_the_raw_events_of_a_message(
    page: Any, lab: Any, gw: GatewayHandle
) -> None:
    """An answer's inspect button shows every event of its turn as pretty-printed JSON,
    equal to the stored events; a click on a user message shows its own event; Close
    hides it. The chat's picture changes where the inspector opens."""
    _open(page, gw, "md-inspect")
    _say(gw, "md-inspect", "look <inside> **me**")
    answer = _answer(page, 1)
    chat = page.locator("#chat")
    assert not page.locator("#inspector").is_visible()
    before = _shot(chat, "inspector-closed")
    answer.locator(".msg-inspect").click()
    page.wait_for_selector("#inspector", state="visible")
    shown = page.locator("#inspector-json").text_content() or ""
    assert shown.startswith("[\n  {\n")  # pretty-printed
    events = json.loads(shown)
    stored = {e["seq"]: e for e in _history(gw, "md-inspect")}
    (turn,) = {e["turn"] for e in events}
    assert events == [e for e in stored.values() if e.get("turn") == turn]
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "turn.started" and "turn.completed" in kinds
    assert "action.completed" in kinds
    assert page.locator("#inspector-json *").count() == 0  # text, not markup
    after = _shot(chat, "inspector-open")
    s = _stats(lab, after, before)
    assert s["colors"] > 10 and s["changed"] > 0.05
    box = page.locator("#inspector").bounding_box()
    assert box and box["height"] > 50
    page.locator(".msg.user:has-text('look <inside>')").click(position={"x": 5, "y": 5})
    page.wait_for_function(
        "document.getElementById('inspector-title').textContent.startsWith('event ')"
    )
    (user,) = json.loads(page.locator("#inspector-json").text_content() or "")
    assert user == next(e for e in stored.values() if e["kind"] == "user.message")
    page.click("#inspector-close")
    page.wait_for_selector("#inspector", state="hidden")


def test_a_session_waiting_for_an_approval_is_marked_in_the_list(
    page: Any, lab: Any, gw: GatewayHandle
) -> None:
    """A session whose action waits for a human carries a mark in the session list, seen
    from another session; once approved the mark goes."""
    meta = {"governance.trust": "sandboxed", "governance.egress_allow": "127.0.0.1"}
    _open(page, gw, "md-gov", meta)
    _open(page, gw, "md-other")
    item = page.locator("#session-list li[data-id='md-gov']")
    assert item.locator(".approval-mark").count() == 0
    plain = _shot(page.locator("#session-list"), "list-plain")
    _say(gw, "md-gov", '!tool http_get {"url": "http://127.0.0.1:9/"}')
    page.wait_for_selector("#session-list li.waiting[data-id='md-gov'] .approval-mark")
    assert page.locator("#session-list li.waiting").count() == 1
    assert item.locator(".approval-mark").is_visible()
    marked = _shot(page.locator("#session-list"), "list-waiting")
    s = _stats(lab, marked, plain)
    assert s["changed"] is not None and s["changed"] > 0.005
    with client(gw) as http:
        (w,) = http.get("/v1/sessions/md-gov/approvals").json()["pending"]
        r = http.post(f"/v1/sessions/md-gov/approvals/{w['call']}", json={"decision": "approve"})
        assert r.status_code < 300
    page.wait_for_selector("#session-list li[data-id='md-gov']:not(.waiting)")
    assert item.locator(".approval-mark").count() == 0
