// An external A2A v1.0 agent built with @a2a-js/sdk's server, for the "a2a"
// handler kind's end-to-end test. Skills: "shout" answers {"loud": TEXT}
// (the data part's "text" upper-cased) as a completed task's artifact;
// "refuse" fails its task. It listens on 127.0.0.1, a random port, and
// prints {"url": BASE_URL} on stdout once it serves.
import express from 'express';
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { agentCardHandler, jsonRpcHandler, UserBuilder } from '@a2a-js/sdk/server/express';
import { Role, TaskState } from '@a2a-js/sdk';

const app = express();
const server = app.listen(0, '127.0.0.1', () => {
  const base = `http://127.0.0.1:${server.address().port}`;
  card.supportedInterfaces[0].url = `${base}/rpc`;
  console.log(JSON.stringify({ url: base }));
});

const skill = (id) => ({ id, name: id, description: `${id} skill`, tags: ['test'], examples: [], inputModes: [], outputModes: [], securityRequirements: [] });
const card = {
  name: 'shouter',
  description: 'upper-cases text',
  supportedInterfaces: [{ url: '', protocolBinding: 'JSONRPC', tenant: '', protocolVersion: '1.0' }],
  provider: undefined,
  version: '1.0.0',
  capabilities: { streaming: false, extensions: [] },
  securitySchemes: {},
  securityRequirements: [],
  defaultInputModes: ['application/json'],
  defaultOutputModes: ['application/json'],
  skills: [skill('shout'), skill('refuse')],
  signatures: [],
};

const dataOf = (msg) => msg.parts.find((p) => p.content?.$case === 'data')?.content.value;

const executor = {
  async execute(ctx, bus) {
    const msg = ctx.userMessage;
    const task = (state, extra = {}) => ({
      id: ctx.taskId, contextId: ctx.contextId, status: { state, message: undefined, timestamp: new Date().toISOString() },
      artifacts: [], history: [], metadata: undefined, ...extra,
    });
    if (msg.metadata?.skill === 'shout') {
      const text = String(dataOf(msg)?.text ?? '');
      bus.publish(AgentEvent.task(task(TaskState.TASK_STATE_COMPLETED, {
        artifacts: [{ artifactId: 'a1', name: 'loud', description: '', metadata: undefined, extensions: [],
          parts: [{ content: { $case: 'data', value: { loud: text.toUpperCase() } }, metadata: undefined, filename: '', mediaType: 'application/json' }] }],
      })));
    } else {
      bus.publish(AgentEvent.task(task(TaskState.TASK_STATE_FAILED, {
        status: { state: TaskState.TASK_STATE_FAILED, timestamp: new Date().toISOString(), message: {
          messageId: 'm-' + ctx.taskId, contextId: ctx.contextId, taskId: ctx.taskId, role: Role.ROLE_AGENT, metadata: undefined, extensions: [], referenceTaskIds: [],
          parts: [{ content: { $case: 'text', value: `refused skill ${msg.metadata?.skill}` }, metadata: undefined, filename: '', mediaType: '' }] } },
      })));
    }
    bus.finished();
  },
  async cancelTask() {},
};

const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), executor);
app.use('/.well-known/agent-card.json', agentCardHandler({ agentCardProvider: handler }));
app.use('/rpc', jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
process.on('SIGTERM', () => server.close(() => process.exit(0)));
