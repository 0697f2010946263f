// Drives a vertebra session through its AG-UI door with the official @ag-ui/client:
// argv: URL TOKEN, then steps as JSON on stdin ([{"say": text} | {"approve": true}]);
// prints one JSON line: each run's outcome and the agent's messages at the end.
import { HttpAgent } from "@ag-ui/client";

const [url, token] = process.argv.slice(2);
const steps = JSON.parse(await new Promise((ok) => {
  let data = "";
  process.stdin.on("data", (c) => (data += c));
  process.stdin.on("end", () => ok(data));
}));
const agent = new HttpAgent({ url, headers: { Authorization: `Bearer ${token}` }, threadId: "thread-1" });
const runs = [];
let n = 0;
for (const step of steps) {
  n += 1;
  let outcome = null;
  let interrupts = [];
  const events = [];
  const subscriber = {
    onEvent: ({ event }) => { events.push(event.type); },
    onRunFinishedEvent: (e) => { outcome = e.outcome; interrupts = e.interrupts || []; },
    onRunErrorEvent: ({ event }) => { outcome = "error:" + event.message; },
  };
  if (step.say !== undefined) {
    agent.addMessage({ id: `m${n}`, role: "user", content: step.say });
    await agent.runAgent({ runId: `run-${n}` }, subscriber);
  } else {
    const resume = agent.pendingInterrupts.map((i) => ({
      interruptId: i.id, status: "resolved", payload: { approve: step.approve, note: "from node" },
    }));
    await agent.runAgent({ runId: `run-${n}`, resume }, subscriber);
  }
  runs.push({ outcome, interrupts: interrupts.map((i) => i.id), events });
}
const messages = agent.messages.map((m) => ({
  role: m.role, content: m.content ?? null,
  toolCalls: (m.toolCalls || []).map((c) => ({ name: c.function.name, arguments: c.function.arguments })),
  toolCallId: m.toolCallId ?? null,
}));
console.log(JSON.stringify({ runs, messages }));
