// The resolve hook of globsync-hook.mjs: "fs" and "node:fs", imported
// from anywhere but fs-globsync.mjs itself, become fs-globsync.mjs.
const shim = new URL('./fs-globsync.mjs', import.meta.url).href;

export async function resolve(specifier, context, next) {
  if ((specifier === 'fs' || specifier === 'node:fs') && context.parentURL !== shim) {
    return { url: shim, shortCircuit: true };
  }
  return next(specifier, context);
}
