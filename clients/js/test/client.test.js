// The client against a fake node: every method's wire shape, and the errors.
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';

import { ConnectionClosedError, MeshError, RPCError, connect, matchTopic } from '../src/index.js';
import { FakeNode } from './fakenode.js';

describe('client', () => {
  let node, client;
  beforeEach(async () => {
    node = await new FakeNode().start();
    client = await connect(node.url, { clientId: 'js-test', clientInfo: { name: 't', version: '1' } });
  });
  afterEach(async () => {
    await client.close();
    await node.stop();
  });

  it('initializes', () => {
    assert.deepEqual(node.init, { clientId: 'js-test', clientInfo: { name: 't', version: '1' } });
    assert.equal(client.serverId, '12D3KooWFake');
  });

  it('accepts the client id as the second argument', async () => {
    const c = await connect(node.url, 'js-other');
    assert.equal(node.init.clientId, 'js-other');
    await c.close();
  });

  it('delivers progress in order, before the result', async () => {
    const seen = [];
    const call = client.call('echo', { text: 'hi' }, { agentId: '12D3KooWA', timeoutMs: 500, onProgress: (r) => seen.push(r.result), receipt: true });
    const req = await node.next('mesh.call');
    assert.deepEqual(req.params, { capability: 'echo', agentId: '12D3KooWA', params: { text: 'hi' }, timeoutMs: 500, receipt: true });
    for (const i of [1, 2]) node.notify('mesh.progress', { requestId: req.id, response: { status: 'in_progress', result: i } });
    node.notify('mesh.progress', { requestId: 999999, response: { result: "another call's" } });
    node.reply(req, { correlationId: 'c1', status: 'success', result: { text: 'hi' } });
    assert.deepEqual((await call).result, { text: 'hi' });
    assert.deepEqual(seen, [1, 2]);
  });

  it('sends no agentId when none is given', async () => {
    const call = client.call('summarize');
    const req = await node.next('mesh.call');
    assert.deepEqual(req.params, { capability: 'summarize' });
    node.reply(req, { status: 'success' });
    await call;
  });

  it('types AgentProtocol errors', async () => {
    const call = client.call('secret', undefined, { agentId: '12D3KooWA' });
    const req = await node.next('mesh.call');
    node.reply(req, undefined, { code: -32017, message: 'not on the list', data: { code: 'UNAUTHORIZED', details: { who: 'me' }, correlationId: 'c9' } });
    await assert.rejects(call, (e) => e instanceof MeshError && e.code === 'UNAUTHORIZED' && e.rpcCode === -32017 &&
      e.details.who === 'me' && e.correlationId === 'c9');
  });

  it('keeps other JSON-RPC errors apart', async () => {
    const pub = client.publish('news:1', { a: 1 }, { filter: { personaTypes: ['qa'] }, timeoutMs: 100 });
    const req = await node.next('mesh.publish');
    assert.deepEqual(req.params, { topic: 'news:1', payload: { a: 1 }, filter: { personaTypes: ['qa'] }, timeoutMs: 100 });
    node.reply(req, undefined, { code: -32007, message: 'no peers' });
    await assert.rejects(pub, (e) => e instanceof RPCError && !(e instanceof MeshError) && e.code === -32007);
  });

  it('sends each simple method as specified', async () => {
    const cases = [
      [() => client.ping(), 'ping', {}],
      [() => client.id(), 'mesh.id', {}],
      [() => client.peers(), 'mesh.peers', {}],
      [() => client.taskStatus('t1'), 'mesh.taskStatus', { taskId: 't1' }],
      [() => client.taskCancel('t1', '12D3KooWA'), 'mesh.taskCancel', { taskId: 't1', agentId: '12D3KooWA' }],
      [() => client.busSend('outbound:1', { x: 1 }), 'sendMessage', { topic: 'outbound:1', payload: { x: 1 } }],
      [() => client.busUnsubscribe('a:*'), 'unsubscribe', { topic: 'a:*' }],
      [() => client.sendMessage('12D3KooWB', { subject: 'hi', body: 'b' }), 'mesh.sendMessage', { agentId: '12D3KooWB', message: { subject: 'hi', body: 'b' } }],
      [() => client.unserve('summarize'), 'mesh.unserve', { capabilities: ['summarize'] }],
      [() => client.setStatus('busy', { currentBead: 'bd-1', maxConcurrentBeads: 2 }), 'mesh.setStatus', { status: 'busy', currentBead: 'bd-1', maxConcurrentBeads: 2 }],
      [() => client.setStatus('available'), 'mesh.setStatus', { status: 'available' }],
      [() => client.submit('12D3KooWB', 'approval', { x: 1 }, { deadline: '24h' }), 'mesh.submit', { agentId: '12D3KooWB', capability: 'approval', params: { x: 1 }, deadline: '24h' }],
      [() => client.wait('01t', 500), 'mesh.taskWait', { taskId: '01t', timeoutMs: 500 }],
      [() => client.resolve('01t', true, 'ok'), 'mesh.taskResolve', { taskId: '01t', approve: true, reason: 'ok' }],
      [() => client.resolve('01t', false), 'mesh.taskResolve', { taskId: '01t', approve: false }],
    ];
    for (const [run, method, params] of cases) {
      const p = run();
      const req = await node.next(method);
      assert.deepEqual(req.params, params, method);
      node.reply(req, { ok: method });
      assert.deepEqual(await p, { ok: method });
    }
  });

  it('returns the audit log\'s entries', async () => {
    const p = client.audit({ agent: '12D3KooWA', limit: 5 });
    const req = await node.next('mesh.audit');
    assert.deepEqual(req.params, { agent: '12D3KooWA', limit: 5 });
    node.reply(req, { entries: [{ id: 'e1' }] });
    assert.deepEqual(await p, [{ id: 'e1' }]);
  });

  it('lists tasks', async () => {
    const p = client.tasks('ESCALATED');
    const req = await node.next('mesh.tasks');
    assert.deepEqual(req.params, { state: 'ESCALATED' });
    node.reply(req, { tasks: [{ taskId: '01t' }] });
    assert.deepEqual(await p, [{ taskId: '01t' }]);
  });

  it('reads, sets and patches a bead context', async () => {
    for (const [call, method, params] of [
      [() => client.contextGet('bd-1'), 'mesh.contextGet', { beadId: 'bd-1' }],
      [() => client.contextSet('bd-1', { a: 1 }), 'mesh.contextSet', { beadId: 'bd-1', context: { a: 1 } }],
      [() => client.contextPatch('bd-1', { a: null }), 'mesh.contextPatch', { beadId: 'bd-1', patch: { a: null } }],
      [() => client.contextPatch('bd-1', {}, { members: ['ag-2'] }), 'mesh.contextPatch', { beadId: 'bd-1', patch: {}, members: ['ag-2'] }],
    ]) {
      const p = call();
      const req = await node.next(method);
      assert.deepEqual(req.params, params);
      node.reply(req, { bead_id: 'bd-1', shared_context: {} });
      assert.equal((await p).bead_id, 'bd-1');
    }
  });

  it('streams discovered agents', async () => {
    const found = [];
    const p = client.discover('echo', { timeoutMs: 200, onFound: (a) => found.push(a) });
    const req = await node.next('mesh.discover');
    assert.deepEqual(req.params, { capability: 'echo', timeoutMs: 200 });
    node.notify('mesh.discovered', { requestId: req.id, agent: { agentId: 'A' } });
    node.reply(req, { services_found: [{ agent_id: 'A' }], discovered_for_capability: 'echo' });
    assert.equal((await p).services_found[0].agent_id, 'A');
    assert.deepEqual(found, [{ agentId: 'A' }]);
  });

  it('delivers subscription messages in order', async () => {
    const got = [];
    let done;
    const all = new Promise((resolve) => { done = resolve; });
    const sub = client.subscribe('news:*', async (m) => { got.push(m.payload.n); if (got.length === 4) done(); });
    const req = await node.next('mesh.subscribe');
    assert.deepEqual(req.params, { pattern: 'news:*' });
    // A message may come before the answer naming its subscription.
    node.notify('mesh.message', { subscription: 's7', message: { topic: 'news:a', payload: { n: 0 } } });
    node.reply(req, { subscription: 's7' });
    assert.equal(await sub, 's7');
    for (const n of [1, 2, 3]) node.notify('mesh.message', { subscription: 's7', message: { topic: 'news:a', payload: { n } } });
    node.notify('mesh.message', { subscription: 's8', message: { payload: { n: 99 } } });
    await all;
    assert.deepEqual(got, [0, 1, 2, 3]);
    const uns = client.unsubscribe('s7');
    const ureq = await node.next('mesh.unsubscribe');
    assert.deepEqual(ureq.params, { subscription: 's7' });
    node.reply(ureq, true);
    await uns;
    const forget = client.forgetDurable('reader');
    const freq = await node.next('mesh.forgetDurable');
    assert.deepEqual(freq.params, { durable: 'reader' });
    node.reply(freq, { durable: 'reader', forgotten: true });
    assert.equal(await forget, true);
  });

  it('answers durable subscription messages once the handler settled', async () => {
    const got = [];
    const handler = async (m) => {
      const { n } = m.payload;
      if (n === 1) await new Promise((resolve) => { setTimeout(resolve, 50); }); // a slow handler
      if (n === 2) throw new MeshError('INTERNAL_ERROR', 'cannot take 2 now');
      if (n === 3) throw new Error('broken');
      got.push(n);
    };
    const sub = client.subscribe('news:*', handler, { durable: 'reader' });
    const req = await node.next('mesh.subscribe');
    assert.deepEqual(req.params, { pattern: 'news:*', durable: 'reader' });
    // The first message may come before the answer naming its
    // subscription: it is answered once the handler took it.
    let id = node.request('mesh.message', { subscription: 's7', message: { id: 'm0', payload: { n: 0 } } });
    node.reply(req, { subscription: 's7' });
    assert.equal(await sub, 's7');
    assert.deepEqual((await node.answer(id)).result, {});
    assert.deepEqual(got, [0]);
    // An async handler is awaited before the answer.
    id = node.request('mesh.message', { subscription: 's7', message: { id: 'm1', payload: { n: 1 } } });
    assert.deepEqual((await node.answer(id)).result, {});
    assert.deepEqual(got, [0, 1]);
    // A handler that throws answers an error: not processed.
    id = node.request('mesh.message', { subscription: 's7', message: { id: 'm2', payload: { n: 2 } } });
    assert.equal((await node.answer(id)).error.data.code, 'INTERNAL_ERROR');
    id = node.request('mesh.message', { subscription: 's7', message: { id: 'm3', payload: { n: 3 } } });
    assert.match((await node.answer(id)).error.message, /broken/);
    id = node.request('mesh.message', { subscription: 's8', message: { id: 'm4', payload: { n: 4 } } });
    assert.equal((await node.answer(id)).error.code, -32602);
    assert.deepEqual(got, [0, 1]);
    // The node lists the name subscribed under.
    const ds = client.durables();
    const dreq = await node.next('mesh.durables');
    assert.deepEqual(dreq.params, {});
    node.reply(dreq, { durables: [{ name: 'reader', bytes: 97, active: true }], limit: 256 });
    assert.deepEqual((await ds).durables.map((d) => d.name), ['reader']);
  });

  it('answers processMessage from the bus handler', async () => {
    const sub = client.busSubscribe('inbound:*', (topic, payload) => ({ processed: true, message: `got ${topic} ${payload.n}` }), { policy: 'continueAll', group: 'workers' });
    const req = await node.next('subscribe');
    assert.deepEqual(req.params, { topic: 'inbound:*', policy: 'continueAll', group: 'workers' });
    node.reply(req, { success: true });
    await sub;
    let id = node.request('processMessage', { topic: 'inbound:7', payload: { n: 7 } });
    assert.deepEqual((await node.answer(id)).result, { processed: true, message: 'got inbound:7 7' });
    id = node.request('processMessage', { topic: 'elsewhere', payload: {} });
    assert.ok('error' in await node.answer(id));
  });

  it('maps the bus handler return values', async () => {
    const answers = [undefined, false];
    const sub = client.busSubscribe('t', () => answers.shift());
    node.reply(await node.next('subscribe'), { success: true });
    await sub;
    for (const want of [{ processed: true }, { processed: false }]) {
      const id = node.request('processMessage', { topic: 't', payload: {} });
      assert.deepEqual((await node.answer(id)).result, want);
    }
  });

  it('answers an unknown request with method not found', async () => {
    const id = node.request('mesh.nothing', {});
    assert.equal((await node.answer(id)).error.code, -32601);
  });

  it('fails pending calls when the connection closes', async () => {
    const call = client.ping();
    await node.next('ping');
    node.ws.close();
    await assert.rejects(call, ConnectionClosedError);
    await client.closed;
  });
});

describe('matchTopic', () => {
  it('matches as the node does', () => {
    for (const [pattern, topic, want] of [
      ['outbound:*', 'outbound:42', true], ['outbound:*', 'inbound:42', false],
      ['a/*', 'a/b/c', false], ['a?', 'ab', true], ['a?', 'a/', false],
      ['x[0-9]', 'x5', true], ['x[^0-9]', 'x5', false], ['x[^0-9]', 'xa', true],
      ['inbound:chat-', 'inbound:chat-1', true], ['inbound:chat', 'inbound:chat-1', false],
      ['exact', 'exact', true], ['a.b', 'a.b', true], ['a.b', 'axb', false], ['[', '[', false],
    ]) assert.equal(matchTopic(pattern, topic), want, `${pattern} ${topic}`);
  });
});
