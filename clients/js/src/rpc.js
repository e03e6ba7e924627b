// JSON-RPC 2.0 over one WebSocket: calls out, requests and notifications in.
//
// The node calls the client too (processMessage, mesh.handle,
// mesh.agentMessage), so one message listener routes each frame: a
// response settles the pending call with its id, a request runs its
// handler and sends the answer when it settles (other frames go on being
// read meanwhile), and a notification is handed to its handler at once.

import { ClientError, ConnectionClosedError, MeshError, METHOD_NOT_FOUND, RPCError, fromRPC } from './errors.js';

/** Runs callbacks one after another, in the order they were queued. */
export class Serial {
  constructor(name, logger) {
    this.name = name;
    this.logger = logger;
    this.tail = Promise.resolve();
  }

  put(fn, ...args) {
    this.tail = this.tail.then(() => fn(...args)).catch((err) => this.logger.error(`meshagent-client: ${this.name}: callback failed:`, err));
  }

  /** Resolves once every queued callback has run. */
  drain() {
    return this.tail;
  }
}

/** One JSON-RPC peer over an open ws WebSocket. */
export class Connection {
  constructor(ws, logger = console) {
    this.ws = ws;
    this.logger = logger;
    this.nextID = 1;
    this.pending = new Map(); // id -> {resolve, reject}
    this.requests = new Map(); // method -> async (params, abortController) => result
    this.notifications = new Map(); // method -> (params) => void
    this.running = new Set(); // AbortControllers of request handlers; aborted on close
    this.isClosed = false;
    this.closed = new Promise((resolve) => {
      ws.on('close', (code, reason) => {
        this.shutdown(`the node closed the connection (${code}${reason?.length ? ` ${reason}` : ''})`);
        resolve();
      });
    });
    ws.on('error', (err) => this.logger.error('meshagent-client: websocket error:', err));
    ws.on('message', (data) => this.receive(data));
  }

  onRequest(method, fn) { this.requests.set(method, fn); }

  onNotification(method, fn) { this.notifications.set(method, fn); }

  newID() { return this.nextID++; }

  /**
   * Sends a request and resolves with its result; rejects with a MeshError
   * or RPCError. id is newID() when the caller must know it; beforeResult
   * runs after the response arrived and before it is returned.
   */
  async call(method, params, { id = this.newID(), beforeResult } = {}) {
    if (this.isClosed) throw new ConnectionClosedError();
    const result = new Promise((resolve, reject) => this.pending.set(id, { resolve, reject }));
    try {
      await this.send({ jsonrpc: '2.0', id, method, ...(params === undefined ? {} : { params }) });
      const value = await result;
      if (beforeResult) await beforeResult();
      return value;
    } finally {
      this.pending.delete(id);
    }
  }

  notify(method, params) {
    return this.send({ jsonrpc: '2.0', method, ...(params === undefined ? {} : { params }) });
  }

  send(msg) {
    if (this.isClosed) return Promise.reject(new ConnectionClosedError());
    return new Promise((resolve, reject) => {
      this.ws.send(JSON.stringify(msg), (err) => (err ? reject(new ConnectionClosedError(`send: ${err.message}`)) : resolve()));
    });
  }

  close() {
    this.ws.close();
    return this.closed;
  }

  shutdown(why) {
    if (this.isClosed) return;
    this.isClosed = true;
    for (const p of this.pending.values()) p.reject(new ConnectionClosedError(why));
    for (const ac of this.running) ac.abort(new ConnectionClosedError(why));
  }

  receive(data) {
    let msg;
    try {
      msg = JSON.parse(data.toString());
    } catch {
      this.logger.error('meshagent-client: dropped a frame that is not JSON');
      return;
    }
    for (const m of Array.isArray(msg) ? msg : [msg]) {
      if (m !== null && typeof m === 'object') this.route(m);
    }
  }

  route(msg) {
    if (!('method' in msg)) { // a response to one of our calls
      const p = this.pending.get(msg.id);
      if (!p) return;
      this.pending.delete(msg.id);
      if ('error' in msg) p.reject(fromRPC(msg.error));
      else p.resolve(msg.result);
    } else if ('id' in msg) {
      this.answer(msg);
    } else {
      const fn = this.notifications.get(msg.method);
      try {
        fn?.(msg.params);
      } catch (err) {
        this.logger.error(`meshagent-client: notification ${msg.method}: handler failed:`, err);
      }
    }
  }

  async answer(msg) {
    const fn = this.requests.get(msg.method);
    const reply = { jsonrpc: '2.0', id: msg.id };
    if (!fn) {
      reply.error = { code: METHOD_NOT_FOUND, message: `method not found: ${msg.method}` };
    } else {
      const ac = new AbortController();
      this.running.add(ac);
      try {
        reply.result = (await fn(msg.params, ac)) ?? null;
      } catch (err) {
        reply.error = toRPCError(err, msg.method, this.logger);
      } finally {
        this.running.delete(ac);
      }
    }
    try {
      await this.send(reply);
    } catch (err) {
      if (!(err instanceof ClientError)) throw err; // closed while the handler ran: nobody to answer
    }
  }
}

function toRPCError(err, method, logger) {
  if (err instanceof MeshError) return err.toRPC();
  if (err instanceof RPCError) return { code: err.code, message: err.rpcMessage, ...(err.data === undefined ? {} : { data: err.data }) };
  logger.error(`meshagent-client: request ${method}: handler failed:`, err);
  return new MeshError('INTERNAL_ERROR', `handler failed: ${err?.name ?? 'Error'}: ${err?.message ?? err}`).toRPC();
}
