#!/usr/bin/env python3
"""A seed 001 bus client: JSON-RPC 2.0 over WebSocket, nothing meshagent-specific.

It initializes, subscribes to a topic (answering the bus's processMessage
requests with {"processed": true}), sends one message and prints the
aggregated acks, pings, then prints what arrives on its subscription.

    client.py [--url URL] [--id ID] [--subscribe PATTERN]
              [--send TOPIC] [--text TEXT] [--count N]

URL defaults to $MESHAGENT_BUS_URL, $BUB_BUS_URL, else ws://127.0.0.1:7892/.
With --count N it exits after N deliveries; with 0 (the default) it runs
until interrupted. Needs the websockets package (Debian: python3-websockets).
"""
import argparse
import asyncio
import itertools
import json
import os
import sys

import websockets


class Bus:
    """One WebSocket connection: calls out, and answers the bus's deliveries."""

    def __init__(self, ws, client_id):
        self.ws, self.client_id = ws, client_id
        self.ids, self.pending = itertools.count(1), {}
        self.inbox = asyncio.Queue()  # (topic, payload) of each delivery, after its ack; None at the end

    async def call(self, method, params):
        rid = next(self.ids)
        self.pending[rid] = fut = asyncio.get_running_loop().create_future()
        try:
            await self.ws.send(json.dumps({"jsonrpc": "2.0", "method": method, "params": params, "id": rid}))
            return await fut
        finally:
            del self.pending[rid]

    async def read_loop(self):
        try:
            async for frame in self.ws:
                await self.handle(json.loads(frame))
        finally:  # the connection is gone: fail the calls still waiting
            for fut in self.pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("the bus closed the connection"))
            self.inbox.put_nowait(None)

    async def handle(self, msg):
        if "method" not in msg:  # the response to one of our calls
            fut = self.pending.get(msg.get("id"))
            if fut and not fut.done():
                if "error" in msg:
                    fut.set_exception(RuntimeError(f"{msg['error']['code']}: {msg['error']['message']}"))
                else:
                    fut.set_result(msg["result"])
        elif msg["method"] in ("processMessage", "sendMessage"):  # a delivery: ack it
            if "id" in msg:
                await self.reply(msg["id"], result={"processed": True, "message": f"{self.client_id} got it"})
            self.inbox.put_nowait((msg["params"]["topic"], msg["params"]["payload"]))
        elif "id" in msg:
            await self.reply(msg["id"], error={"code": -32601, "message": "method not found"})

    async def reply(self, rid, **outcome):
        await self.ws.send(json.dumps({"jsonrpc": "2.0", "id": rid, **outcome}))


async def main(args):
    async with websockets.connect(args.url) as ws:
        bus = Bus(ws, args.id)
        reader = asyncio.create_task(bus.read_loop())  # keep a reference: tasks are weakly held
        init = await bus.call("initialize", {"clientId": args.id,
                                             "clientInfo": {"name": "python-client", "version": "1.0"}})
        print(f"initialized: server {init['serverId']}")
        await bus.call("subscribe", {"topic": args.subscribe})
        print(f"subscribed: {args.subscribe}")
        if args.send:
            res = await bus.call("sendMessage", {"topic": args.send, "payload": {
                "type": "plaintext_message", "text": args.text, "sender": args.id}})
            print(f"sent {args.send}: success={json.dumps(res['success'])} messageId={res.get('messageId')}")
            for ack in res["acks"]:
                print(f"  ack {ack['client_id']}: processed={json.dumps(ack['processed'])} {ack.get('message', '')}")
        print(f"ping: {(await bus.call('ping', {}))['timestamp']}")
        received = 0
        while not args.count or received < args.count:
            delivery = await bus.inbox.get()
            if delivery is None:
                raise SystemExit("client.py: the bus closed the connection")
            topic, payload = delivery
            print(f"received {topic}: " + json.dumps(payload, separators=(",", ":")))
            received += 1


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)
    p = argparse.ArgumentParser(description="seed 001 bus client")
    p.add_argument("--url", default=os.environ.get("MESHAGENT_BUS_URL") or os.environ.get("BUB_BUS_URL")
                   or "ws://127.0.0.1:7892/")
    p.add_argument("--id", default=os.environ.get("BUB_AGENT_ID") or f"python-client-{os.getpid()}")
    p.add_argument("--subscribe", default="inbound:python")
    p.add_argument("--send", default="outbound:42", help="topic to send to ('' to send nothing)")
    p.add_argument("--text", default="hello from python")
    p.add_argument("--count", type=int, default=0, help="exit after N deliveries (0: run until interrupted)")
    try:
        asyncio.run(main(p.parse_args()))
    except KeyboardInterrupt:
        pass
