// A scripted stand-in for a node's local API, for the client's unit tests.
// It answers initialize by itself and queues every other message the client
// sends, so that a test reads exactly what went over the wire and answers
// (or calls the client) as the node would.
import { WebSocketServer } from 'ws';

export class FakeNode {
  async start() {
    this.inbox = [];
    this.waiters = [];
    this.ids = 1000;
    this.wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    await new Promise((resolve) => this.wss.once('listening', resolve));
    this.url = `ws://127.0.0.1:${this.wss.address().port}/`;
    this.wss.on('connection', (ws) => {
      this.ws = ws;
      ws.on('message', (data) => {
        const msg = JSON.parse(data.toString());
        if (msg.method === 'initialize') {
          this.init = msg.params;
          this.send({ jsonrpc: '2.0', id: msg.id, result: { serverId: '12D3KooWFake', serverInfo: { name: 'fake' }, capabilities: {} } });
          return;
        }
        const w = this.waiters.shift();
        if (w) w(msg);
        else this.inbox.push(msg);
      });
    });
    return this;
  }

  async stop() {
    for (const c of this.wss.clients) c.terminate();
    await new Promise((resolve) => this.wss.close(resolve));
  }

  send(msg) { this.ws.send(JSON.stringify(msg)); }

  /** The next message from the client; throws if it is not method. */
  async next(method, timeoutMs = 5000) {
    const msg = this.inbox.length ? this.inbox.shift() : await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no message from the client within ${timeoutMs} ms (want ${method})`)), timeoutMs);
      this.waiters.push((m) => { clearTimeout(timer); resolve(m); });
    });
    if (method !== undefined && msg.method !== method) throw new Error(`got ${JSON.stringify(msg)}, want method ${method}`);
    return msg;
  }

  reply(msg, result, error) {
    this.send(error !== undefined ? { jsonrpc: '2.0', id: msg.id, error } : { jsonrpc: '2.0', id: msg.id, result: result ?? null });
  }

  notify(method, params) { this.send({ jsonrpc: '2.0', method, params }); }

  /** Sends a request to the client; returns its id (the answer comes via answer()). */
  request(method, params) {
    const id = ++this.ids;
    this.send({ jsonrpc: '2.0', id, method, params });
    return id;
  }

  /** The client's response to request id. */
  async answer(id) {
    const msg = await this.next();
    if (msg.id !== id || 'method' in msg) throw new Error(`got ${JSON.stringify(msg)}, want the response to ${id}`);
    return msg;
  }
}
