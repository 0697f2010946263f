// Markdown for the model's answers, sanitised by construction: the text is parsed here and
// every piece becomes a node made with createElement and filled with textContent, so no
// string the model wrote is ever parsed as HTML (a <script> or an <img onerror> in an
// answer shows as the characters it is). Only a subset is read: paragraphs, ATX headings,
// fenced code blocks, bullet and numbered lists, block quotes, and inline code, strong,
// emphasis and links; links keep only http(s) and mailto addresses.

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

function list(lines, i, out, pattern, tag) {
  const el = node(tag);
  const first = pattern.exec(lines[i]);
  if (tag === "ol" && first[1] !== "1") el.start = Number(first[1]);
  let j = i;
  for (let m; j < lines.length && (m = pattern.exec(lines[j])); j++) {
    const li = node("li");
    inline(li, m[m.length - 1]);
    el.append(li);
  }
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
  if (BULLET.test(line)) return list(lines, i, out, BULLET, "ul");
  if (NUMBERED.test(line)) return list(lines, i, out, NUMBERED, "ol");
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
  while (j < lines.length && lines[j].trim() && !startsBlock(lines[j])) para.push(lines[j++]);
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
