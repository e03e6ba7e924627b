"""Ordered delivery to user callbacks, and the bus's topic patterns."""
import asyncio
import inspect
import logging
import re

log = logging.getLogger("meshagent_client")


class Serial:
    """Runs callbacks one after another, in the order they were queued.

    Messages of one subscription (or the progress of one call) reach their
    callback in order, and a callback may await the client (publish,
    call, ...) without stalling the connection's read loop.
    """

    def __init__(self, name):
        self._name = name
        self._queue = asyncio.Queue()
        self._worker = None

    def put(self, fn, *args):
        self._queue.put_nowait((fn, args))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._run())

    async def _run(self):
        while not self._queue.empty():
            fn, args = self._queue.get_nowait()
            try:
                res = fn(*args)
                if inspect.isawaitable(res):
                    await res
            except Exception:
                log.exception("%s: callback failed", self._name)
            finally:
                self._queue.task_done()

    async def drain(self):
        """Wait until every queued callback has run."""
        await self._queue.join()

    def stop(self):
        if self._worker is not None:
            self._worker.cancel()


async def maybe_await(value):
    """The value, awaited if it is awaitable (handlers may be sync or async)."""
    if inspect.isawaitable(value):
        return await value
    return value


_PREFIX_ENDS = ":-./_"


def match_topic(pattern, topic):
    """Whether a bus pattern matches a topic, as the node matches them.

    fnmatch-style with "*", "?" and "[...]" ("^" negates a class, "*" and
    "?" do not cross "/") when the pattern has wildcards; a prefix when it
    has none and ends in one of ":-./_"; equality otherwise.
    """
    if any(c in pattern for c in "*?[\\"):
        rx = _compile(pattern)
        return rx is not None and rx.fullmatch(topic) is not None
    if pattern and pattern[-1] in _PREFIX_ENDS:
        return topic.startswith(pattern)
    return pattern == topic


def _compile(pattern):
    out, i, n = [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "\\":
            if i + 1 == n:
                return None
            i += 1
            out.append(re.escape(pattern[i]))
        elif c == "[":
            j = pattern.find("]", i + 2 if pattern[i + 1:i + 2] in ("^", "]") else i + 1)
            if j < 0:
                return None
            body = pattern[i + 1:j]
            neg = body.startswith("^")
            if neg:
                body = body[1:]
            cls = "".join("\\" + ch if ch in "\\]^[" else ch for ch in body)
            out.append(("[^/" if neg else "[") + cls + "]")
            i = j
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out), re.S)
