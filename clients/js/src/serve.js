// Serving capabilities and receiving direct messages over the local API.
//
// The node runs every check (signature, ACL, policy, input schema, rate
// limits) before it calls mesh.handle, so a handler sees only requests it
// may answer. mesh.cancel aborts the request's AbortSignal; a handler that
// settles after its cancellation is answered INTERNAL_ERROR "cancelled",
// never with its result.

import { MeshError } from './errors.js';

/** How many direct-message ids are remembered with their first answer. */
export const MESSAGE_DEDUP = 4096;

/** The serving half of a Client: mesh.serve, mesh.handle, direct messages. */
export class Server {
  constructor(rpc) {
    this.rpc = rpc;
    this.handlers = new Map(); // capability name -> handler(request)
    this.runningTasks = new Map(); // task id -> AbortController of its mesh.handle
    this.decisions = new Map(); // task id -> {promise, resolve} of the operator's decision
    this.messageHandler = null;
    this.answers = new Map(); // message_id -> promise of the first answer, oldest first
    rpc.onRequest('mesh.handle', (p, ac) => this.handle(p ?? {}, ac));
    rpc.onRequest('mesh.agentMessage', (p) => this.agentMessage(p ?? {}));
    rpc.onNotification('mesh.cancel', (p) => this.runningTasks.get(p?.taskId)?.abort(new MeshError('INTERNAL_ERROR', 'cancelled')));
    rpc.onNotification('mesh.taskResolved', (p) => this.decisions.get(p?.taskId)?.resolve({ approved: p.approved === true, reason: p.reason ?? '' }));
  }

  /**
   * Serves a capability through this node; resolves {serving: [names]}.
   * capability is seed 000's object (name, description, input_schema,
   * output_schema, keywords, authorized_requester_ids, idempotent), without
   * a handler. handler(request) gets {taskId (the id the requester knows
   * the task by), requester, capability, params, correlationId, deadline (a
   * Date or null), signal, progress(result), setState(state),
   * escalate(reason), decision(), onResolved(callback)}; what it returns (or
   * resolves) is the result; throwing a MeshError answers with that code,
   * an Escalated leaves the answer to the operator's decision, anything
   * else answers INTERNAL_ERROR. escalate(reason) marks the task ESCALATED;
   * decision() resolves, and onResolved(callback) is called with, the
   * operator's decision {approved, reason}.
   */
  async serve(capability, handler) {
    if (capability === null || typeof capability !== 'object' || !capability.name) throw new TypeError('a capability is an object with a name');
    if ('handler' in capability) throw new TypeError('a served capability has no handler field: the handler is this client');
    const { name } = capability;
    const previous = this.handlers.get(name);
    this.handlers.set(name, handler); // before the node can call it
    try {
      return await this.rpc.call('mesh.serve', { capabilities: [capability] });
    } catch (err) {
      if (previous === undefined) this.handlers.delete(name);
      else this.handlers.set(name, previous);
      throw err;
    }
  }

  /** Stops serving the named capabilities; resolves {serving: [names still served]}. */
  async unserve(...names) {
    const res = await this.rpc.call('mesh.unserve', { capabilities: names });
    for (const name of names) this.handlers.delete(name);
    return res;
  }

  /**
   * Receives direct messages (seed 004 agent_message): handler(message,
   * from) returns the response. A message id seen again gets the first
   * answer without calling handler again.
   */
  onMessage(handler) {
    this.messageHandler = handler;
    return this.rpc.call('mesh.onMessage', {});
  }

  /**
   * Sends a direct message; resolves {messageId, queued, response?}.
   * message is seed 004's agent_message: message_id (the node makes one if
   * absent), subject, body, priority, requires_response, context.
   */
  sendMessage(agentId, message) {
    return this.rpc.call('mesh.sendMessage', { agentId, message });
  }

  async handle(p, ac) {
    const handler = this.handlers.get(p.capability);
    if (!handler) throw new MeshError('CAPABILITY_NOT_SUPPORTED', `this client does not serve ${JSON.stringify(p.capability)}`, { available: [...this.handlers.keys()].sort() });
    const deadline = p.deadline ? new Date(p.deadline) : null;
    let resolveDecision;
    const decided = new Promise((resolve) => { resolveDecision = resolve; });
    this.decisions.set(p.taskId, { resolve: resolveDecision });
    const request = {
      taskId: p.requesterTaskId || p.taskId,
      requester: p.requester,
      capability: p.capability,
      params: p.params,
      correlationId: p.correlationId,
      deadline: deadline && !Number.isNaN(deadline.getTime()) ? deadline : null,
      signal: ac.signal,
      progress: (result) => this.rpc.notify('mesh.progress', { taskId: p.taskId, result }),
      setState: (state) => this.rpc.notify('mesh.setState', { taskId: p.taskId, state }),
      escalate: (reason = '') => this.rpc.notify('mesh.setState', { taskId: p.taskId, state: 'ESCALATED', reason }),
      decision: () => decided,
      onResolved: (callback) => { decided.then(callback); },
    };
    this.runningTasks.set(p.taskId, ac);
    try {
      const result = await handler(request);
      if (ac.signal.aborted) throw ac.signal.reason;
      return result;
    } catch (err) {
      if (ac.signal.aborted) throw ac.signal.reason instanceof MeshError ? ac.signal.reason : new MeshError('INTERNAL_ERROR', 'cancelled');
      throw err;
    } finally {
      if (this.runningTasks.get(p.taskId) === ac) this.runningTasks.delete(p.taskId);
      this.decisions.delete(p.taskId);
    }
  }

  agentMessage(p) {
    if (!this.messageHandler) throw new MeshError('CAPABILITY_NOT_SUPPORTED', 'this client takes no direct messages');
    const message = p.message ?? {};
    const id = message.message_id;
    const run = async () => this.messageHandler(message, p.from);
    if (id === undefined || id === null) return run();
    let first = this.answers.get(id);
    if (!first) {
      first = run();
      first.catch(() => {}); // a failure is the answer, not an unhandled rejection
      this.answers.set(id, first);
      while (this.answers.size > MESSAGE_DEDUP) this.answers.delete(this.answers.keys().next().value);
    }
    return first;
  }
}
