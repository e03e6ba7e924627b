// A serving agent against a real node (run by the Go test in clients/).
//
//   node test/e2e/serve-agent.js URL CAPABILITY
//
// Serves CAPABILITY (its input_schema: an object with a string "text")
// through the node at URL until it is killed, and prints "serving" once
// the node offers it. Each request prints "handled <text>" and sends the
// progress {"done": 0.5}; the text "escalate" sets the task ESCALATED and
// waits for its cancellation (printing "cancelled"); the text "approve-me"
// escalates it with the reason "a human decides", prints "escalated <task
// id>", waits for the operator's decision and answers {approved, reason,
// task: <task id>, by: "js"}; any other text is
// answered {"summary": <its first 10 characters>, "by": "js"}. It takes
// direct messages too, printing "message <subject>" for each and
// answering {"ack": <subject>, "by": "js"}.
//
// It calls other agents through its own node too: each line
// "call CAPABILITY [AGENT_ID]" read on standard input is a mesh.call with
// the params {"text": "hello from js"} (without agentId when AGENT_ID is
// absent), printed as "called CAPABILITY AGENT_ID|any {"agentId",
// "result"}" or "call failed CAPABILITY AGENT_ID|any <error>".
import { createInterface } from 'node:readline';
import { connect } from '../../src/index.js';

const [url, name] = process.argv.slice(2);
const schema = { type: 'object', required: ['text'], properties: { text: { type: 'string' } } };

async function handler(req) {
  const { text } = req.params;
  console.log(`handled ${text}`);
  await req.progress({ done: 0.5 });
  if (text === 'approve-me') {
    await req.escalate('a human decides');
    console.log(`escalated ${req.taskId}`);
    const d = await req.decision();
    return { approved: d.approved, reason: d.reason, task: req.taskId, by: 'js' };
  }
  if (text === 'escalate') {
    await req.setState('ESCALATED');
    await new Promise((resolve, reject) => {
      req.signal.addEventListener('abort', () => {
        console.log('cancelled');
        reject(req.signal.reason);
      });
    });
  }
  return { summary: text.slice(0, 10), by: 'js' };
}

const mesh = await connect(url, `${name}-agent`);
await mesh.serve({ name, description: 'summarizes, in JavaScript', input_schema: schema }, handler);
await mesh.onMessage((message) => {
  console.log(`message ${message.subject}`);
  return { ack: message.subject, by: 'js' };
});
console.log('serving');

createInterface({ input: process.stdin }).on('line', async (line) => {
  const [word, capability, agentId] = line.split(/\s+/).filter(Boolean);
  if (word !== 'call' || !capability) return;
  const target = agentId ?? 'any';
  try {
    const res = await mesh.call(capability, { text: 'hello from js' }, { agentId });
    console.log(`called ${capability} ${target} ${JSON.stringify({ agentId: res.agentId, result: res.result })}`);
  } catch (err) {
    console.log(`call failed ${capability} ${target} ${err}`);
  }
});
await mesh.closed;
