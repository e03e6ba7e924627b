// The Ed25519 public key inlined in a meshagent agent id (a libp2p peer ID:
// base58btc of the identity multihash of the protobuf-encoded public key),
// as a JWK, so that a card's signature is checked with no lookup.
const ALPHABET = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz';

function base58Decode(s) {
  let n = 0n;
  for (const ch of s) {
    const v = ALPHABET.indexOf(ch);
    if (v < 0) throw new Error(`not base58: ${ch}`);
    n = n * 58n + BigInt(v);
  }
  const bytes = [];
  while (n > 0n) {
    bytes.unshift(Number(n & 0xffn));
    n >>= 8n;
  }
  for (const ch of s) {
    if (ch !== '1') break;
    bytes.unshift(0);
  }
  return Uint8Array.from(bytes);
}

export function agentIdToJwk(id) {
  const b = base58Decode(id);
  // identity multihash (0x00, length 0x24) of PublicKey{Type: Ed25519 (0x08 0x01), Data: 32 bytes (0x12 0x20)}
  const prefix = [0x00, 0x24, 0x08, 0x01, 0x12, 0x20];
  if (b.length !== 38 || prefix.some((v, i) => b[i] !== v)) {
    throw new Error(`${id} is not an Ed25519 agent id`);
  }
  return { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(b.slice(6)).toString('base64url') };
}
