// The bus's topic patterns, matched as the node matches them.

const PREFIX_ENDS = ':-./_';

/**
 * Reports whether a bus pattern matches a topic: fnmatch-style with "*",
 * "?" and "[...]" ("^" negates a class; "*" and "?" do not cross "/")
 * when the pattern has wildcards; a prefix when it has none and ends in one
 * of ":-./_"; equality otherwise.
 */
export function matchTopic(pattern, topic) {
  if (/[*?[\\]/.test(pattern)) {
    const rx = compile(pattern);
    return rx !== null && rx.test(topic);
  }
  if (pattern !== '' && PREFIX_ENDS.includes(pattern.at(-1))) return topic.startsWith(pattern);
  return pattern === topic;
}

const escape = (c) => c.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');

function compile(pattern) {
  let out = '';
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === '*') out += '[^/]*';
    else if (c === '?') out += '[^/]';
    else if (c === '\\') {
      if (++i === pattern.length) return null;
      out += escape(pattern[i]);
    } else if (c === '[') {
      const start = pattern[i + 1] === '^' || pattern[i + 1] === ']' ? i + 2 : i + 1;
      const j = pattern.indexOf(']', start);
      if (j < 0) return null;
      let body = pattern.slice(i + 1, j);
      const neg = body.startsWith('^');
      if (neg) body = body.slice(1);
      out += (neg ? '[^/' : '[') + body.replace(/[\\\]^[]/g, '\\$&') + ']';
      i = j;
    } else out += escape(c);
  }
  return new RegExp(`^(?:${out})$`, 's');
}
