// Markdown for the model's answers, sanitised by construction: the text is parsed here and
// every piece becomes a node made with createElement and filled with textContent, so no
// string the model wrote is ever parsed as HTML (a <script> or an <img onerror> in an
// answer shows as the characters it is). Only a subset is read: paragraphs, ATX headings,
// fenced code blocks, bullet and numbered lists (nested by indentation), pipe tables,
// block quotes, and inline code, strong, emphasis and links; links keep only http(s) and
// mailto addresses.

const SAFE_SCHEMES = new Set(["http:", "https:", "mailto:"]);

function node(tag, cls) {
  const el = document.createElement(tag);
  if (cls) el.className = cls;
  return el;
}

// The address a link may carry, or null: parsed as a URL, and of an allowed scheme only
// (javascript:, data:, vbscript: and relative addresses are dropped).
export function safeHref(raw) {
  try {
    const url = new URL(raw.trim());
    return SAFE_SCHEMES.has(url.protocol) ? url.href : null;
  } catch {
    return null;
  }
}

// Inline spans, scanned left to right: `code` first (nothing inside it is markup), then
// [text](url), **strong**, *emphasis* / _emphasis_ (an underscore inside a word, as in
// snake_case or __dunder, is not markup); anything unmatched stays text.
const INLINE = /`([^`\n]+)`|\[([^\]\n]+)\]\(([^()\s]+)\)|\*\*([^*\n]+?)\*\*|(?<!\w)__([^_\n]+?)__(?!\w)|\*([^*\s][^*\n]*?)\*|\b_([^_\s][^_\n]*?)_\b/g;

export function inline(parent, text) {
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > last) parent.append(text.slice(last, m.index));
    last = m.index + m[0].length;
    if (m[1] !== undefined) {
      const code = node("code");
      code.textContent = m[1];
      parent.append(code);
    } else if (m[2] !== undefined) {
      const href = safeHref(m[3]);
      if (href === null) {
        parent.append(m[0]);
        continue;
      }
      const a = node("a");
      a.href = href;
      a.rel = "noopener noreferrer";
      a.target = "_blank";
      inline(a, m[2]);
      parent.append(a);
    } else {
      const strong = m[4] ?? m[5];
      const el = node(strong !== undefined ? "strong" : "em");
      inline(el, strong ?? m[6] ?? m[7]);
      parent.append(el);
    }
  }
  if (last < text.length) parent.append(text.slice(last));
}

const FENCE = /^\s{0,3}(```+|~~~+)\s*([\w+-]*)\s*$/;
const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const BULLET = /^\s{0,3}[-*+]\s+(.*)$/;
const NUMBERED = /^\s{0,3}(\d{1,9})[.)]\s+(.*)$/;
// A list item at any indentation: its indent, its marker, its text.
const ITEM = /^( *)([-*+]|\d{1,9}[.)])\s+(.*)$/;
// A table's delimiter row: dashes per column, colons for alignment, pipes between.
const DELIM = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;
const QUOTE = /^\s{0,3}>\s?(.*)$/;

function fence(lines, i, out) {
  const [, mark, lang] = FENCE.exec(lines[i]);
  const body = [];
  let j = i + 1;
  while (j < lines.length && !lines[j].trim().startsWith(mark)) body.push(lines[j++]);
  const pre = node("pre");
  const code = node("code");
  if (lang) code.dataset.lang = lang;
  code.textContent = body.join("\n");
  pre.append(code);
  out.append(pre);
  return j + 1; // an unclosed fence runs to the end, as it would while still streaming
}

function item(line) {
  const m = ITEM.exec(line.replace(/^\t+/, (t) => "    ".repeat(t.length)));
  return m && { indent: m[1].length, ordered: /\d/.test(m[2]), start: parseInt(m[2], 10), text: m[3] };
}

// A list from lines[i]: items at its indentation, and, under an item, a list indented by
// two or more spaces more (nested as deep as the text goes); a list of the other kind at
// the same indentation starts a list of its own.
function list(lines, i, out) {
  const first = item(lines[i]);
  const el = node(first.ordered ? "ol" : "ul");
  if (first.ordered && first.start !== 1) el.start = first.start;
  let j = i;
  let li = null;
  for (let it; j < lines.length && (it = item(lines[j])); ) {
    if (it.indent < first.indent) break;
    if (li && it.indent >= first.indent + 2) {
      j = list(lines, j, li);
      continue;
    }
    if (it.ordered !== first.ordered) break;
    li = node("li");
    inline(li, it.text);
    el.append(li);
    j++;
  }
  out.append(el);
  return j;
}

// The cells of a table row: split at pipes (not at an escaped one), its outer pipes dropped.
function cells(line) {
  let s = line.trim();
  if (s.startsWith("|")) s = s.slice(1);
  if (s.endsWith("|") && !s.endsWith("\\|")) s = s.slice(0, -1);
  return s.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, "|"));
}

function isTable(lines, i) {
  const next = lines[i + 1];
  if (!lines[i].includes("|") || next === undefined || !DELIM.test(next) || !next.includes("-")) return false;
  return cells(lines[i]).length === cells(next).length;
}

function table(lines, i, out) {
  const align = cells(lines[i + 1]).map((d) =>
    d.startsWith(":") && d.endsWith(":") ? "center" : d.endsWith(":") ? "right" : d.startsWith(":") ? "left" : "",
  );
  const row = (line, tag) => {
    const tr = node("tr");
    const got = cells(line);
    align.forEach((a, k) => {
      const cell = node(tag);
      if (a) cell.style.textAlign = a;
      inline(cell, got[k] ?? "");
      tr.append(cell);
    });
    return tr;
  };
  const el = node("table");
  const head = node("thead");
  head.append(row(lines[i], "th"));
  const body = node("tbody");
  let j = i + 2;
  for (; j < lines.length && lines[j].trim() && lines[j].includes("|"); j++) body.append(row(lines[j], "td"));
  el.append(head, body);
  out.append(el);
  return j;
}

function startsBlock(line) {
  return FENCE.test(line) || HEADING.test(line) || BULLET.test(line) || NUMBERED.test(line) || QUOTE.test(line);
}

function block(lines, i, out) {
  const line = lines[i];
  if (FENCE.test(line)) return fence(lines, i, out);
  const h = HEADING.exec(line);
  if (h) {
    const el = node(`h${h[1].length}`);
    inline(el, h[2]);
    out.append(el);
    return i + 1;
  }
  if (BULLET.test(line) || NUMBERED.test(line)) return list(lines, i, out);
  if (isTable(lines, i)) return table(lines, i, out);
  if (QUOTE.test(line)) {
    const quoted = [];
    let j = i;
    for (let m; j < lines.length && (m = QUOTE.exec(lines[j])); j++) quoted.push(m[1]);
    const el = node("blockquote");
    render(quoted, el);
    out.append(el);
    return j;
  }
  const para = [line];
  let j = i + 1;
  while (j < lines.length && lines[j].trim() && !startsBlock(lines[j]) && !isTable(lines, j)) para.push(lines[j++]);
  const p = node("p");
  para.forEach((text, k) => {
    if (k) p.append(node("br"));
    inline(p, text);
  });
  out.append(p);
  return j;
}

function render(lines, out) {
  let i = 0;
  while (i < lines.length) {
    if (!lines[i].trim()) i++;
    else i = block(lines, i, out);
  }
}

// The answer ``text`` as a fragment of nodes (never HTML parsed from it).
export function renderMarkdown(text) {
  const frag = document.createDocumentFragment();
  render(String(text ?? "").split(/\r\n|\r|\n/), frag);
  return frag;
}
