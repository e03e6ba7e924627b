// node:fs with a globSync for Node 20: enough of Node 22's for the
// patterns the conformance suite uses ("**/checks.json", "*.json",
// "dir/**/x"): "**" matches any number of directories, "*" and "?"
// match within a name. Options: cwd. Results are relative paths.
import fs from 'node:fs';
import path from 'node:path';

export * from 'node:fs';
export default fs;

function toRegExp(pattern) {
  let re = '';
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === '*' && pattern[i + 1] === '*') {
      re += pattern[i + 2] === '/' ? '(?:.*/)?' : '.*';
      i += pattern[i + 2] === '/' ? 2 : 1;
    } else if (c === '*') re += '[^/]*';
    else if (c === '?') re += '[^/]';
    else re += c.replace(/[.+^${}()|[\]\\]/g, '\\$&');
  }
  return new RegExp('^' + re + '$');
}

export function globSync(patterns, options = {}) {
  const cwd = options.cwd ? String(options.cwd) : process.cwd();
  const res = (Array.isArray(patterns) ? patterns : [patterns]).map(toRegExp);
  const out = [];
  const walk = (rel) => {
    let entries;
    try {
      entries = fs.readdirSync(path.join(cwd, rel), { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) {
      const p = rel ? rel + '/' + e.name : e.name;
      if (res.some((r) => r.test(p))) out.push(p);
      if (e.isDirectory()) walk(p);
    }
  };
  walk('');
  return out;
}
