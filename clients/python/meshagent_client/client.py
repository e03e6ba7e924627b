"""The client of a node's local API: calls, discovery, topics, the bus."""
import asyncio
import os
import uuid

import websockets

from .dispatch import Serial, match_topic, maybe_await
from .errors import INVALID_PARAMS, RPCError
from .rpc import Connection
from .serve import Server

__version__ = "0.1.0"

# How many messages are held for subscriptions whose mesh.subscribe answer
# has not arrived yet.
MAX_EARLY = 4096


async def connect(url="ws://127.0.0.1:7892/", client_id=None, *, client_info=None, max_size=16 << 20):
    """Open a connection to a node's local API and ``initialize`` it.

    client_id names this client on the node's bus (a fresh one if None);
    client_info is seed 001's ``{"name", "version"}``. The returned Client
    is also an async context manager that closes it.
    """
    ws = await websockets.connect(url, max_size=max_size)
    client = Client(Connection(ws))
    try:
        client.client_id = client_id or f"python-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        info = client_info or {"name": "meshagent-client-python", "version": __version__}
        init = await client.rpc.call("initialize", {"clientId": client.client_id, "clientInfo": info})
        client.server_id = init.get("serverId")
        client.server_info = init.get("serverInfo")
    except BaseException:
        await ws.close()
        raise
    return client


def _put(d, key, value):
    if value is not None:
        d[key] = value
    return d


class Client(Server):
    """A connection to a node's local API. Build one with :func:`connect`.

    Every method is a coroutine that raises :class:`MeshError` for an
    AgentProtocol failure, :class:`RPCError` for any other JSON-RPC error,
    and :class:`ConnectionClosed` once the connection is gone.
    """

    def __init__(self, rpc):
        self.rpc = rpc
        self.client_id = self.server_id = self.server_info = None
        self._progress = {}  # mesh.call request id -> Serial of its on_progress
        self._found = {}  # mesh.discover request id -> callback
        self._subs = {}  # mesh subscription id -> Serial, handler
        self._subscribing = 0  # mesh.subscribe calls waiting for their answer
        self._early = {}  # subscription id -> messages that came before its answer
        self._answered = asyncio.Event()  # set (then replaced) as each mesh.subscribe call ends
        self._bus_subs = []  # (topic pattern, handler, is default handler), oldest first
        rpc.on_notification("mesh.progress", self._on_progress)
        rpc.on_notification("mesh.discovered", self._on_discovered)
        rpc.on_notification("mesh.message", self._on_message)
        rpc.on_request("mesh.message", self._on_durable_message)
        for method in ("processMessage", "sendMessage"):  # seed 001 delivers with either
            rpc.on_request(method, self._on_delivery)
        Server.__init__(self, rpc)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    async def close(self):
        """Close the connection; running handlers are cancelled."""
        await self.rpc.close()

    @property
    def closed(self):
        return self.rpc.closed

    async def wait_closed(self):
        """Wait until the connection closes (the node went away, or close())."""
        await self.rpc.wait_closed()

    # The mesh.

    async def ping(self):
        """The node's time, ``{"timestamp"}``."""
        return await self.rpc.call("ping", {})

    async def id(self):
        """This node's identity: ``{"agentId", "publicKey", "addrs"}``."""
        return await self.rpc.call("mesh.id", {})

    async def peers(self):
        """The node's peers, a list of PeerInfo objects."""
        return await self.rpc.call("mesh.peers", {})

    async def set_status(self, status, *, current_bead=None, max_concurrent_beads=None):
        """Declare this agent's status (seed 004's registry): "available" or "busy",
        the bead it works on and how many beads it takes at once. The whole status
        is replaced; returns the status declared. Peers see it in the next heartbeat,
        sent at once."""
        params = {"status": status}
        if current_bead is not None:
            params["currentBead"] = current_bead
        if max_concurrent_beads is not None:
            params["maxConcurrentBeads"] = max_concurrent_beads
        return await self.rpc.call("mesh.setStatus", params)

    async def audit(self, *, agent=None, since=None, until=None, limit=None, before=None):
        """This agent's audit log (a node started with --audit), newest first: a list of
        ``{"id", "at", "direction", "from", "to", "capability", "size", "outcome",
        "duration_ms", "params"?}``. since and until are RFC 3339 strings."""
        params = {k: v for k, v in (("agent", agent), ("since", since), ("until", until),
                                    ("limit", limit), ("before", before)) if v is not None}
        return (await self.rpc.call("mesh.audit", params))["entries"]

    async def context_get(self, bead_id):
        """A bead's shared context (seed 004) as this node holds it: ``{"bead_id",
        "collaborating_agents", "shared_context", "version", "patches"}``. The first
        access makes the node follow the bead."""
        return await self.rpc.call("mesh.contextGet", {"beadId": bead_id})

    async def context_set(self, bead_id, doc, *, members=None):
        """Replace a bead's shared context with doc (a dict) and publish the change to
        the bead's other members; returns the context after it. Only members change a
        bead: the first change makes this agent a member with the agent ids members
        lists; a member's members replaces them; a non-member gets MeshError
        UNAUTHORIZED."""
        return await self.rpc.call("mesh.contextSet", _put({"beadId": bead_id, "context": doc}, "members", members))

    async def context_patch(self, bead_id, patch, *, members=None):
        """Apply an RFC 7396 merge patch (a dict; a member set to None is removed) to a
        bead's shared context and publish it; returns the context after it. Every member
        applies the patches in (hybrid logical clock, agent id) order, so all converge.
        members as for context_set."""
        return await self.rpc.call("mesh.contextPatch", _put({"beadId": bead_id, "patch": patch}, "members", members))

    async def call(self, capability, params=None, *, agent_id=None, timeout_ms=None, on_progress=None,
                   receipt=None, task_id=None):
        """Call a capability; return the final response ``{"correlationId", "status", "result", ...}``.

        agent_id names the provider (None lets the node choose one, and
        the response's "agentId" says which); on_progress(response) gets each ``in_progress``
        response, in order, before this returns; receipt asks for the
        provider's signed response envelope;
        task_id names the request for task_status and task_cancel.
        """
        p = {"capability": capability}
        _put(p, "agentId", agent_id)
        _put(p, "params", params)
        _put(p, "timeoutMs", timeout_ms)
        _put(p, "taskId", task_id)
        if receipt:
            p["receipt"] = True
        if on_progress is None:
            return await self.rpc.call("mesh.call", p)
        rid = self.rpc.new_id()
        serial = Serial(f"progress of {capability}")
        self._progress[rid] = (serial, on_progress)
        try:
            return await self.rpc.call("mesh.call", p, rid=rid, before_result=serial.drain)
        finally:
            self._progress.pop(rid, None)

    async def discover(self, capability=None, *, keyword=None, timeout_ms=None, on_found=None):
        """Find agents by capability name or keyword; return seed 000's SERVICES_AVAILABLE.

        on_found(peer_info) is called for each agent as soon as it is
        confirmed, and has been for all of them when this returns.
        """
        p = _put(_put(_put({}, "capability", capability), "keyword", keyword), "timeoutMs", timeout_ms)
        if on_found is None:
            return await self.rpc.call("mesh.discover", p)
        rid = self.rpc.new_id()
        serial = Serial(f"discovery of {capability or keyword}")
        self._found[rid] = (serial, on_found)
        try:
            return await self.rpc.call("mesh.discover", p, rid=rid, before_result=serial.drain)
        finally:
            self._found.pop(rid, None)

    async def publish(self, topic, payload, *, filter=None, timeout_ms=None):
        """Publish a JSON object on a mesh topic; return ``{"topic", "peers"}``.

        Raises RPCError with code -32007 when no agent subscribes to it.
        """
        p = _put(_put({"topic": topic, "payload": payload}, "filter", filter), "timeoutMs", timeout_ms)
        return await self.rpc.call("mesh.publish", p)

    async def subscribe(self, pattern, handler, *, durable=None):
        """Subscribe to mesh topics matching pattern; return the subscription id.

        handler(message) gets each ``{"topic", "from", "payload", "time",
        "id"}`` in order (it may be a coroutine function, which is
        awaited). durable names a durable subscription that catches up on
        what it missed from a history keeper (a relay, or a node with
        --keep-history). A durable subscription's messages come one at a
        time, each answered to the node when handler returns: the node
        moves the name's position past a message only then, and the next
        message comes after the answer. If handler raises, the answer is
        an error (a MeshError keeps its code), the message counts as not
        processed, and the node delivers nothing more on this
        subscription: unsubscribe, then subscribe again under the same
        name, which starts with that message. Delivery is at least once: a
        message whose answer did not reach the node (the process or the
        connection ended first, or the node stopped before saving the
        position) comes again with the same ``id`` and ``from``.
        """
        p = _put({"pattern": pattern}, "durable", durable)
        serial = Serial(f"subscription {pattern}")
        self._subscribing += 1
        try:
            res = await self.rpc.call("mesh.subscribe", p)
            sid = res["subscription"]
            self._subs[sid] = (serial, handler)
        finally:
            self._subscribing -= 1
            # Durable messages that came before the answer wait for it.
            self._answered.set()
            self._answered = asyncio.Event()
        # Messages the node sent before its answer were held back for
        # this id.
        early = self._early.pop(sid, [])
        if not self._subscribing:
            self._early.clear()
        for message in early:
            serial.put(handler, message)
        return sid

    async def unsubscribe(self, subscription):
        """End a subscription made with subscribe."""
        entry = self._subs.pop(subscription, None)
        if entry:
            entry[0].stop()
        return await self.rpc.call("mesh.unsubscribe", {"subscription": subscription})

    async def forget_durable(self, durable):
        """Drop the position the node keeps for a durable subscription name
        no longer needed (unsubscribed first): the node keeps positions for
        a bounded number of names, and a new name past it is refused with
        code -32602. Returns whether the node kept one."""
        res = await self.rpc.call("mesh.forgetDurable", {"durable": durable})
        return res["forgotten"]

    async def durables(self):
        """The durable subscription names the node keeps positions for:
        ``{"durables": [{"name", "bytes", "active"}], "limit"}``, the names
        sorted, ``bytes`` each saved position's size, ``active`` true while
        a subscription of the name runs (it cannot be forgotten until
        unsubscribed), ``limit`` the most names the node keeps. What to read
        when a new name is refused, before ``forget_durable``."""
        return await self.rpc.call("mesh.durables", {})

    async def submit(self, agent_id, capability, params=None, *, deadline=None, timeout_ms=None, task_id=None):
        """Submit a detached task; return ``{"taskId", "agentId", "state"}`` once accepted.

        deadline is a Go duration ("24h", the default; at most "168h").
        """
        p = {"agentId": agent_id, "capability": capability}
        _put(p, "params", params)
        _put(p, "deadline", deadline)
        _put(p, "timeoutMs", timeout_ms)
        _put(p, "taskId", task_id)
        return await self.rpc.call("mesh.submit", p)

    async def wait(self, task_id, timeout_ms=None):
        """Wait for a submitted task to end; return its record (state, result, envelope).

        A task that failed or was rejected raises its MeshError.
        """
        return await self.rpc.call("mesh.taskWait", _put({"taskId": task_id}, "timeoutMs", timeout_ms))

    async def tasks(self, state=None):
        """List the tasks the node keeps on disk, submitted and served."""
        return (await self.rpc.call("mesh.tasks", _put({}, "state", state)))["tasks"]

    async def resolve(self, task_id, approve, reason=None):
        """The operator's decision on an ESCALATED task this node serves; return the task."""
        return await self.rpc.call("mesh.taskResolve", _put({"taskId": task_id, "approve": bool(approve)}, "reason", reason))

    async def task_status(self, task_id, agent_id=None):
        """The task (seed 003) of a request this node sent."""
        return await self.rpc.call("mesh.taskStatus", _put({"taskId": task_id}, "agentId", agent_id))

    async def task_cancel(self, task_id, agent_id=None):
        """Cancel a request this node sent; return its task."""
        return await self.rpc.call("mesh.taskCancel", _put({"taskId": task_id}, "agentId", agent_id))

    async def consensus(self, agents, question, options, threshold, deadline_ms, context=None):
        """Ask agents to vote (seed 004); return the tally."""
        p = {"agents": agents, "question": question, "options": options, "threshold": threshold,
             "deadlineMs": deadline_ms}
        return await self.rpc.call("mesh.consensus", _put(p, "context", context))

    def _on_progress(self, params):
        entry = self._progress.get((params or {}).get("requestId"))
        if entry is not None:
            entry[0].put(entry[1], params.get("response"))

    def _on_discovered(self, params):
        entry = self._found.get((params or {}).get("requestId"))
        if entry is not None:
            entry[0].put(entry[1], params.get("agent"))

    def _on_message(self, params):
        sid = (params or {}).get("subscription")
        entry = self._subs.get(sid)
        if entry is not None:
            entry[0].put(entry[1], params.get("message"))
        elif self._subscribing and sum(map(len, self._early.values())) < MAX_EARLY:
            self._early.setdefault(sid, []).append(params.get("message"))

    async def _on_durable_message(self, params):
        """A durable subscription's message: answered once handler returned."""
        sid = (params or {}).get("subscription")
        while sid not in self._subs and self._subscribing:
            await self._answered.wait()
        entry = self._subs.get(sid)
        if entry is None:
            raise RPCError(INVALID_PARAMS, f"no subscription {sid!r} on this client")
        await maybe_await(entry[1](params.get("message")))
        return {}

    # The seed 001 bus.

    async def bus_subscribe(self, topic, handler, *, policy=None, group=None, default_handler=False):
        """Subscribe to bus topics matching the pattern topic.

        handler(topic, payload) answers each delivery: a dict is sent as
        the ack (``{"processed", "should_retry", "message", ...}``), None
        or True acknowledge ``{"processed": true}``, False ``{"processed":
        false}``; an exception makes the delivery fail (the bus retries).
        policy is seed 001's propagation policy; group joins a queue group
        (each message goes to one member).
        """
        p = _put(_put({"topic": topic}, "policy", policy), "group", group)
        if default_handler:
            p["defaultHandler"] = True
        entry = (topic, handler, bool(default_handler))
        self._bus_subs.append(entry)
        try:
            return await self.rpc.call("subscribe", p)
        except BaseException:
            self._bus_subs.remove(entry)
            raise

    async def bus_unsubscribe(self, topic, *, default_handler=False):
        """End the bus subscription to topic."""
        p = {"topic": topic}
        if default_handler:
            p["defaultHandler"] = True
        res = await self.rpc.call("unsubscribe", p)
        self._bus_subs = [e for e in self._bus_subs if (e[0], e[2]) != (topic, bool(default_handler))]
        return res

    async def bus_send(self, topic, payload):
        """Send a message on the bus; return ``{"success", "acks", "messageId", ...}``."""
        return await self.rpc.call("sendMessage", {"topic": topic, "payload": payload})

    async def _on_delivery(self, params):
        topic, payload = (params or {}).get("topic"), (params or {}).get("payload")
        # The bus does not say which subscription matched: the newest
        # matching one answers, as the bus itself orders them.
        # A default handler's delivery matches none of its patterns.
        matching = [h for p, h, _ in self._bus_subs if match_topic(p, topic or "")]
        matching = matching or [h for _, h, dflt in self._bus_subs if dflt]
        if not matching:
            raise RPCError(INVALID_PARAMS, f"no subscription matches {topic!r}")
        handler = matching[-1]
        ack = await maybe_await(handler(topic, payload))
        if ack is None or ack is True:
            return {"processed": True}
        if ack is False:
            return {"processed": False}
        return ack
