#!/usr/bin/env node
// A seed 001 bus client: JSON-RPC 2.0 over WebSocket, through the
// meshagent-client package (clients/js).
//
// It initializes, subscribes to a topic (answering the bus's processMessage
// requests with {"processed": true}), sends one message and prints the
// aggregated acks, pings, then prints what arrives on its subscription.
//
//   node client.js [--url URL] [--id ID] [--subscribe PATTERN]
//                  [--send TOPIC] [--text TEXT] [--count N]
//
// URL defaults to $MESHAGENT_BUS_URL, $BUB_BUS_URL, else ws://127.0.0.1:7892/.
// With --count N it exits after N deliveries; with 0 (the default) it runs
// until interrupted. Needs its dependencies installed (npm ci).
import { parseArgs } from 'node:util';
import { connect } from 'meshagent-client';

const { values: opt } = parseArgs({
  options: {
    url: { type: 'string', default: process.env.MESHAGENT_BUS_URL || process.env.BUB_BUS_URL || 'ws://127.0.0.1:7892/' },
    id: { type: 'string', default: process.env.BUB_AGENT_ID || `js-client-${process.pid}` },
    subscribe: { type: 'string', default: 'inbound:js' },
    send: { type: 'string', default: 'outbound:42' }, // '' to send nothing
    text: { type: 'string', default: 'hello from js' },
    count: { type: 'string', default: '0' }, // exit after N deliveries (0: run until interrupted)
  },
});
const count = Number(opt.count);

const bus = await connect(opt.url, { clientId: opt.id, clientInfo: { name: 'js-client', version: '1.0' } });
let received = 0;
let enough; // resolves after count deliveries
const done = new Promise((resolve) => { enough = resolve; });
bus.closed.then(() => {
  if (!count || received < count) {
    console.error('client.js: the bus closed the connection');
    process.exitCode = 1;
  }
});

console.log(`initialized: server ${bus.serverId}`);
await bus.busSubscribe(opt.subscribe, (topic, payload) => {
  console.log(`received ${topic}: ${JSON.stringify(payload)}`);
  // Stop only after this ack is on the wire: the client sends it once the
  // handler returns, before any setImmediate callback runs.
  if (count && ++received === count) setImmediate(enough);
  return { processed: true, message: `${opt.id} got it` };
});
console.log(`subscribed: ${opt.subscribe}`);
if (opt.send) {
  const res = await bus.busSend(opt.send, { type: 'plaintext_message', text: opt.text, sender: opt.id });
  console.log(`sent ${opt.send}: success=${res.success} messageId=${res.messageId}`);
  for (const ack of res.acks) console.log(`  ack ${ack.client_id}: processed=${ack.processed} ${ack.message ?? ''}`);
}
console.log(`ping: ${(await bus.ping()).timestamp}`);
if (count) {
  await done;
  await bus.close();
}
