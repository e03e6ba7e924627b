// A seed 002 (AgentProtocol v0.1) client written from the seed's text
// alone: its own Ed25519 key, agent ids as base64 public keys, signatures
// over JSON.stringify with recursively sorted keys, and the HTTP and
// WebSocket bindings. It knows nothing of meshagent.
//
// usage: node --experimental-websocket seed002_client.mjs NODE_API NODE_KEY PROVIDER_KEY EXCHANGE_DIR
// Prints one JSON line per step; exits non-zero on the first failure.
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

const [api, nodeKey, providerKey, exchangeDir] = process.argv.slice(2);

const { publicKey, privateKey } = crypto.generateKeyPairSync('ed25519');
const b64url = publicKey.export({ format: 'jwk' }).x;
const myId = Buffer.from(b64url, 'base64url').toString('base64');

// "Sort message fields canonically (recursive) ... JSON.stringify with sorted keys"
function canonical(v) {
  if (Array.isArray(v)) return '[' + v.map(canonical).join(',') + ']';
  if (v && typeof v === 'object') {
    return '{' + Object.keys(v).sort().map((k) => JSON.stringify(k) + ':' + canonical(v[k])).join(',') + '}';
  }
  return JSON.stringify(v);
}

function signed(type, to, payload) {
  const msg = {
    protocol: 'agentprotocol/0.1',
    id: crypto.randomUUID(),
    timestamp: new Date().toISOString(),
    from: { agentId: myId, name: 'seed-002-client', capabilities: ['agentprotocol:core'] },
    to: { agentId: to, broadcast: false },
    type,
    payload,
  };
  msg.signature = crypto.sign(null, Buffer.from(canonical(msg)), privateKey).toString('base64');
  return msg;
}

// "Extract and remove signature, canonicalize, verify against sender's public key"
function verify(msg) {
  const { signature, ...rest } = msg;
  const key = crypto.createPublicKey({
    key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(msg.from.agentId, 'base64').toString('base64url') },
    format: 'jwk',
  });
  if (!crypto.verify(null, Buffer.from(canonical(rest)), key, Buffer.from(signature, 'base64'))) {
    throw new Error('answer signature does not verify: ' + JSON.stringify(msg));
  }
  if (msg.to.agentId !== myId) throw new Error('answer not addressed to me: ' + JSON.stringify(msg.to));
  return msg;
}

function out(step, msg) {
  console.log(JSON.stringify({ step, type: msg.type, from: msg.from.agentId, payload: msg.payload, hasReceipt: !!(msg.metadata && msg.metadata.receipt) }));
}

async function post(msg) {
  const r = await fetch(`http://${api}/agentprotocol`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(msg) });
  return { status: r.status, body: await r.json() };
}

// HTTP: hello, then a request to another agent through the node.
let r = await post(signed('hello', nodeKey, { version: '0.1', features: ['signed-messages'] }));
out('http-hello', verify(r.body));
r = await post(signed('request', providerKey, { action: 'echo', correlationId: 'req-123', params: { code: 'function add(a, b) { return a + b; }', language: 'javascript' }, timeout: 30000 }));
out('http-request', verify(r.body));
// A tampered request is refused.
const bad = signed('request', providerKey, { action: 'echo', correlationId: 'req-bad', params: { n: 1 } });
bad.payload.params.n = 2;
r = await post(bad);
console.log(JSON.stringify({ step: 'http-tampered', status: r.status, type: r.body.type, code: r.body.payload && r.body.payload.code }));

// WebSocket: progress, then the answer.
const ws = new WebSocket(`ws://${api}/agentprotocol/ws`);
await new Promise((res, rej) => { ws.onopen = res; ws.onerror = rej; });
const done = new Promise((res, rej) => {
  ws.onmessage = (ev) => {
    const msg = verify(JSON.parse(ev.data));
    out('ws', msg);
    if (msg.type !== 'response' || msg.payload.status !== 'in_progress') res();
  };
  ws.onerror = rej;
});
ws.send(JSON.stringify(signed('request', providerKey, { action: 'echo', correlationId: 'ws-1', params: { n: 2 } })));
await done;
ws.close();

// File exchange: {from}-{to}-{timestamp}-{id}.json, ids file-safe (base64url).
if (exchangeDir) {
  const msg = signed('request', providerKey, { action: 'echo', correlationId: 'file-1', params: { via: 'file' } });
  const fileId = (id) => Buffer.from(id, 'base64').toString('base64url');
  const name = `${fileId(myId)}-${fileId(nodeKey)}-${Date.now()}-${msg.id}.json`;
  fs.writeFileSync(path.join(exchangeDir, name + '.tmp'), JSON.stringify(msg));
  fs.renameSync(path.join(exchangeDir, name + '.tmp'), path.join(exchangeDir, name));
  const prefix = `${fileId(nodeKey)}-${fileId(myId)}-`;
  const deadline = Date.now() + 60000;
  for (;;) {
    const answer = fs.readdirSync(exchangeDir).find((f) => f.startsWith(prefix) && f.endsWith('.json'));
    if (answer) {
      out('file', verify(JSON.parse(fs.readFileSync(path.join(exchangeDir, answer)))));
      break;
    }
    if (Date.now() > deadline) throw new Error('no answer file in ' + exchangeDir);
    await new Promise((res) => setTimeout(res, 100));
  }
}
