"""JSON-RPC 2.0 over one WebSocket: calls out, requests and notifications in.

The node calls the client too (processMessage, mesh.handle,
mesh.agentMessage), so one read loop routes each frame: a response
resolves the pending call with its id, a request runs its handler in a
task of its own (a handler may call the node while the loop goes on
reading), and a notification is handed to its handler in the loop, which
must not block (the client queues work per subscription).
"""
import asyncio
import itertools
import json
import logging

from .errors import (ESCALATED, INTERNAL_ERROR, Escalated, METHOD_NOT_FOUND, ClientError, ConnectionClosed, MeshError, RPCError,
                     from_rpc)

log = logging.getLogger("meshagent_client")


class Connection:
    """One JSON-RPC peer over an open websockets connection."""

    def __init__(self, ws):
        self._ws = ws
        self._ids = itertools.count(1)
        self._pending = {}
        self._requests = {}  # method -> async fn(params) -> result (raise MeshError/RPCError to refuse)
        self._notifications = {}  # method -> fn(params), called in the read loop
        self._tasks = set()  # request handlers running; cancelled by close
        self._closed = asyncio.get_running_loop().create_future()
        self._reader = asyncio.create_task(self._read_loop())

    def on_request(self, method, fn):
        self._requests[method] = fn

    def on_notification(self, method, fn):
        self._notifications[method] = fn

    @property
    def closed(self):
        return self._closed.done()

    async def wait_closed(self):
        """Wait until the connection has closed, for whatever reason."""
        await asyncio.shield(self._closed)

    def new_id(self):
        """A fresh request id, for a call whose notifications name it."""
        return next(self._ids)

    async def call(self, method, params=None, *, rid=None, before_result=None):
        """Send a request and return its result; raise MeshError or RPCError.

        rid is the request id (new_id()) when the caller must know it;
        before_result, if given, is awaited after the response arrived and
        before it is returned (the client drains progress callbacks so).
        """
        if self._closed.done():
            raise ConnectionClosed("the connection to the node is closed")
        if rid is None:
            rid = next(self._ids)
        fut = self._pending[rid] = asyncio.get_running_loop().create_future()
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        try:
            await self._send(msg)
            result = await fut
        finally:
            self._pending.pop(rid, None)
        if before_result is not None:
            await before_result()
        return result

    async def notify(self, method, params=None):
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        await self._send(msg)

    async def _send(self, msg):
        try:
            await self._ws.send(json.dumps(msg, separators=(",", ":")))
        except Exception as exc:  # the socket is gone: report it as closed
            raise ConnectionClosed(f"send {msg.get('method', 'response')}: {exc}") from exc

    async def close(self):
        await self._ws.close()
        await self.wait_closed()

    async def _read_loop(self):
        cause = None
        try:
            async for frame in self._ws:
                try:
                    msg = json.loads(frame)
                except ValueError:
                    log.warning("dropped a frame that is not JSON")
                    continue
                for m in msg if isinstance(msg, list) else [msg]:
                    if isinstance(m, dict):
                        self._route(m)
        except Exception as exc:  # the connection broke
            cause = exc
        finally:
            self._shutdown(cause)

    def _shutdown(self, cause):
        err = ConnectionClosed(f"the node closed the connection{': ' + str(cause) if cause else ''}")
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(err)
        for task in list(self._tasks):
            task.cancel()
        if not self._closed.done():
            self._closed.set_result(None)

    def _route(self, msg):
        method = msg.get("method")
        if method is None:  # a response to one of our calls
            fut = self._pending.get(msg.get("id"))
            if fut is None or fut.done():
                return
            if "error" in msg:
                fut.set_exception(from_rpc(msg["error"]))
            else:
                fut.set_result(msg.get("result"))
        elif "id" in msg:
            task = asyncio.create_task(self._answer(msg))
            self._tasks.add(task)  # keep a reference: tasks are weakly held
            task.add_done_callback(self._tasks.discard)
        else:
            fn = self._notifications.get(method)
            if fn is not None:
                try:
                    fn(msg.get("params"))
                except Exception:
                    log.exception("notification %s: handler failed", method)

    async def _answer(self, msg):
        fn = self._requests.get(msg["method"])
        reply = {"jsonrpc": "2.0", "id": msg["id"]}
        if fn is None:
            reply["error"] = {"code": METHOD_NOT_FOUND, "message": f"method not found: {msg['method']}"}
        else:
            try:
                reply["result"] = await fn(msg.get("params"))
            except MeshError as exc:
                reply["error"] = exc.to_rpc()
            except Escalated as exc:
                reply["error"] = {"code": ESCALATED, "message": exc.reason}
            except RPCError as exc:
                reply["error"] = {"code": exc.code, "message": exc.message}
                if exc.data is not None:
                    reply["error"]["data"] = exc.data
            except asyncio.CancelledError:
                if self._closed.done():
                    raise
                reply["error"] = MeshError("INTERNAL_ERROR", "cancelled").to_rpc()
            except Exception as exc:
                log.exception("request %s: handler failed", msg["method"])
                reply["error"] = MeshError("INTERNAL_ERROR", f"handler failed: {type(exc).__name__}: {exc}").to_rpc()
        try:
            await self._send(reply)
        except ClientError:
            pass  # the connection closed while the handler ran: nobody to answer
