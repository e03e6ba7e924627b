#!/usr/bin/env node
// A seed 001 bus client: JSON-RPC 2.0 over WebSocket, nothing
// meshagent-specific.
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
// until interrupted. Needs the ws package (npm ci).
import { parseArgs } from 'node:util';
import WebSocket from 'ws';

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

const ws = new WebSocket(opt.url);
const pending = new Map(); // our calls' ids -> {resolve, reject}
let nextId = 1;
let received = 0;
let enough; // resolves after count deliveries
const done = new Promise((resolve) => { enough = resolve; });

function call(method, params) {
  const id = nextId++;
  ws.send(JSON.stringify({ jsonrpc: '2.0', method, params, id }));
  return new Promise((resolve, reject) => pending.set(id, { resolve, reject }));
}

ws.on('message', (data) => {
  const msg = JSON.parse(data);
  const reply = (outcome) => ws.send(JSON.stringify({ jsonrpc: '2.0', id: msg.id, ...outcome }));
  if (!('method' in msg)) { // the response to one of our calls
    const p = pending.get(msg.id);
    pending.delete(msg.id);
    if (msg.error) p?.reject(new Error(`${msg.error.code}: ${msg.error.message}`));
    else p?.resolve(msg.result);
  } else if (msg.method === 'processMessage' || msg.method === 'sendMessage') { // a delivery: ack it
    if ('id' in msg) reply({ result: { processed: true, message: `${opt.id} got it` } });
    console.log(`received ${msg.params.topic}: ${JSON.stringify(msg.params.payload)}`);
    if (count && ++received === count) enough();
  } else if ('id' in msg) {
    reply({ error: { code: -32601, message: 'method not found' } });
  }
});
ws.on('close', () => {
  for (const p of pending.values()) p.reject(new Error('the bus closed the connection'));
  if (!count || received < count) {
    console.error('client.js: the bus closed the connection');
    process.exitCode = 1;
  }
});
await new Promise((resolve, reject) => { ws.once('open', resolve); ws.once('error', reject); });

const init = await call('initialize', { clientId: opt.id, clientInfo: { name: 'js-client', version: '1.0' } });
console.log(`initialized: server ${init.serverId}`);
await call('subscribe', { topic: opt.subscribe });
console.log(`subscribed: ${opt.subscribe}`);
if (opt.send) {
  const res = await call('sendMessage', { topic: opt.send, payload: { type: 'plaintext_message', text: opt.text, sender: opt.id } });
  console.log(`sent ${opt.send}: success=${res.success} messageId=${res.messageId}`);
  for (const ack of res.acks) console.log(`  ack ${ack.client_id}: processed=${ack.processed} ${ack.message ?? ''}`);
}
console.log(`ping: ${(await call('ping', {})).timestamp}`);
if (count) {
  await done;
  ws.close();
}
