"""A scripted stand-in for a node's local API, for the client's unit tests.

It answers initialize by itself and queues every other message the
client sends, so that a test reads exactly what went over the wire and
answers (or calls the client) as the node would.
"""
import asyncio
import json

import websockets


class FakeNode:
    async def start(self):
        self.inbox = asyncio.Queue()
        self.connected = asyncio.get_running_loop().create_future()
        self.server = await websockets.serve(self._conn, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        self.url = f"ws://127.0.0.1:{port}/"
        self._ids = 1000
        return self

    async def stop(self):
        self.server.close()
        await self.server.wait_closed()

    async def _conn(self, ws, *_path):  # websockets < 10.1 passes the path too
        self.ws = ws
        async for frame in ws:
            msg = json.loads(frame)
            if msg.get("method") == "initialize":
                self.init = msg["params"]
                await self.send({"jsonrpc": "2.0", "id": msg["id"], "result": {
                    "serverId": "12D3KooWFake", "serverInfo": {"name": "fake"}, "capabilities": {}}})
                if not self.connected.done():
                    self.connected.set_result(None)
                continue
            await self.inbox.put(msg)

    async def send(self, msg):
        await self.ws.send(json.dumps(msg))

    async def next(self, method=None, timeout=5):
        """The next message from the client; fails if it is not method."""
        msg = await asyncio.wait_for(self.inbox.get(), timeout)
        if method is not None and msg.get("method") != method:
            raise AssertionError(f"got {msg}, want method {method}")
        return msg

    async def reply(self, msg, result=None, error=None):
        out = {"jsonrpc": "2.0", "id": msg["id"]}
        if error is not None:
            out["error"] = error
        else:
            out["result"] = result
        await self.send(out)

    async def notify(self, method, params):
        await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def request(self, method, params):
        """Send a request to the client; return its id (the answer comes via next())."""
        self._ids += 1
        await self.send({"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params})
        return self._ids

    async def answer(self, rid, timeout=5):
        """The client's response to request rid."""
        msg = await self.next(timeout=timeout)
        if msg.get("id") != rid or "method" in msg:
            raise AssertionError(f"got {msg}, want the response to {rid}")
        return msg
