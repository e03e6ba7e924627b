// A client of a meshagent node's local API (JSON-RPC 2.0 over WebSocket).
//
//   import { connect } from 'meshagent-client';
//   const mesh = await connect('ws://127.0.0.1:7892/');
//   console.log(await mesh.call('echo', { text: 'hi' }, { agentId: '12D3KooW…' }));
//   await mesh.close();
//
// See the package README for every method, and for the serving API.
export { Client, VERSION, connect } from './client.js';
export { ClientError, ConnectionClosedError, Escalated, MESH_CODES, MeshError, RPCError } from './errors.js';
export { matchTopic } from './match.js';
