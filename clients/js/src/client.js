// The client of a node's local API: calls, discovery, topics, the bus.

import WebSocket from 'ws';

import { INVALID_PARAMS, RPCError } from './errors.js';
import { matchTopic } from './match.js';
import { Connection, Serial } from './rpc.js';
import { Server } from './serve.js';

export const VERSION = '0.1.0';

/** How many messages are held for subscriptions whose mesh.subscribe answer has not arrived yet. */
const MAX_EARLY = 4096;

/** A promise with its resolve function. */
function deferred() {
  let resolve;
  const promise = new Promise((r) => { resolve = r; });
  return { promise, resolve };
}

/** Copies the members of extra whose value is neither undefined nor null onto obj. */
function put(obj, extra) {
  for (const [k, v] of Object.entries(extra)) if (v !== undefined && v !== null) obj[k] = v;
  return obj;
}

/**
 * Opens a connection to a node's local API and initializes it. The second
 * argument is the client id, or options {clientId, clientInfo, logger,
 * maxPayload}.
 */
export async function connect(url = 'ws://127.0.0.1:7892/', opts = {}) {
  const o = typeof opts === 'string' ? { clientId: opts } : opts;
  const ws = new WebSocket(url, { maxPayload: o.maxPayload ?? 16 << 20 });
  await new Promise((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', reject);
  });
  const client = new Client(new Connection(ws, o.logger ?? console));
  try {
    client.clientId = o.clientId || `js-${process.pid}-${Math.random().toString(16).slice(2, 10)}`;
    const init = await client.rpc.call('initialize', { clientId: client.clientId, clientInfo: o.clientInfo ?? { name: 'meshagent-client-js', version: VERSION } });
    client.serverId = init?.serverId;
    client.serverInfo = init?.serverInfo;
  } catch (err) {
    ws.close();
    throw err;
  }
  return client;
}

/**
 * A connection to a node's local API; build one with connect(). Every
 * method rejects with a MeshError for an AgentProtocol failure, an
 * RPCError for any other JSON-RPC error, and a ConnectionClosedError once
 * the connection is gone.
 */
export class Client extends Server {
  constructor(rpc) {
    super(rpc);
    this.clientId = this.serverId = this.serverInfo = undefined;
    this.progress = new Map(); // mesh.call request id -> [Serial, onProgress]
    this.found = new Map(); // mesh.discover request id -> [Serial, onFound]
    this.subs = new Map(); // mesh subscription id -> [Serial, handler]
    this.subscribing = 0; // mesh.subscribe calls waiting for their answer
    this.early = new Map(); // subscription id -> messages that came before its answer
    this.earlyCount = 0;
    this.answered = deferred(); // resolved (then replaced) as each mesh.subscribe call ends
    this.busSubs = []; // {topic, handler, dflt}, oldest first
    const route = (map, key) => (p) => {
      const entry = map.get(p?.requestId ?? p?.subscription);
      if (entry) entry[0].put(entry[1], p[key]);
    };
    rpc.onNotification('mesh.progress', route(this.progress, 'response'));
    rpc.onNotification('mesh.discovered', route(this.found, 'agent'));
    const message = route(this.subs, 'message');
    rpc.onNotification('mesh.message', (p) => {
      if (this.subs.has(p?.subscription) || !this.subscribing) return message(p);
      if (this.earlyCount >= MAX_EARLY) return undefined;
      this.earlyCount++;
      if (!this.early.has(p?.subscription)) this.early.set(p?.subscription, []);
      this.early.get(p?.subscription).push(p.message);
      return undefined;
    });
    rpc.onRequest('mesh.message', (p) => this.durableMessage(p ?? {}));
    for (const m of ['processMessage', 'sendMessage']) rpc.onRequest(m, (p) => this.delivery(p ?? {})); // seed 001 delivers with either
  }

  /** Closes the connection; running handlers are aborted. */
  close() { return this.rpc.close(); }

  /** Resolves when the connection has closed (the node went away, or close()). */
  get closed() { return this.rpc.closed; }

  // The mesh.

  /** The node's time, {timestamp}. */
  ping() { return this.rpc.call('ping', {}); }

  /** This node's identity: {agentId, publicKey, addrs}. */
  id() { return this.rpc.call('mesh.id', {}); }

  /** The node's peers, an array of PeerInfo objects. */
  peers() { return this.rpc.call('mesh.peers', {}); }

  /**
   * Declares this agent's status (seed 004's registry): 'available' or
   * 'busy', the bead it works on and how many beads it takes at once. The
   * whole status is replaced; resolves the status declared. Peers see it in
   * the next heartbeat, sent at once.
   */
  setStatus(status, { currentBead, maxConcurrentBeads } = {}) {
    const params = { status };
    if (currentBead !== undefined) params.currentBead = currentBead;
    if (maxConcurrentBeads !== undefined) params.maxConcurrentBeads = maxConcurrentBeads;
    return this.rpc.call('mesh.setStatus', params);
  }

  /**
   * A bead's shared context (seed 004) as this node holds it: {bead_id,
   * collaborating_agents, shared_context, version, patches}. The first access
   * makes the node follow the bead.
   */
  contextGet(beadId) { return this.rpc.call('mesh.contextGet', { beadId }); }

  /**
   * Replaces a bead's shared context with doc (an object) and publishes the
   * change to the bead's other members; resolves the context after it. Only
   * members change a bead: the first change makes this agent a member with
   * the agent ids members lists; a member's members replaces them; a
   * non-member gets MeshError UNAUTHORIZED.
   */
  contextSet(beadId, doc, { members } = {}) {
    const params = { beadId, context: doc };
    if (members !== undefined) params.members = members;
    return this.rpc.call('mesh.contextSet', params);
  }

  /**
   * Applies an RFC 7396 merge patch (an object; a member set to null is
   * removed) to a bead's shared context and publishes it; resolves the
   * context after it. Every member applies the patches in (hybrid logical
   * clock, agent id) order, so all converge. members as for contextSet.
   */
  contextPatch(beadId, patch, { members } = {}) {
    const params = { beadId, patch };
    if (members !== undefined) params.members = members;
    return this.rpc.call('mesh.contextPatch', params);
  }

  /**
   * This agent's audit log (a node started with --audit), newest first: an
   * array of {id, at, direction, from, to, capability, size, outcome,
   * duration_ms, params?}. since and until are RFC 3339 strings.
   */
  async audit({ agent, since, until, limit, before } = {}) {
    const params = Object.fromEntries(Object.entries({ agent, since, until, limit, before }).filter(([, v]) => v !== undefined));
    return (await this.rpc.call('mesh.audit', params)).entries;
  }

  /**
   * Calls a capability; resolves the final response {correlationId, status,
   * result, ...}. agentId names the provider (absent: the node chooses, and
   * the response's agentId says which); onProgress(response) gets each in_progress response,
   * in order, before this resolves; receipt asks for the provider's signed
   * response envelope (the response's receipt); taskId names the request for
   * taskStatus/taskCancel.
   */
  async call(capability, params, { agentId, timeoutMs, onProgress, receipt, taskId } = {}) {
    const p = put({ capability }, { agentId, params, timeoutMs, taskId });
    if (receipt) p.receipt = true;
    if (!onProgress) return this.rpc.call('mesh.call', p);
    return this.withStream(this.progress, `progress of ${capability}`, onProgress, (id, beforeResult) => this.rpc.call('mesh.call', p, { id, beforeResult }));
  }

  /**
   * Finds agents by capability name (or {keyword}); resolves seed 000's
   * SERVICES_AVAILABLE. onFound(peerInfo) is called for each agent as soon
   * as it is confirmed, and has been for all of them when this resolves.
   */
  async discover(capability, { keyword, timeoutMs, onFound } = {}) {
    const p = put({}, { capability, keyword, timeoutMs });
    if (!onFound) return this.rpc.call('mesh.discover', p);
    return this.withStream(this.found, `discovery of ${capability ?? keyword}`, onFound, (id, beforeResult) => this.rpc.call('mesh.discover', p, { id, beforeResult }));
  }

  async withStream(map, name, fn, run) {
    const id = this.rpc.newID();
    const serial = new Serial(name, this.rpc.logger);
    map.set(id, [serial, fn]);
    try {
      return await run(id, () => serial.drain());
    } finally {
      map.delete(id);
    }
  }

  /** Publishes a JSON object on a mesh topic; resolves {topic, peers}. RPCError -32007 when nobody subscribes. */
  publish(topic, payload, { filter, timeoutMs } = {}) {
    return this.rpc.call('mesh.publish', put({ topic, payload }, { filter, timeoutMs }));
  }

  /**
   * Subscribes to mesh topics matching pattern; resolves the subscription
   * id. handler(message) gets each {topic, from, payload, time, id} in
   * order (an async handler is awaited). durable names a durable
   * subscription that catches up on what it missed from a history keeper
   * (a relay, or a node with --keep-history). A durable subscription's
   * messages come one at a time, each answered to the node when handler
   * settles: the node moves the name's position past a message only then,
   * and sends the next after the answer. If handler throws (or rejects),
   * the answer is an error (a MeshError keeps its code), the message
   * counts as not processed, and the node delivers nothing more on this
   * subscription: unsubscribe, then subscribe again under the same name,
   * which starts with that message. Delivery is at least once: a message
   * whose answer did not reach the node (the process or the connection
   * ended first, or the node stopped before saving the position) comes
   * again with the same id and from.
   */
  async subscribe(pattern, handler, { durable } = {}) {
    this.subscribing++;
    let res;
    try {
      res = await this.rpc.call('mesh.subscribe', put({ pattern }, { durable }));
      this.subs.set(res.subscription, [new Serial(`subscription ${pattern}`, this.rpc.logger), handler]);
    } finally {
      this.subscribing--;
      // Durable messages that came before the answer wait for it.
      this.answered.resolve();
      this.answered = deferred();
    }
    const [serial] = this.subs.get(res.subscription);
    // Messages the node sent before its answer were held back for this id.
    const early = this.early.get(res.subscription) ?? [];
    this.early.delete(res.subscription);
    this.earlyCount -= early.length;
    if (!this.subscribing) {
      this.early.clear();
      this.earlyCount = 0;
    }
    for (const m of early) serial.put(handler, m);
    return res.subscription;
  }

  /** A durable subscription's message (mesh.message request): answered once its handler settled. */
  async durableMessage(p) {
    while (!this.subs.has(p.subscription) && this.subscribing) await this.answered.promise;
    const entry = this.subs.get(p.subscription);
    if (!entry) throw new RPCError(INVALID_PARAMS, `no subscription ${JSON.stringify(p.subscription)} on this client`);
    await entry[1](p.message);
    return {};
  }

  /** Ends a subscription made with subscribe. */
  unsubscribe(subscription) {
    this.subs.delete(subscription);
    return this.rpc.call('mesh.unsubscribe', { subscription });
  }

  /**
   * Drops the position the node keeps for a durable subscription name no
   * longer needed (unsubscribed first): the node keeps positions for a
   * bounded number of names, and a new name past it is refused with code
   * -32602. Resolves whether the node kept one.
   */
  async forgetDurable(durable) {
    const res = await this.rpc.call('mesh.forgetDurable', { durable });
    return res.forgotten;
  }

  /**
   * The durable subscription names the node keeps positions for:
   * {durables: [{name, bytes, active}], limit}, the names sorted, bytes
   * each saved position's size, active true while a subscription of the
   * name runs (it cannot be forgotten until unsubscribed), limit the most
   * names the node keeps. What to read when a new name is refused, before
   * forgetDurable.
   */
  durables() { return this.rpc.call('mesh.durables', {}); }

  /**
   * Submits a detached task; resolves {taskId, agentId, state} once the
   * provider accepted it. opts: {deadline ('24h' by default, at most
   * '168h'), timeoutMs, taskId}.
   */
  submit(agentId, capability, params, opts = {}) {
    return this.rpc.call('mesh.submit', put({ agentId, capability }, { params, deadline: opts.deadline, timeoutMs: opts.timeoutMs, taskId: opts.taskId }));
  }

  /** Waits for a submitted task to end; resolves its record (a failed or rejected one rejects with its MeshError). */
  wait(taskId, timeoutMs) { return this.rpc.call('mesh.taskWait', put({ taskId }, { timeoutMs })); }

  /** Lists the tasks the node keeps on disk, submitted and served. */
  async tasks(state) { return (await this.rpc.call('mesh.tasks', put({}, { state }))).tasks; }

  /** The operator's decision on an ESCALATED task this node serves; resolves the task. */
  resolve(taskId, approve, reason) { return this.rpc.call('mesh.taskResolve', put({ taskId, approve: approve === true }, { reason })); }

  /** The task (seed 003) of a request this node sent. */
  taskStatus(taskId, agentId) { return this.rpc.call('mesh.taskStatus', put({ taskId }, { agentId })); }

  /** Cancels a request this node sent; resolves its task. */
  taskCancel(taskId, agentId) { return this.rpc.call('mesh.taskCancel', put({ taskId }, { agentId })); }

  /** Asks agents to vote (seed 004): {agents, question, options, threshold, deadlineMs, context?}. */
  consensus(params) { return this.rpc.call('mesh.consensus', params); }

  // The seed 001 bus.

  /**
   * Subscribes to bus topics matching the pattern topic. handler(topic,
   * payload) answers each delivery: an object is sent as the ack
   * ({processed, should_retry, message, ...}), undefined or true acknowledge
   * {processed: true}, false {processed: false}; a throw makes the delivery
   * fail (the bus retries). policy is seed 001's propagation policy; group
   * joins a queue group (each message goes to one member).
   */
  async busSubscribe(topic, handler, { policy, group, defaultHandler } = {}) {
    const p = put({ topic }, { policy, group });
    if (defaultHandler) p.defaultHandler = true;
    const entry = { topic, handler, dflt: Boolean(defaultHandler) };
    this.busSubs.push(entry);
    try {
      return await this.rpc.call('subscribe', p);
    } catch (err) {
      this.busSubs = this.busSubs.filter((e) => e !== entry);
      throw err;
    }
  }

  /** Ends the bus subscription to topic. */
  async busUnsubscribe(topic, { defaultHandler } = {}) {
    const p = { topic };
    if (defaultHandler) p.defaultHandler = true;
    const res = await this.rpc.call('unsubscribe', p);
    this.busSubs = this.busSubs.filter((e) => e.topic !== topic || e.dflt !== Boolean(defaultHandler));
    return res;
  }

  /** Sends a message on the bus; resolves {success, acks, messageId, ...}. */
  busSend(topic, payload) { return this.rpc.call('sendMessage', { topic, payload }); }

  async delivery({ topic = '', payload }) {
    // The bus does not say which subscription matched: the newest matching
    // one answers, as the bus itself orders them. A default handler's
    // delivery matches none of its patterns.
    let subs = this.busSubs.filter((e) => matchTopic(e.topic, topic));
    if (subs.length === 0) subs = this.busSubs.filter((e) => e.dflt);
    if (subs.length === 0) throw new RPCError(INVALID_PARAMS, `no subscription matches ${JSON.stringify(topic)}`);
    const ack = await subs.at(-1).handler(topic, payload);
    if (ack === undefined || ack === null || ack === true) return { processed: true };
    if (ack === false) return { processed: false };
    return ack;
  }
}
