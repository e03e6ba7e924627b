// An agent for the Go test of offline delivery in clients/ (real nodes).
//
//   node test/e2e/offline-agent.js durable URL PATTERN NAME
//                                                          subscribe to PATTERN as durable NAME;
//                                                          print "kept <name> active|idle" per durable
//                                                          name the node lists, "subscribed", then
//                                                          "msg <n>" per message
//   node test/e2e/offline-agent.js inbox URL               take direct messages; print "listening",
//                                                          then "message <subject>" per message
//   node test/e2e/offline-agent.js send URL AGENT SUBJECT  send AGENT a direct message; print the result
//   node test/e2e/offline-agent.js group URL TOPIC GROUP NAME
//                                                          join bus queue group GROUP on TOPIC; print
//                                                          "subscribed", then "got <NAME> <n>" per message
//   node test/e2e/offline-agent.js calls URL AGENT         call echo on AGENT with a receipt, then echo
//                                                          with no agent id; print "receipt <json>" and
//                                                          "any <agent id>"
//
// The long-running modes run until killed.
import { connect } from '../../src/index.js';

const [mode, url, ...args] = process.argv.slice(2);

const modes = {
  async durable(mesh, pattern, name) {
    await mesh.subscribe(pattern, (m) => console.log(`msg ${m.payload.n}`), { durable: name });
    for (const d of (await mesh.durables()).durables) console.log(`kept ${d.name} ${d.active ? 'active' : 'idle'}`);
    console.log('subscribed');
    await mesh.closed;
  },
  async inbox(mesh) {
    await mesh.onMessage((message) => {
      console.log(`message ${message.subject}`);
      return { ack: message.subject, by: 'js' };
    });
    console.log('listening');
    await mesh.closed;
  },
  async send(mesh, agent, subject) {
    const res = await mesh.sendMessage(agent, { subject, body: 'from js', requires_response: true });
    console.log(JSON.stringify(res));
  },
  async group(mesh, topic, name, me) {
    await mesh.busSubscribe(topic, (_, payload) => console.log(`got ${me} ${payload.n}`), { group: name });
    console.log('subscribed');
    await mesh.closed;
  },
  async calls(mesh, agent) {
    let res = await mesh.call('echo', { text: 'receipt' }, { agentId: agent, receipt: true });
    console.log(`receipt ${JSON.stringify(res.receipt)}`);
    res = await mesh.call('echo', { text: 'any' });
    console.log(`any ${res.agentId}`);
  },
};

if (!modes[mode]) {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}
const mesh = await connect(url, { clientId: `offline-${mode}-${process.pid}` });
try {
  await modes[mode](mesh, ...args);
} finally {
  await mesh.close();
}
