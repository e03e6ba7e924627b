// Serving and direct messages against a fake node, exactly as the README's
// "Local API: serving" specifies them: a client that drifts from the spec
// fails here.
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';

import { Escalated, MeshError, RPCError, connect } from '../src/index.js';
import { FakeNode } from './fakenode.js';

const SUMMARIZE = { name: 'summarize', description: 'tl;dr', input_schema: { type: 'object' }, idempotent: false };

const handleParams = ({ taskId = 't1', capability = 'summarize', params = { text: 'long' } } = {}) => ({
  taskId, requester: '12D3KooWCaller', capability, params, correlationId: `corr-${taskId}`, deadline: '2030-01-02T03:04:05Z',
});

const quiet = { error() {} }; // handler failures are expected here

describe('serve', () => {
  let node, client;
  beforeEach(async () => {
    node = await new FakeNode().start();
    client = await connect(node.url, { clientId: 'js-serve', logger: quiet });
  });
  afterEach(async () => {
    await client.close();
    await node.stop();
  });

  async function serve(handler, capability = SUMMARIZE) {
    const p = client.serve(capability, handler);
    const req = await node.next('mesh.serve');
    assert.deepEqual(req.params, { capabilities: [capability] });
    node.reply(req, { serving: [capability.name] });
    assert.deepEqual(await p, { serving: [capability.name] });
  }

  it('handles with progress and a state change', async () => {
    let seen;
    await serve(async (req) => {
      seen = { ...req };
      await req.progress({ step: 1 });
      await req.setState('ESCALATED');
      return { summary: 'short' };
    });
    const id = node.request('mesh.handle', handleParams());
    let msg = await node.next('mesh.progress');
    assert.deepEqual(msg.params, { taskId: 't1', result: { step: 1 } });
    assert.ok(!('id' in msg), 'progress is a notification');
    msg = await node.next('mesh.setState');
    assert.deepEqual(msg.params, { taskId: 't1', state: 'ESCALATED' });
    assert.ok(!('id' in msg), 'setState is a notification');
    assert.deepEqual((await node.answer(id)).result, { summary: 'short' });
    assert.equal(seen.taskId, 't1');
    assert.equal(seen.requester, '12D3KooWCaller');
    assert.equal(seen.capability, 'summarize');
    assert.equal(seen.correlationId, 'corr-t1');
    assert.deepEqual(seen.params, { text: 'long' });
    assert.equal(seen.deadline.toISOString(), '2030-01-02T03:04:05.000Z');
  });

  it('escalates and learns the decision', async () => {
    const learnt = [];
    await serve(async (req) => {
      await req.escalate('over budget');
      req.onResolved((d) => learnt.push(d));
      const d = await req.decision();
      return { approved: d.approved, task: req.taskId };
    });
    const id = node.request('mesh.handle', { ...handleParams(), requesterTaskId: '01task' });
    const msg = await node.next('mesh.setState');
    assert.deepEqual(msg.params, { taskId: 't1', state: 'ESCALATED', reason: 'over budget' });
    node.notify('mesh.taskResolved', { taskId: 't1', approved: true, reason: 'ok' });
    assert.deepEqual((await node.answer(id)).result, { approved: true, task: '01task' });
    assert.deepEqual(learnt, [{ approved: true, reason: 'ok' }]);
  });

  it('leaves the answer to the decision with Escalated', async () => {
    await serve(() => { throw new Escalated('a human decides'); });
    const id = node.request('mesh.handle', handleParams());
    assert.deepEqual((await node.answer(id)).error, { code: -32021, message: 'a human decides' });
  });

  it('answers a MeshError with its code', async () => {
    await serve(() => { throw new MeshError('UNAUTHORIZED', 'not you', { reason: 'policy' }); });
    const id = node.request('mesh.handle', handleParams());
    assert.deepEqual((await node.answer(id)).error, { code: -32017, message: 'not you', data: { code: 'UNAUTHORIZED', details: { reason: 'policy' } } });
  });

  it('answers any other exception with INTERNAL_ERROR', async () => {
    await serve(() => { throw new TypeError('boom'); });
    const id = node.request('mesh.handle', handleParams());
    const { error } = await node.answer(id);
    assert.deepEqual([error.code, error.data.code], [-32016, 'INTERNAL_ERROR']);
  });

  it('refuses a capability it does not serve', async () => {
    const id = node.request('mesh.handle', handleParams({ capability: 'nothing' }));
    const { error } = await node.answer(id);
    assert.deepEqual([error.code, error.data.code], [-32013, 'CAPABILITY_NOT_SUPPORTED']);
  });

  it('aborts the signal on mesh.cancel and never answers with the result', async () => {
    let started, aborted;
    const isStarted = new Promise((resolve) => { started = resolve; });
    const isAborted = new Promise((resolve) => { aborted = resolve; });
    await serve(async (req) => {
      started();
      await new Promise((resolve) => req.signal.addEventListener('abort', resolve));
      aborted();
      return { late: true };
    });
    const id = node.request('mesh.handle', handleParams({ taskId: 't2' }));
    await isStarted;
    node.notify('mesh.cancel', { taskId: 'other' });
    node.notify('mesh.cancel', { taskId: 't2' });
    await isAborted;
    const ans = await node.answer(id);
    assert.equal(ans.error.data.code, 'INTERNAL_ERROR');
    assert.ok(!('result' in ans));
  });

  it('stops handling after unserve', async () => {
    await serve(() => 1);
    const p = client.unserve('summarize');
    const req = await node.next('mesh.unserve');
    assert.deepEqual(req.params, { capabilities: ['summarize'] });
    node.reply(req, { serving: [] });
    assert.deepEqual(await p, { serving: [] });
    const id = node.request('mesh.handle', handleParams());
    assert.equal((await node.answer(id)).error.data.code, 'CAPABILITY_NOT_SUPPORTED');
  });

  it('refuses a capability with a handler field, or without a name', async () => {
    await assert.rejects(client.serve({ name: 'x', handler: 'echo' }, () => 1), TypeError);
    await assert.rejects(client.serve({ description: 'no name' }, () => 1), TypeError);
  });

  it('forgets the handler when the node refuses mesh.serve', async () => {
    const p = client.serve(SUMMARIZE, () => 1);
    node.reply(await node.next('mesh.serve'), undefined, { code: -32602, message: 'bad schema' });
    await assert.rejects(p, RPCError);
    const id = node.request('mesh.handle', handleParams());
    assert.equal((await node.answer(id)).error.data.code, 'CAPABILITY_NOT_SUPPORTED');
  });

  it('answers a repeated message id with the first answer', async () => {
    const calls = [];
    let release;
    const released = new Promise((resolve) => { release = resolve; });
    const p = client.onMessage(async (message, from) => {
      calls.push([message.message_id, from]);
      await released;
      return { reply: `seen ${message.subject}`, n: calls.length };
    });
    const req = await node.next('mesh.onMessage');
    assert.deepEqual(req.params, {});
    node.reply(req, { ok: true });
    await p;
    const msg = { message_id: 'm1', subject: 'review', body: 'please', priority: 'high', requires_response: true };
    const first = node.request('mesh.agentMessage', { from: '12D3KooWS', message: msg });
    const again = node.request('mesh.agentMessage', { from: '12D3KooWS', message: msg });
    release();
    const answers = {};
    for (let i = 0; i < 2; i++) {
      const a = await node.next();
      answers[a.id] = a.result;
    }
    assert.deepEqual(answers[first], { reply: 'seen review', n: 1 });
    assert.deepEqual(answers[again], answers[first]);
    const third = node.request('mesh.agentMessage', { from: '12D3KooWS', message: msg });
    assert.deepEqual((await node.answer(third)).result, answers[first]);
    const other = node.request('mesh.agentMessage', { from: '12D3KooWS', message: { ...msg, message_id: 'm2' } });
    assert.equal((await node.answer(other)).result.n, 2);
    assert.deepEqual(calls, [['m1', '12D3KooWS'], ['m2', '12D3KooWS']]);
  });

  it('refuses direct messages before onMessage', async () => {
    const id = node.request('mesh.agentMessage', { from: 'A', message: { message_id: 'm', body: 'b' } });
    assert.ok('error' in await node.answer(id));
  });

  it('aborts running handlers when the connection closes', async () => {
    let started;
    const isStarted = new Promise((resolve) => { started = resolve; });
    let signal;
    await serve(async (req) => {
      signal = req.signal;
      started();
      await new Promise((resolve) => req.signal.addEventListener('abort', resolve));
    });
    node.request('mesh.handle', handleParams());
    await isStarted;
    node.ws.close();
    await client.closed;
    assert.ok(signal.aborted);
  });
});
