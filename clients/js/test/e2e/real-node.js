// The package against two real nodes (run by the Go test in clients/).
//
//   node test/e2e/real-node.js URL_A URL_B AGENT_A
//
// Node A serves the built-in echo; B is bootstrapped to A. Prints one
// "ok: ..." line per check and exits non-zero at the first failure.
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';

import { MeshError, RPCError, connect } from '../../src/index.js';

const SETTLE_MS = 20000; // how long the mesh may take to settle (directory, topic peers)
const [urlA, urlB, agentA] = process.argv.slice(2);

function check(cond, what) {
  if (!cond) throw new Error(`FAIL ${what}`);
  console.log(`ok: ${what}`);
}

// fn() until it resolves truthy without a mesh or JSON-RPC error.
async function retry(what, fn) {
  const end = Date.now() + SETTLE_MS;
  let last;
  while (Date.now() < end) {
    try {
      const res = await fn();
      if (res) return res;
      last = 'not yet';
    } catch (err) {
      if (!(err instanceof MeshError || err instanceof RPCError)) throw err;
      last = err;
    }
    await sleep(200);
  }
  throw new Error(`FAIL ${what}: ${last}`);
}

const a = await connect(urlA, 'js-e2e-a');
const b = await connect(urlB, 'js-e2e-b');
check((await a.id()).agentId === agentA, 'mesh.id names node A');
const agentB = (await b.id()).agentId;

// A declared status reaches the other node in a heartbeat.
const declared = await a.setStatus('busy', { currentBead: 'bd-js', maxConcurrentBeads: 2 });
check(declared.status === 'busy' && declared.currentBead === 'bd-js' && declared.maxConcurrentBeads === 2, 'setStatus answers the status');
await retry("node B sees node A's declared status", async () =>
  (await b.peers()).some((p) => p.agentId === agentA && p.status === 'busy' && p.currentBead === 'bd-js'));
await a.setStatus('available');

// A shared bead context: B follows the bead, A sets and patches it, and B
// reads the merged document (live, or from A's history within a catch-up).
await b.contextGet('bd-ctx-js');
await a.contextSet('bd-ctx-js', { files_modified: ['src/auth.go'], review_status: 'new', owner: 'a' });
const mine = await a.contextPatch('bd-ctx-js', { review_status: 'in_progress', owner: null, test_results: { passed: 14, failed: 1 } });
const merged = JSON.stringify({ files_modified: ['src/auth.go'], review_status: 'in_progress', test_results: { failed: 1, passed: 14 } });
check(JSON.stringify(mine.shared_context) === merged && mine.patches === 2, 'contextPatch answers the merged document');
await retry('node B reads the merged context', async () => {
  const got = await b.contextGet('bd-ctx-js');
  return JSON.stringify(got.shared_context) === merged && JSON.stringify(got.version) === JSON.stringify(mine.version)
    && got.message_history.length === 2 && got.message_history.every((h) => h.from === agentA);
});
check(true, 'context patched on A is merged on B');
try {
  await b.contextPatch('bd-ctx-js', { review_status: 'hijacked' });
  check(false, "a non-member's patch refused");
} catch (err) {
  check(err instanceof MeshError && err.code === 'UNAUTHORIZED', `a non-member's patch is MeshError ${err.code}`);
}

// A built-in capability, with a progress callback and a task id.
const taskId = `js-${randomUUID().slice(0, 12)}`;
const progress = [];
let res = await b.call('echo', { text: 'hello from js' }, { agentId: agentA, timeoutMs: 10000, onProgress: (p) => progress.push(p), taskId });
check(res.status === 'success' && res.result.text === 'hello from js', 'call echo');
const task = await b.taskStatus(taskId, agentA);
check(task.state === 'COMPLETED', `task status ${task.state}`);

const found = [];
await retry('discover finds node A', async () => {
  const r = await b.discover('echo', { timeoutMs: 3000, onFound: (p) => found.push(p) });
  return r.services_found.some((s) => s.agent_id === agentA);
});
check(found.some((p) => p.agentId === agentA), 'discover echo finds node A (streamed too)');

// A typed error: an unknown capability.
try {
  await b.call('no.such.capability', {}, { agentId: agentA });
  check(false, 'unknown capability refused');
} catch (err) {
  check(err instanceof MeshError && err.code === 'CAPABILITY_NOT_SUPPORTED' && err.rpcCode === -32013,
    `unknown capability is MeshError ${err.code} (${err.rpcCode})`);
}

// Topics between the two nodes.
let gotMessage;
const message = new Promise((resolve) => { gotMessage = resolve; });
const sub = await a.subscribe('news:*', (m) => gotMessage(m));
await retry('publish news:js', () => b.publish('news:js', { n: 1, from: 'js' }, { timeoutMs: 2000 }));
const m = await Promise.race([message, sleep(SETTLE_MS).then(() => { throw new Error('FAIL no message on news:*'); })]);
check(m.topic === 'news:js' && m.payload.from === 'js' && m.from === agentB, "subscribe on A gets B's publish");
await a.unsubscribe(sub);

// The seed 001 bus on node A: one client subscribes, another sends.
const bus = await connect(urlA, 'js-e2e-bus');
await bus.busSubscribe('inbound:js-e2e', (topic, payload) => ({ processed: true, message: `bus got ${payload.text}` }));
res = await a.busSend('inbound:js-e2e', { type: 'plaintext_message', text: 'hi' });
check(res.success && res.acks.some((k) => k.client_id === 'js-e2e-bus' && k.processed && k.message === 'bus got hi'), 'bus round trip');

await Promise.all([a.close(), b.close(), bus.close()]);
console.log('e2e: ok');
