// The live page: a session list, the transcript rendered from the SSE stream (stored events
// by seq, assistant text streaming in from live deltas), a composer with an interrupt
// button, and side panels from the status projection.
import { openStream } from "/sse.js";
import { renderMarkdown } from "/markdown.js";

const $ = (id) => document.getElementById(id);
const state = { token: null, session: null, stream: null, turns: new Map(), statusTimer: null };
// What the inspector shows: each stored event's JSON as it arrived (by seq), the seqs of
// each turn, and the sessions known to wait for an approval (marked in the list).
const seen = { raw: new Map(), turnSeqs: new Map(), turnTimes: new Map(), answers: new Map(), seq: 0 };
const waiting = new Set();
// The page keeps this many events' JSON for the inspector (the latest ones): a long
// session's page stays small.
const KEPT_EVENTS = 20000;

function readToken() {
  const params = new URLSearchParams(location.hash.slice(1));
  const fromUrl = params.get("token");
  if (fromUrl) {
    sessionStorage.setItem("vertebra-token", fromUrl);
    params.delete("token");
    // The token leaves the address bar (and the history) once it is stored for this tab.
    history.replaceState(null, "", `${location.pathname}${location.search}#${params}`);
  }
  return sessionStorage.getItem("vertebra-token");
}

async function api(method, path, body) {
  const headers = { Authorization: `Bearer ${state.token}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(`${res.status} ${data.error || ""}: ${data.message || res.statusText}`);
  return data;
}

function showError(err) {
  $("error").textContent = err ? String(err.message || err) : "";
}

function add(cls, text) {
  const el = document.createElement("div");
  el.className = cls;
  el.textContent = text;
  // Made while a stored event is read: that event is the one the inspector opens on it.
  if (seen.seq) el.dataset.seqs = String(seen.seq);
  const box = $("transcript");
  const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
  box.appendChild(el);
  if (atBottom) box.scrollTop = box.scrollHeight;
  return el;
}

// A tool's arguments as text: the routes and the events carry them as a JSON value.
function inputText(input) {
  return typeof input === "string" ? input : JSON.stringify(input ?? {});
}

// An assistant bubble holds its text in a body (plain while it streams, rendered as
// markdown once stored) and, when its turn ends, a line with the turn's time, tokens and
// latency; its inspect button opens every event of its turn.
function bubble(turn) {
  let el = state.turns.get(turn);
  if (!el) {
    el = add("msg assistant streaming", "");
    el.dataset.turn = turn;
    delete el.dataset.seqs;
    el.appendChild(document.createElement("div")).className = "body";
    el.appendChild(inspectButton());
    state.turns.set(turn, el);
  }
  return el;
}

const bodyOf = (el) => el.querySelector(":scope > .body");

function setAnswer(el, text) {
  const body = bodyOf(el);
  body.classList.add("md");
  body.replaceChildren(renderMarkdown(text));
  // The answer's source text stays readable for copying and for tests.
  body.dataset.source = text;
}

// Text after a tool call goes in a new bubble below it, so the transcript reads in order.
function settle(turn) {
  const el = state.turns.get(turn);
  if (!el) return;
  if (bodyOf(el).textContent) el.classList.remove("streaming");
  else el.remove();
  state.turns.delete(turn);
}

function inspectButton() {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "msg-inspect";
  // The label is drawn by the style sheet, so a message's text stays its own.
  b.dataset.label = "inspect";
  b.setAttribute("aria-label", "inspect the events");
  return b;
}

// Each event of a turn is remembered against it: an answer's inspector shows them all, and
// its latency runs from the turn's start to the latest time any of them was stored.
function noteTurn(ev, seq) {
  if (!ev.turn) return;
  if (!seen.turnSeqs.has(ev.turn)) seen.turnSeqs.set(ev.turn, []);
  seen.turnSeqs.get(ev.turn).push(seq);
  const t = Date.parse(ev.time);
  if (Number.isNaN(t)) return;
  const span = seen.turnTimes.get(ev.turn) || { start: t, end: t };
  if (ev.kind === "turn.started") span.start = t;
  span.end = Math.max(span.end, t);
  seen.turnTimes.set(ev.turn, span);
}

function duration(ms) {
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
}

// The answer's line: when its turn ended, the tokens it used and how long it took.
function answerMeta(el, ev) {
  const span = seen.turnTimes.get(ev.turn);
  const u = ev.usage || {};
  const parts = [];
  if (ev.time) parts.push(new Date(ev.time).toLocaleTimeString());
  if (u.inputTokens !== undefined || u.outputTokens !== undefined) {
    parts.push(`${u.inputTokens ?? 0} in / ${u.outputTokens ?? 0} out tokens${u.cacheReadTokens ? ` (${u.cacheReadTokens} cached)` : ""}`);
  }
  if (span) parts.push(duration(span.end - span.start));
  if (!parts.length) return;
  const meta = el.querySelector(":scope > .meta") || el.insertBefore(document.createElement("div"), el.lastChild);
  meta.className = "meta";
  meta.textContent = parts.join(" · ");
  Object.assign(meta.dataset, {
    time: ev.time || "",
    inputTokens: u.inputTokens ?? "",
    outputTokens: u.outputTokens ?? "",
    latencyMs: span ? String(span.end - span.start) : "",
  });
}

// The turn whose assistant text is streaming now (the last one started and not ended).
let streamingTurn = null;

// A child's events mirrored onto its parent's stream carry the child's id as their goal:
// they belong to the child's transcript (open the child to see it), so the parent shows
// only where each child's turns ended, and never lets them touch its own turn bubbles.
function onMirrored(ev) {
  if (ev.kind === "turn.completed" || ev.kind === "turn.cancelled") {
    add("note child", `↳ ${ev.goal}: turn ${ev.turn} ${ev.kind === "turn.completed" ? "done" : "cancelled"}`);
  }
}

function onStored(ev, seq, raw) {
  $("transcript").dataset.lastSeq = seq;
  seen.raw.set(seq, raw);
  if (seen.raw.size > KEPT_EVENTS) seen.raw.delete(seen.raw.keys().next().value);
  seen.seq = seq;
  try {
    storedEvent(ev, seq);
  } finally {
    seen.seq = 0;
  }
}

function storedEvent(ev, seq) {
  if (ev.goal && ev.goal !== state.session) {
    onMirrored(ev);
    scheduleStatus();
    return;
  }
  noteTurn(ev, seq);
  switch (ev.kind) {
    case "session.started":
      if (ev.goal) {
        const budget = Object.entries(ev.budget || {}).map(([k, v]) => `${k}=${v}`).join(", ");
        add("note goal", `goal run started${budget ? ` (budget ${budget})` : ""}`);
      }
      break;
    case "session.converged":
      add("msg goal converged", `goal converged: ${ev.text || ""}`);
      break;
    case "session.stalled":
      add("msg goal stalled", `goal stalled: ${ev.error || "stalled"}`);
      break;
    case "child.spawned":
      add("note child", `spawned ${ev.child}: ${ev.text || ""}`);
      break;
    case "child.completed":
      add(`note child${ev.isError ? " error" : ""}`, `${ev.child} ${ev.isError ? "failed" : "done"}: ${ev.result || ""}`);
      break;
    case "user.message":
      if (ev.steer) add("msg user steer", `steer: ${ev.text || ""}`);
      else userMessage(ev, seq);
      break;
    case "steer.delivered":
      add("note steer", `steer delivered into turn ${ev.turn} before model call ${ev.call}`);
      break;
    case "steer.dropped":
      add("note steer", `steer dropped (${ev.reason || ""}): ${ev.handed === "next" ? "it runs as the next turn" : "refused"}`);
      break;
    case "branch.switched":
      add("note", `switched to the branch through seq ${ev.activates}`);
      scheduleBranches();
      break;
    case "turn.started":
      streamingTurn = ev.turn;
      bubble(ev.turn);
      break;
    case "assistant.message": {
      const el = bubble(ev.turn);
      setAnswer(el, ev.text || "");
      seen.answers.set(ev.turn, el);
      break;
    }
    case "tool.call":
      settle(ev.turn);
      add("msg tool", `→ ${ev.tool} ${inputText(ev.input)}`);
      break;
    case "action.pending":
      add("note approval", `approval asked: ${ev.action} ${inputText(ev.input)} (call ${ev.call})`);
      break;
    case "action.approval":
      add(
        `note approval ${ev.allowed ? "approved" : "rejected"}`,
        `${ev.allowed ? "approved" : "rejected"}: ${ev.action || ""} (call ${ev.call})${ev.reason ? ` ${ev.reason}` : ""}`,
      );
      break;
    case "action.rejected":
      // A human's rejection is shown by its action.approval; the rest are the gate's.
      if (ev.fault && ev.fault !== "approval_rejected") {
        add("note approval rejected", `refused: ${ev.action || ""} (${ev.fault}${ev.error ? `: ${ev.error}` : ""})`);
      }
      break;
    case "tool.result":
      settle(ev.turn);
      add(`msg tool${ev.isError ? " error" : ""}`, `← ${ev.tool || ""} ${ev.result || ""}`);
      break;
    case "turn.completed": {
      const el = bubble(ev.turn);
      el.classList.remove("streaming");
      // A failed turn keeps its partial text here, not in an assistant.message.
      if (ev.text && !bodyOf(el).textContent) setAnswer(el, ev.text);
      if (!bodyOf(el).textContent) el.remove();
      const answer = el.isConnected ? el : seen.answers.get(ev.turn);
      if (answer?.isConnected) answerMeta(answer, ev);
      seen.answers.delete(ev.turn);
      streamingTurn = null;
      break;
    }
    case "turn.cancelled": {
      const el = bubble(ev.turn);
      el.classList.remove("streaming");
      el.classList.add("cancelled");
      bodyOf(el).textContent = (ev.text || "") + " [interrupted]";
      seen.answers.delete(ev.turn);
      streamingTurn = null;
      break;
    }
    case "user.interrupt":
      add("note", `interrupt: ${ev.reason || ""}`);
      break;
    case "session.properties":
      add("note", `metadata: ${Object.entries(ev.properties || {}).map(([k, v]) => `${k}=${v}`).join(", ")}`);
      break;
    case "context.compacted":
      compactionMarker(ev, seq);
      break;
    case "context.uncompacted":
      add("note compaction", `compaction ${ev.call ? `at seq ${ev.call} ` : ""}taken back: the earlier view returns`);
      break;
    case "record.sealed":
      add("note", "record sealed");
      break;
    case "record.verified":
      add("note", `record verified${ev.error ? ": " + ev.error : ""}`);
      break;
    case "timer.set":
      add("note timer", `timer ${ev.timer} set${ev.run === "goal" ? " (goal run)" : ""}: next at ${ev.dueAt || ""}${ev.cron ? ` (${ev.cron} ${ev.tz || ""})` : ""}`);
      break;
    case "timer.fired":
      add("note timer", `timer ${ev.timer} fired${ev.late ? ` ${ev.late}s late` : ""}${ev.missed ? `, ${ev.missed} missed` : ""}${ev.skipped ? ", skipped" : ""}${ev.rejected ? `, rejected (${ev.rejected})` : ""}`);
      break;
    case "timer.cancelled":
      add("note timer", `timer ${ev.timer} cancelled${ev.reason ? ` (${ev.reason})` : ""}`);
      break;
    case "session.paused":
      add("note budget", `paused for the budget: ${ev.error || ""} (call ${ev.call})`);
      break;
    case "budget.raised":
      add("note budget", `budget raised by ${ev.amount}${ev.period ? ` for ${ev.period}` : ""}`);
      break;
    case "session.lifecycle":
      if (ev.phase === "closed" || ev.phase === "failed") add("note", `session ${ev.phase}`);
      break;
    default:
      break;
  }
  scheduleStatus();
}

// Where a summary replaced a span: from here on the model sees the summary in place of
// events fromSeq..toSeq (nothing stored changed). The marker opens on the summary and, on
// a click, lists the events it stands for, read back from the history route.
const COVERED_SHOWN = 1000;
function compactionMarker(ev, seq) {
  const el = add("note compaction", "");
  Object.assign(el.dataset, { seq, from: ev.fromSeq, to: ev.toSeq });
  const details = document.createElement("details");
  const head = document.createElement("summary");
  head.textContent = `context compacted: a summary stands for events ${ev.fromSeq}-${ev.toSeq}`;
  const text = document.createElement("div");
  text.className = "compaction-summary";
  text.textContent = ev.text || "(no summary could be written)";
  const open = document.createElement("button");
  open.type = "button";
  open.className = "compaction-open";
  open.textContent = "show the covered events";
  const list = document.createElement("ol");
  list.className = "compaction-events";
  open.onclick = () => guarded(() => showCovered(list, ev.fromSeq, ev.toSeq));
  details.append(head, text, open, list);
  el.appendChild(details);
}

async function showCovered(list, from, to) {
  const limit = Math.min(COVERED_SHOWN, to - from + 1);
  const { events } = await api("GET", `${sessionPath()}/history?after=${from - 1}&limit=${limit}`);
  const items = events.filter((e) => e.seq <= to).map((e) => {
    const li = document.createElement("li");
    li.value = e.seq;
    li.textContent = `${e.kind} ${(e.text || e.result || "").slice(0, 160)}`;
    return li;
  });
  if (to - from + 1 > limit) {
    const more = document.createElement("li");
    more.textContent = `… ${to - from + 1 - limit} more (vertebra history)`;
    items.push(more);
  }
  list.replaceChildren(...items);
}

// A user message with its turn-tree buttons: edit it (a new branch from here) or, for the
// latest, regenerate its answer (a sibling branch). The page reads the tree from the route.
function userMessage(ev, seq) {
  const label = ev.edits ? `(edit of ${ev.edits}) ` : ev.regenerates ? `(again) ` : "";
  const el = add("msg user", label + (ev.text || ""));
  el.dataset.seq = seq;
  if (ev.time) el.title = new Date(ev.time).toLocaleString();
  const tools = document.createElement("span");
  tools.className = "msg-tools";
  tools.appendChild(inspectButton());
  for (const [name, fn] of [["edit", () => editMessage(seq, ev.text || "")], ["regenerate", () => regenerate(seq)], ["fork", () => forkAt(seq - 1)]]) {
    const b = document.createElement("button");
    b.type = "button";
    // The label is drawn by the style sheet: the message's text stays its own.
    b.dataset.label = name;
    b.setAttribute("aria-label", name);
    b.className = `msg-${name}`;
    b.onclick = fn;
    tools.appendChild(b);
  }
  el.appendChild(tools);
  scheduleBranches();
}

// The events a transcript entry came from: an answer's whole turn, else its own event.
function eventsOf(el) {
  if (el.classList.contains("assistant") && el.dataset.turn) return seen.turnSeqs.get(Number(el.dataset.turn)) || [];
  const own = el.dataset.seq || el.dataset.seqs;
  return own ? own.split(",").map(Number) : [];
}

// The inspector shows the raw events as JSON text (an array, in seq order), pretty-printed.
function inspect(el) {
  const all = eventsOf(el);
  const seqs = all.filter((q) => seen.raw.has(q));
  if (!all.length) return;
  for (const old of document.querySelectorAll("#transcript > .inspected")) old.classList.remove("inspected");
  el.classList.add("inspected");
  const events = seqs.map((q) => JSON.parse(seen.raw.get(q)));
  const gone = all.length - seqs.length;
  $("inspector-title").textContent =
    (seqs.length === 1 ? `event ${seqs[0]}` : `events ${seqs.join(", ")}`) +
    (gone ? ` (${gone} older not kept by the page: vertebra history)` : "");
  $("inspector-json").textContent = JSON.stringify(events, null, 2);
  $("inspector").hidden = false;
}

function closeInspector() {
  $("inspector").hidden = true;
  $("inspector-json").textContent = "";
  for (const old of document.querySelectorAll("#transcript > .inspected")) old.classList.remove("inspected");
}

// A click on an entry (not on a link or a control of it) or on its inspect button opens
// the inspector; a click that ends a text selection does not.
function onTranscriptClick(e) {
  if (e.target.closest("a, summary, input, textarea, .compaction-events")) return;
  const button = e.target.closest("button");
  if (button && !button.classList.contains("msg-inspect")) return;
  const el = e.target.closest("#transcript > div");
  if (!el || (!button && String(getSelection() || ""))) return;
  inspect(el);
}

const sessionPath = () => `/v1/sessions/${encodeURIComponent(state.session)}`;

async function guarded(fn) {
  showError(null);
  try {
    return await fn();
  } catch (err) {
    showError(err);
  }
}

function editMessage(seq, text) {
  const changed = prompt("Edit the message (a new branch starts here):", text);
  if (changed && changed.trim()) guarded(() => api("POST", `${sessionPath()}/edits`, { seq, text: changed }));
}

function regenerate(seq) {
  guarded(() => api("POST", `${sessionPath()}/regenerations`, seq ? { seq } : {}));
}

async function forkAt(at) {
  const s = await guarded(() => api("POST", `${sessionPath()}/forks`, at > 0 ? { at } : {}));
  if (s) {
    await loadSessions();
    openSession(s.id);
  }
}

let branchesTimer = null;
function scheduleBranches() {
  clearTimeout(branchesTimer);
  branchesTimer = setTimeout(() => refreshBranches().catch(() => {}), 150);
}

async function refreshBranches() {
  if (!state.session) return;
  const { branches } = await api("GET", `${sessionPath()}/branches`);
  const list = $("branches");
  list.replaceChildren(
    ...branches.map((b) => {
      const li = document.createElement("li");
      li.className = b.active ? "active" : "";
      li.textContent = `${b.active ? "● " : ""}${b.text} → ${(b.reply || "").slice(0, 40)}`;
      li.title = `turns ${b.path.join(" > ")}`;
      if (!b.active) {
        li.onclick = () => guarded(() => api("PUT", `${sessionPath()}/branch`, { turn: b.leaf }));
      }
      return li;
    }),
  );
}

function onLive(item) {
  if (item.kind === "assistant.delta") {
    if (streamingTurn === null) return;
    bodyOf(bubble(streamingTurn)).textContent += item.text;
    const box = $("transcript");
    box.scrollTop = box.scrollHeight;
  } else if (item.kind === "notice") {
    add(`note ${item.severity || ""}`, item.text);
  }
}

function setConn(text, cls) {
  const el = $("conn");
  el.textContent = text;
  el.className = `badge ${cls || ""}`;
}

function openSession(id) {
  state.stream?.close();
  state.session = id;
  state.turns = new Map();
  Object.assign(seen, { raw: new Map(), turnSeqs: new Map(), turnTimes: new Map(), answers: new Map(), seq: 0 });
  closeInspector();
  streamingTurn = null;
  $("transcript").replaceChildren();
  $("transcript").dataset.lastSeq = "0";
  $("current").textContent = id;
  const params = new URLSearchParams(location.hash.slice(1));
  params.set("session", id);
  history.replaceState(null, "", `#${params}`);
  for (const li of $("session-list").children) li.classList.toggle("active", li.dataset.id === id);
  // A reload replays from seq 0; a dropped connection resumes from the last id.
  state.stream = openStream(`/v1/sessions/${encodeURIComponent(id)}/events`, {
    token: state.token,
    onEvent: (msg) => {
      const data = JSON.parse(msg.data);
      if (msg.id !== null) onStored(data, Number(msg.id), msg.data);
      else onLive(data);
    },
    onState: (s, detail) => setConn(s === "open" ? "live" : detail ? `${s} (${detail})` : s, s),
  });
  window.vertebraStream = state.stream;
  refreshStatus();
}

function scheduleStatus() {
  clearTimeout(state.statusTimer);
  state.statusTimer = setTimeout(refreshStatus, 250);
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) {
    const td = document.createElement("td");
    td.textContent = c;
    tr.appendChild(td);
  }
  return tr;
}

// The last request's share of the window, from the status projection's context.
function contextText(c) {
  if (!c || !c.window) return "-";
  return `${Math.round(c.fill * 100)}% of ${c.window}`;
}

// Where the latest goal run stands, as goals/wait answers at once: a run nothing drives
// is "interrupted" (its transcript alone would look like a run going on), with how to
// resume it (the answer's reason says it in full).
async function goalState(id) {
  try {
    const w = await api("GET", `/v1/sessions/${encodeURIComponent(id)}/goals/wait?timeout=0`);
    return w.state === "interrupted" ? `interrupted (vertebra resume ${id})` : w.state;
  } catch {
    return "-";
  }
}

async function refreshStatus() {
  if (!state.session) return;
  let p;
  try {
    p = await api("GET", `/v1/sessions/${encodeURIComponent(state.session)}/status`);
  } catch {
    return;
  }
  const u = p.usage || {};
  const goal = p.objective ? await goalState(state.session) : null;
  const dl = $("usage");
  dl.replaceChildren();
  for (const [k, v] of [
    ...(goal ? [["goal run", goal]] : []),
    ["turns", p.turns],
    ["cancelled", p.cancelled],
    ["input tokens", u.inputTokens],
    ["output tokens", u.outputTokens],
    ["cache read", u.cacheReadTokens],
    ["cache hit rate", `${Math.round((p.cacheHitRate || 0) * 100)}%`],
    ["context", contextText(p.context)],
    ["compactions", (p.context || {}).compactions],
    ["phase", p.phase || "-"],
  ]) {
    const dt = document.createElement("dt");
    dt.textContent = k;
    const dd = document.createElement("dd");
    dd.textContent = v ?? 0;
    dl.append(dt, dd);
  }
  const rec = $("record");
  rec.textContent = p.record;
  rec.className = `badge ${p.record}`;
  $("actions").replaceChildren(
    row(["call", "action", "trust", "state"]),
    // A child's calls are numbered on its own stream: name the child beside its call.
    ...(p.actions || []).map((a) =>
      row([a.goal ? `${a.goal} #${a.call}` : a.call, a.action, a.trust, a.state + (a.fault ? ` (${a.fault})` : "")]),
    ),
  );
  setWaiting(state.session, (p.pending || []).length > 0);
  $("pending").replaceChildren(
    ...(p.pending || []).map((w) => {
      const div = document.createElement("div");
      div.className = "pending";
      const text = document.createElement("span");
      text.textContent = `approval needed: ${w.action} ${inputText(w.input)} (call ${w.call}) `;
      div.appendChild(text);
      for (const [label, decision] of [["Approve", "approve"], ["Reject", "reject"]]) {
        const b = document.createElement("button");
        b.textContent = label;
        b.className = decision;
        b.onclick = async () => {
          b.disabled = true;
          try {
            await api("POST", `/v1/sessions/${encodeURIComponent(state.session)}/approvals/${w.call}`, {
              decision,
              note: `${decision}d from the page`,
            });
          } catch (err) {
            showError(err);
          }
          scheduleStatus();
        };
        div.appendChild(b);
      }
      return div;
    }),
  );
  $("egress-counts").textContent = `allowed ${p.egressAllowed}, blocked ${p.egressBlocked}`;
  $("egress").replaceChildren(...(p.egress || []).map((e) => row([e.host, e.allowed ? "allowed" : "blocked", e.reason])));
  const byParent = new Map();
  for (const c of p.fanout || []) {
    if (!byParent.has(c.parent)) byParent.set(c.parent, []);
    byParent.get(c.parent).push(c);
  }
  const tree = (parent) =>
    (byParent.get(parent) || []).map((c) => {
      const li = document.createElement("li");
      li.dataset.id = c.id;
      li.className = `child ${c.state}`;
      li.textContent = `${c.id} ${c.state} (trust ${c.trust || "-"}, ${c.turns} turns${c.blocked ? `, ${c.blocked} blocked` : ""}, ${c.seal})`;
      li.title = c.objective || "";
      if (c.result) {
        const r = document.createElement("div");
        r.className = "result";
        r.textContent = c.result;
        li.appendChild(r);
      }
      const kids = tree(c.id);
      if (kids.length) {
        const ul = document.createElement("ul");
        ul.append(...kids);
        li.appendChild(ul);
      }
      return li;
    });
  const ids = new Set((p.fanout || []).map((c) => c.id));
  const roots = [...byParent.keys()].filter((k) => !ids.has(k));
  $("fanout").replaceChildren(...roots.flatMap(tree));
  await Promise.all([refreshTimers().catch(() => {}), refreshBudget().catch(() => {})]);
}

// The session's timers, next due first, each with a button that cancels it.
async function refreshTimers() {
  const { timers } = await api("GET", `${sessionPath()}/timers`);
  $("timers").replaceChildren(
    ...timers.map((t) => {
      const li = document.createElement("li");
      li.dataset.id = t.id;
      const text = document.createElement("span");
      const when = t.cron ? `${t.cron} ${t.tz || "UTC"}, next ${t.dueAt}` : `at ${t.dueAt}`;
      text.textContent = `${t.goal ? "goal: " : ""}${t.text} (${when})`;
      const b = document.createElement("button");
      b.type = "button";
      b.className = "cancel";
      b.textContent = "Cancel";
      b.onclick = () => guarded(() => api("DELETE", `${sessionPath()}/timers/${encodeURIComponent(t.id)}`)).then(scheduleStatus);
      li.append(text, b);
      return li;
    }),
  );
}

// What the session spent under the operator's prices; a call paused on a budget can be
// let go on with a raise.
async function refreshBudget() {
  const b = await api("GET", `${sessionPath()}/budget`);
  const money = (x) => `${+Number(x).toPrecision(6)}${b.currency ? ` ${b.currency}` : ""}`;
  $("budget").textContent = b.version
    ? `spent ${money(b.cost)}${b.budget === null ? "" : ` of ${money(b.budget)}`} (prices ${b.version})`
    : "not priced (no operator price table)";
  $("budget-paused").replaceChildren(
    ...(b.paused || []).map((call) => {
      const div = document.createElement("div");
      div.className = "paused";
      const amount = document.createElement("input");
      amount.type = "number";
      amount.min = "0";
      amount.step = "any";
      amount.placeholder = "raise by";
      amount.setAttribute("aria-label", `raise the budget for call ${call} by`);
      const go = document.createElement("button");
      go.type = "button";
      go.className = "raise";
      go.textContent = `Raise and go on (call ${call})`;
      go.onclick = () => {
        const by = Number(amount.value);
        if (!(by > 0)) return showError("a raise must be a positive amount");
        guarded(() => api("POST", `${sessionPath()}/approvals/${call}`, { decision: "approve", raise: by, note: "raised from the page" })).then(scheduleStatus);
      };
      div.append(amount, go);
      return div;
    }),
  );
}

// WHEN as the CLI reads it: +90, +10m, +2h, +1d (after), anything else a cron expression.
function timerWhen(text) {
  const m = /^\+(\d+(?:\.\d+)?)([smhd]?)$/.exec(text.trim());
  if (m) return { after: Number(m[1]) * { "": 1, s: 1, m: 60, h: 3600, d: 86400 }[m[2]] };
  return { cron: text.trim() };
}

async function loadSessions() {
  const { sessions } = await api("GET", "/v1/sessions");
  const list = $("session-list");
  list.replaceChildren(
    ...sessions.map((s) => {
      const li = document.createElement("li");
      li.dataset.id = s.id;
      li.innerHTML = "<span></span><small></small>";
      li.firstChild.textContent = s.id;
      li.lastChild.textContent = s.state;
      li.classList.toggle("active", s.id === state.session);
      li.onclick = () => openSession(s.id);
      return li;
    }),
  );
  markWaiting();
  refreshWaiting(sessions).catch(() => {});
  return sessions;
}

// A session with an action waiting for a human's approval is marked in the list.
function markWaiting() {
  for (const li of $("session-list").children) {
    const on = waiting.has(li.dataset.id);
    li.classList.toggle("waiting", on);
    let mark = li.querySelector(".approval-mark");
    if (on && !mark) {
      mark = document.createElement("span");
      mark.className = "approval-mark";
      mark.textContent = "approval";
      mark.title = "waiting for an approval";
      li.insertBefore(mark, li.lastChild);
    } else if (!on && mark) mark.remove();
  }
}

function setWaiting(id, on) {
  if (on === waiting.has(id)) return;
  if (on) waiting.add(id);
  else waiting.delete(id);
  markWaiting();
}

// Asks each open session (a few at a time) whether anything waits for approval; a closed
// or failed one cannot be waiting, and one whose last seq has not moved since it was last
// asked cannot have changed its answer, so it is not asked again.
const ASKED_AT_ONCE = 4;
const askedAt = new Map();
async function refreshWaiting(sessions) {
  const open = sessions.filter((s) => s.state !== "closed" && s.state !== "failed");
  for (const id of [...waiting]) if (!open.some((s) => s.id === id)) waiting.delete(id);
  const moved = open.filter((s) => askedAt.get(s.id) !== s.last_seq);
  for (let i = 0; i < moved.length; i += ASKED_AT_ONCE) {
    await Promise.all(
      moved.slice(i, i + ASKED_AT_ONCE).map(async (s) => {
        const { pending } = await api("GET", `/v1/sessions/${encodeURIComponent(s.id)}/approvals`);
        askedAt.set(s.id, s.last_seq);
        setWaiting(s.id, pending.length > 0);
      }),
    );
  }
  markWaiting();
}

async function send(text) {
  showError(null);
  try {
    // While a turn runs the message steers it: delivered at its next safe point.
    const body = streamingTurn !== null ? { text, mode: "steer" } : { text };
    await api("POST", `/v1/sessions/${encodeURIComponent(state.session)}/messages`, body);
  } catch (err) {
    showError(err);
  }
}

async function submitGoal(objective) {
  showError(null);
  try {
    await api("POST", `/v1/sessions/${encodeURIComponent(state.session)}/goals`, { objective });
  } catch (err) {
    showError(err);
  }
}

function wire() {
  $("composer").onsubmit = (e) => {
    e.preventDefault();
    const text = $("input").value;
    if (!text.trim() || !state.session) return;
    $("input").value = "";
    send(text);
  };
  $("input").onkeydown = (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      $("composer").requestSubmit();
    }
  };
  $("goal").onclick = () => {
    const text = $("input").value;
    if (!text.trim() || !state.session) return;
    $("input").value = "";
    submitGoal(text);
  };
  $("timer-form").onsubmit = (e) => {
    e.preventDefault();
    const when = $("timer-when").value;
    const text = $("timer-text").value;
    if (!when.trim() || !text.trim() || !state.session) return;
    const body = { text, ...timerWhen(when), ...($("timer-goal").checked ? { goal: true } : {}) };
    guarded(async () => {
      await api("POST", `${sessionPath()}/timers`, body);
      $("timer-when").value = "";
      $("timer-text").value = "";
      scheduleStatus();
    });
  };
  $("transcript").addEventListener("click", onTranscriptClick);
  $("inspector-close").onclick = closeInspector;
  $("regenerate").onclick = () => state.session && regenerate(0);
  $("fork").onclick = () => state.session && forkAt(0);
  $("interrupt").onclick = async () => {
    showError(null);
    try {
      await api("POST", `/v1/sessions/${encodeURIComponent(state.session)}/interrupt`, { reason: "stopped from the page" });
    } catch (err) {
      showError(err);
    }
  };
  $("create").onsubmit = async (e) => {
    e.preventDefault();
    showError(null);
    const id = $("new-id").value.trim();
    try {
      const s = await api("POST", "/v1/sessions", id ? { id } : {});
      $("new-id").value = "";
      await loadSessions();
      openSession(s.id);
    } catch (err) {
      showError(err);
    }
  };
}

async function main() {
  state.token = readToken();
  wire();
  if (!state.token) {
    showError("No token: open this address followed by #token= and the token in the data directory's gateway-token file.");
    return;
  }
  try {
    const sessions = await loadSessions();
    const wanted = new URLSearchParams(location.hash.slice(1)).get("session");
    const pick = sessions.find((s) => s.id === wanted) || sessions[0];
    if (pick) openSession(pick.id);
  } catch (err) {
    showError(err);
  }
  setInterval(() => loadSessions().catch(() => {}), 5000);
}

main();
