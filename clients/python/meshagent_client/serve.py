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

    Attributes: task_id (the id the requester knows the task by: ``task
    wait``, ``task status``), requester (the verified agent id), capability,
    params, correlation_id, deadline (an aware datetime, or None).

    A handler escalates with ``await req.escalate(reason)``: the operator
    decides (``meshagent task resolve``), and ``await req.decision()`` or an
    ``req.on_resolved(callback)`` learns it as ``{"approved", "reason"}``.
    Raising :class:`Escalated` instead leaves the answer to the decision.
    """

    def __init__(self, rpc, p, decision=None):
        self._rpc = rpc
        self._handle_id = p.get("taskId")  # this hand-over's id, for the node
        self._decision = decision
        self.task_id = p.get("requesterTaskId") or p.get("taskId")
        self.requester = p.get("requester")
        self.capability = p.get("capability")
        self.params = p.get("params")
        self.correlation_id = p.get("correlationId")
        self.deadline = _parse_time(p.get("deadline"))

    async def progress(self, result):
        """Send an ``in_progress`` response carrying result to the requester."""
        await self._rpc.notify("mesh.progress", {"taskId": self._handle_id, "result": result})

    async def set_state(self, state):
        """Set the task's state (seed 003), for example ``"ESCALATED"``."""
        await self._rpc.notify("mesh.setState", {"taskId": self._handle_id, "state": state})

    async def escalate(self, reason=""):
        """Mark the task ESCALATED with reason, for the operator to decide."""
        await self._rpc.notify("mesh.setState", {"taskId": self._handle_id, "state": "ESCALATED", "reason": reason})

    async def decision(self):
        """Wait for the operator's decision: ``{"approved": bool, "reason": str}``."""
        return await asyncio.shield(self._decision)

    def on_resolved(self, callback):
        """Call callback(decision) once the operator decided."""
        self._decision.add_done_callback(lambda f: None if f.cancelled() else callback(f.result()))


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
        self._decisions = {}  # hand-over id -> future of the operator's decision
        rpc.on_request("mesh.handle", self._handle)
        rpc.on_notification("mesh.taskResolved", self._resolved)
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
        params = params or {}
        decision = asyncio.get_running_loop().create_future()
        req = Request(self.rpc, params, decision)
        if req._handle_id is not None:
            self._decisions[req._handle_id] = decision
        handler = self._handlers.get(req.capability)
        if handler is None:
            raise MeshError("CAPABILITY_NOT_SUPPORTED", f"this client does not serve {req.capability!r}",
                            {"available": sorted(self._handlers)})
        task = asyncio.current_task()
        if req._handle_id is not None:
            self._running[req._handle_id] = task
        try:
            result = await maybe_await(handler(req))
            if req._handle_id in self._cancelled:  # the handler swallowed its cancellation
                raise MeshError("INTERNAL_ERROR", "cancelled")
            return result
        finally:
            self._cancelled.discard(req._handle_id)
            if self._running.get(req._handle_id) is task:
                del self._running[req._handle_id]
            self._decisions.pop(req._handle_id, None)
            if not decision.done():
                decision.cancel()

    def _resolved(self, params):
        params = params or {}
        fut = self._decisions.get(params.get("taskId"))
        if fut is not None and not fut.done():
            fut.set_result({"approved": bool(params.get("approved")), "reason": params.get("reason", "")})

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
