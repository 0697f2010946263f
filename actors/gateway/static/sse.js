// A server-sent events reader over fetch(): the browser's EventSource cannot send an
// Authorization header. It parses the stream as the HTML standard says (id, event, data,
// retry; comments ignored), remembers the last id, and after a dropped connection
// reconnects with Last-Event-ID so the server resumes exactly after it.

export function openStream(url, { token, onEvent, onState, after = 0 }) {
  let lastId = after > 0 ? String(after) : null;
  let retry = 1000;
  let stopped = false;
  let controller = null;

  async function connect() {
    while (!stopped) {
      controller = new AbortController();
      const headers = { Authorization: `Bearer ${token}`, Accept: "text/event-stream" };
      if (lastId !== null) headers["Last-Event-ID"] = lastId;
      try {
        const res = await fetch(url, { headers, signal: controller.signal, cache: "no-store" });
        if (res.status === 404 || res.status === 401 || res.status === 403) {
          onState?.("failed", res.status);
          return;
        }
        if (!res.ok || !res.body) throw new Error(`HTTP ${res.status}`);
        onState?.("open");
        await read(res.body.getReader());
        // The server ended the stream (a closed session, or a client too far behind).
        onState?.("ended");
      } catch (err) {
        if (stopped) return;
        onState?.("retrying", String(err));
      }
      if (!stopped) await new Promise((r) => setTimeout(r, retry));
    }
  }

  async function read(reader) {
    const decoder = new TextDecoder();
    let buf = "";
    let ev = { id: null, event: "message", data: [] };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += decoder.decode(value, { stream: true });
      let nl;
      while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + (buf.startsWith("\r\n", nl) ? 2 : 1));
        if (line === "") {
          if (ev.data.length) {
            if (ev.id !== null) lastId = ev.id;
            onEvent({ id: ev.id, event: ev.event, data: ev.data.join("\n") });
          }
          ev = { id: null, event: "message", data: [] };
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let val = colon < 0 ? "" : line.slice(colon + 1);
        if (val.startsWith(" ")) val = val.slice(1);
        if (field === "data") ev.data.push(val);
        else if (field === "event") ev.event = val;
        else if (field === "id") ev.id = val;
        else if (field === "retry" && /^\d+$/.test(val)) retry = Number(val);
      }
    }
  }

  connect();
  return {
    get lastId() {
      return lastId;
    },
    // Drop the connection as a network failure would; the reader reconnects by itself.
    drop() {
      controller?.abort();
    },
    close() {
      stopped = true;
      controller?.abort();
    },
  };
}
