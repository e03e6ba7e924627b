// node --import ./globsync-hook.mjs: gives Node 20 the fs.globSync of
// Node 22 that @modelcontextprotocol/conformance imports, by resolving its
// imports of "fs" to fs-globsync.mjs (node:fs plus globSync). On Node 22
// and later it does nothing.
import fs from 'node:fs';
import { register } from 'node:module';

if (typeof fs.globSync !== 'function') {
  register('./globsync-loader.mjs', import.meta.url);
}
