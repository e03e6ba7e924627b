"""Serving capabilities and receiving direct messages over the local API.

The node runs every check (signature, ACL, policy, input schema, rate
limits) before it calls ``mesh.handle``, so a handler sees only requests
it may answer. A request runs in its own task: ``mesh.cancel`` cancels
that task, and a handler that returns after its cancellation is not
answered with its result.
"""
import asyncio
import collections
import datetime

from .dispatch import maybe_await
from .errors import MeshError

# How many direct-message ids are remembered with their first answer.
MESSAGE_DEDUP = 4096


class Request:
    """One ``mesh.handle`` call as the handler sees it.

    Attributes: task_id, requester (the verified agent id), capability,
    params, correlation_id, deadline (an aware datetime, or None).
    """

    def __init__(self, rpc, p):
        self._rpc = rpc
        self.task_id = p.get("taskId")
        self.requester = p.get("requester")
        self.capability = p.get("capability")
        self.params = p.get("params")
        self.correlation_id = p.get("correlationId")
        self.deadline = _parse_time(p.get("deadline"))

    async def progress(self, result):
        """Send an ``in_progress`` response carrying result to the requester."""
        await self._rpc.notify("mesh.progress", {"taskId": self.task_id, "result": result})

    async def set_state(self, state):
        """Set the task's state (seed 003), for example ``"ESCALATED"``."""
        await self._rpc.notify("mesh.setState", {"taskId": self.task_id, "state": state})


def _parse_time(s):
    if not s:
        return None
    try:
        return datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return None


class Server:
    """The serving half of a Client: mesh.serve, mesh.handle, direct messages."""

    def __init__(self, rpc):
        self._handlers = {}  # capability name -> handler(request)
        self._running = {}  # task id -> asyncio task answering its mesh.handle
        self._cancelled = set()  # task ids whose mesh.cancel arrived while they ran
        self._on_agent_message = None
        self._answers = collections.OrderedDict()  # message_id -> future of the first answer
        rpc.on_request("mesh.handle", self._handle)
        rpc.on_request("mesh.agentMessage", self._agent_message)
        rpc.on_notification("mesh.cancel", self._cancel)

    async def serve(self, capability, handler):
        """Serve a capability through this node; return ``{"serving": [names]}``.

        capability is seed 000's object (``name``, ``description``,
        ``input_schema``, ``output_schema``, ``keywords``,
        ``authorized_requester_ids``, ``idempotent``), without a handler.
        handler(request) gets a :class:`Request`; its return value is the
        result; raising MeshError answers with that code, any other
        exception with INTERNAL_ERROR.
        """
        if not isinstance(capability, dict) or not capability.get("name"):
            raise ValueError("a capability is an object with a name")
        if "handler" in capability:
            raise ValueError("a served capability has no handler field: the handler is this client")
        name = capability["name"]
        previous = self._handlers.get(name)
        self._handlers[name] = handler  # before the node can call it
        try:
            return await self.rpc.call("mesh.serve", {"capabilities": [capability]})
        except BaseException:
            if previous is None:
                self._handlers.pop(name, None)
            else:
                self._handlers[name] = previous
            raise

    async def unserve(self, *names):
        """Stop serving the named capabilities; return ``{"serving": [names still served]}``."""
        res = await self.rpc.call("mesh.unserve", {"capabilities": list(names)})
        for name in names:
            self._handlers.pop(name, None)
        return res

    async def on_message(self, handler):
        """Receive direct messages (seed 004 agent_message).

        handler(message, sender) gets the message object and the sender's
        agent id; its return value is the response. A message id seen
        again gets the first answer without calling handler again.
        """
        self._on_agent_message = handler
        return await self.rpc.call("mesh.onMessage", {})

    async def send_message(self, agent_id, message):
        """Send a direct message; return ``{"messageId", "queued", "response"?}``.

        message is seed 004's agent_message: ``message_id`` (the node
        makes one if absent), ``subject``, ``body``, ``priority``,
        ``requires_response``, ``context``.
        """
        return await self.rpc.call("mesh.sendMessage", {"agentId": agent_id, "message": message})

    async def _handle(self, params):
        req = Request(self.rpc, params or {})
        handler = self._handlers.get(req.capability)
        if handler is None:
            raise MeshError("CAPABILITY_NOT_SUPPORTED", f"this client does not serve {req.capability!r}",
                            {"available": sorted(self._handlers)})
        task = asyncio.current_task()
        if req.task_id is not None:
            self._running[req.task_id] = task
        try:
            result = await maybe_await(handler(req))
            if req.task_id in self._cancelled:  # the handler swallowed its cancellation
                raise MeshError("INTERNAL_ERROR", "cancelled")
            return result
        finally:
            self._cancelled.discard(req.task_id)
            if self._running.get(req.task_id) is task:
                del self._running[req.task_id]

    def _cancel(self, params):
        task_id = (params or {}).get("taskId")
        task = self._running.get(task_id)
        if task is not None:
            self._cancelled.add(task_id)
            task.cancel()

    async def _agent_message(self, params):
        params = params or {}
        message = params.get("message") or {}
        mid = message.get("message_id")
        if self._on_agent_message is None:
            raise MeshError("CAPABILITY_NOT_SUPPORTED", "this client takes no direct messages")
        if mid is None:
            return await maybe_await(self._on_agent_message(message, params.get("from")))
        first = self._answers.get(mid)
        if first is None:
            first = self._answers[mid] = asyncio.ensure_future(
                maybe_await(self._on_agent_message(message, params.get("from"))))
            while len(self._answers) > MESSAGE_DEDUP:
                self._answers.popitem(last=False)
        # shield: a repeat's answer never cancels the first handler run.
        return await asyncio.shield(first)
