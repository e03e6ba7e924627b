// Drives a meshagent A2A gateway with @a2a-js/sdk's client: usage
// node client.mjs GATEWAY_URL NODE_ID PROVIDER_ID. It resolves and verifies
// the node's card and the provider's (the key comes from the kid, an agent
// id), then sends, streams, gets and cancels through the provider's
// endpoint, and prints one JSON object of what it saw.
import { DefaultAgentCardResolver, ClientFactory } from '@a2a-js/sdk/client';
import { Role, TaskState, verifyAgentCardSignature } from '@a2a-js/sdk';
import { agentIdToJwk } from './agentid.mjs';

const [base, nodeId, providerId] = process.argv.slice(2);
const out = {};
const verify = verifyAgentCardSignature(async (kid) => agentIdToJwk(kid));
const kidOf = (card) => JSON.parse(Buffer.from(card.signatures[0].protected, 'base64url')).kid;
console.debug = () => {}; // the verifier logs each signature it rejects

const resolver = new DefaultAgentCardResolver();
const own = await resolver.resolve(`${base}/`);
await verify(own);
out.ownKid = kidOf(own);

const agentBase = `${base}/agents/${providerId}/`;
const card = await resolver.resolve(agentBase);
await verify(card);
out.providerKid = kidOf(card);
out.skills = card.skills.map((s) => s.id).sort();
out.interface = card.supportedInterfaces[0];
try {
  await verify({ ...card, name: 'mallory' });
  out.tamperedVerified = true;
} catch {
  out.tamperedVerified = false;
}

const client = await new ClientFactory().createFromUrl(agentBase);
const message = (skill, data) => ({
  messageId: crypto.randomUUID(), contextId: '', taskId: '', role: Role.ROLE_USER,
  parts: [{ content: { $case: 'data', value: data }, metadata: undefined, filename: '', mediaType: '' }],
  metadata: { skill }, extensions: [], referenceTaskIds: [],
});
const request = (skill, data, configuration) => ({ tenant: '', message: message(skill, data), configuration, metadata: undefined });
const summary = (t) => ({
  id: t.id, state: TaskState[t.status.state],
  data: t.artifacts?.[0]?.parts?.[0]?.content?.value,
  text: t.status.message?.parts?.find((p) => p.content?.$case === 'text')?.content.value,
});

out.send = summary(await client.sendMessage(request('upper', { text: 'hi' })));
out.shout = summary(await client.sendMessage(request('shout', { text: 'hello' })));
out.refuse = summary(await client.sendMessage(request('refuse', {})));
out.stream = [];
for await (const ev of client.sendMessageStream(request('upper', { text: 'stream' }))) {
  const p = ev.payload;
  out.stream.push(p.$case === 'task' ? { task: summary(p.value) } : { [p.$case]: TaskState[p.value.status?.state] });
}
out.get = summary(await client.getTask({ tenant: '', id: out.send.id }));
const slow = await client.sendMessage(request('slow', {}, { acceptedOutputModes: [], taskPushNotificationConfig: undefined, returnImmediately: true }));
out.slowBefore = summary(slow);
out.cancel = summary(await client.cancelTask({ tenant: '', id: slow.id, metadata: undefined }));
out.afterCancel = summary(await client.getTask({ tenant: '', id: slow.id }));
console.log(JSON.stringify(out));
