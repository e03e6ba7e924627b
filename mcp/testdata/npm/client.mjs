// The end-to-end client of `meshagent mcp`: the official MCP TypeScript
// SDK over stdio (client.mjs stdio MESHAGENT_BINARY API_ADDR) or
// Streamable HTTP (client.mjs http URL). It prints one JSON line per step;
// after {"step":"ready"} it waits for "go" on stdin, then for
// notifications/tools/list_changed until the tool "added" is listed.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import readline from 'node:readline';

const [mode, a, b] = process.argv.slice(2);
const out = (step, v) => process.stdout.write(JSON.stringify({ step, ...v }) + '\n');

let transport;
if (mode === 'stdio') {
  // What an MCP host gives a server: no MESHAGENT_* variables.
  transport = new StdioClientTransport({
    command: a, args: ['mcp', '--api', b, '--poll', '200ms', '--log-level', 'warn'],
    env: { HOME: process.env.HOME, PATH: process.env.PATH }, stderr: 'inherit',
  });
} else {
  transport = new StreamableHTTPClientTransport(new URL(a));
}
const client = new Client({ name: 'meshagent-e2e', version: '1.0.0' });
let onChanged = () => {};
client.setNotificationHandler(ToolListChangedNotificationSchema, () => onChanged());
await client.connect(transport);
out('init', { capabilities: client.getServerCapabilities(), sessionId: transport.sessionId ?? null });

out('list', { tools: (await client.listTools()).tools });
out('call', { res: await client.callTool({ name: 'bar_upper', arguments: { text: 'hi' } }) });
try {
  out('refuse', { res: await client.callTool({ name: 'bar_upper', arguments: { text: 5 } }) });
} catch (e) {
  out('refuse', { error: String(e), code: e.code });
}
out('fail', { res: await client.callTool({ name: 'fail', arguments: {} }) });
out('sum', { res: await client.callTool({ name: 'sum', arguments: { a: 2, b: 3 } }) });

const progress = [];
const long = await client.callTool({ name: 'long', arguments: { duration: 1.5, steps: 3 } }, undefined, {
  onprogress: (p) => progress.push(p), timeout: 60000,
});
out('progress', { res: long, progress });

const ac = new AbortController();
const t0 = Date.now();
const slow = client.callTool({ name: 'slow', arguments: {} }, undefined, { signal: ac.signal, timeout: 60000 });
setTimeout(() => ac.abort(new Error('cancelled by the test')), 1500);
try {
  await slow;
  out('cancel', { error: null });
} catch (e) {
  out('cancel', { error: String(e), ms: Date.now() - t0 });
}

out('ready', {});
const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  if (line.trim() === 'go') break;
}
const deadline = setTimeout(() => { out('changed', { error: 'no list_changed listing "added" within 60 s' }); process.exit(1); }, 60000);
let notified = 0;
await new Promise((resolve) => {
  const check = async () => {
    notified++;
    const names = (await client.listTools()).tools.map((t) => t.name);
    if (names.includes('added')) {
      out('changed', { tools: names, notified });
      resolve();
    }
  };
  onChanged = () => { check().catch((e) => out('changed', { error: String(e) })); };
});
clearTimeout(deadline);
await client.close();
process.exit(0);
