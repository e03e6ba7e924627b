// An independent implementation of meshagent's message signing, in plain
// Node.js with no packages, for TestNodeInterop: it canonicalises the way a
// JavaScript client following seed 002 would (sort keys recursively, then
// JSON.stringify) and signs and verifies with Node's own Ed25519.
//
// Usage (input is a JSON array on stdin, output a JSON array on stdout):
//
//   node interop.js canon    [doc, …]                          -> [canonical string, …]
//   node interop.js sign     [{seed_hex, doc}, …]              -> [signed JSON string, …]
//   node interop.js verify   [{public_key_base64, signed}, …]  -> [true|false, …]
//
// verify exits with status 1 if any signature does not verify; any other
// failure exits with status 2.
'use strict';

const crypto = require('crypto');

// Seed 002: "Sort message fields canonically (recursive) … JSON.stringify
// with sorted keys". Array.prototype.sort compares UTF-16 code units and
// JSON.stringify prints numbers and strings as RFC 8785 requires.
function canonicalize(v) {
  if (v === null || typeof v !== 'object') {
    return JSON.stringify(v);
  }
  if (Array.isArray(v)) {
    return '[' + v.map(canonicalize).join(',') + ']';
  }
  return '{' + Object.keys(v).sort()
    .map((k) => JSON.stringify(k) + ':' + canonicalize(v[k]))
    .join(',') + '}';
}

// PKCS#8 and SPKI DER wrappers for raw Ed25519 keys (RFC 8410).
const PKCS8_PREFIX = Buffer.from('302e020100300506032b657004220420', 'hex');
const SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');

function privateKeyFromSeed(seedHex) {
  const seed = Buffer.from(seedHex, 'hex');
  if (seed.length !== 32) throw new Error('seed must be 32 bytes');
  return crypto.createPrivateKey({ key: Buffer.concat([PKCS8_PREFIX, seed]), format: 'der', type: 'pkcs8' });
}

function publicKeyFromBase64(b64) {
  const raw = Buffer.from(b64, 'base64');
  if (raw.length !== 32) throw new Error('public key must be 32 bytes');
  return crypto.createPublicKey({ key: Buffer.concat([SPKI_PREFIX, raw]), format: 'der', type: 'spki' });
}

function signDoc(seedHex, doc) {
  const msg = Object.assign({}, doc);
  delete msg.signature;
  const sig = crypto.sign(null, Buffer.from(canonicalize(msg), 'utf8'), privateKeyFromSeed(seedHex));
  msg.signature = sig.toString('base64');
  return canonicalize(msg);
}

function verifyDoc(publicKeyBase64, signed) {
  const msg = JSON.parse(signed);
  if (typeof msg.signature !== 'string') return false;
  const sig = Buffer.from(msg.signature, 'base64');
  delete msg.signature;
  if (sig.length !== 64) return false;
  return crypto.verify(null, Buffer.from(canonicalize(msg), 'utf8'), publicKeyFromBase64(publicKeyBase64), sig);
}

function main() {
  const mode = process.argv[2];
  const input = JSON.parse(require('fs').readFileSync(0, 'utf8'));
  let out;
  switch (mode) {
    case 'canon':
      out = input.map(canonicalize);
      break;
    case 'sign':
      out = input.map((x) => signDoc(x.seed_hex, x.doc));
      break;
    case 'verify':
      out = input.map((x) => verifyDoc(x.public_key_base64, x.signed));
      break;
    default:
      throw new Error('usage: node interop.js canon|sign|verify < input.json');
  }
  process.stdout.write(JSON.stringify(out));
  if (mode === 'verify' && out.includes(false)) process.exitCode = 1;
}

try {
  main();
} catch (e) {
  process.stderr.write(String(e && e.stack || e) + '\n');
  process.exitCode = 2;
}
