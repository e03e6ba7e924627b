#!/usr/bin/env python3
"""A seed 001 bus client: JSON-RPC 2.0 over WebSocket, through the
meshagent_client package (clients/python).

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
import json
import os
import sys

try:
    import meshagent_client
except ImportError:  # not pip-installed: use the package from this checkout
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
    import meshagent_client


async def main(args):
    bus = await meshagent_client.connect(args.url, args.id, client_info={"name": "python-client", "version": "1.0"})
    async with bus:
        inbox = asyncio.Queue()  # (topic, payload) of each delivery, after its ack; None at the end

        def deliver(topic, payload):
            # The ack goes out when this returns; the main loop prints it after.
            asyncio.get_running_loop().call_soon(inbox.put_nowait, (topic, payload))
            return {"processed": True, "message": f"{args.id} got it"}

        closed = asyncio.ensure_future(bus.wait_closed())
        closed.add_done_callback(lambda _: inbox.put_nowait(None))
        print(f"initialized: server {bus.server_id}")
        await bus.bus_subscribe(args.subscribe, deliver)
        print(f"subscribed: {args.subscribe}")
        if args.send:
            res = await bus.bus_send(args.send, {"type": "plaintext_message", "text": args.text, "sender": args.id})
            print(f"sent {args.send}: success={json.dumps(res['success'])} messageId={res.get('messageId')}")
            for ack in res["acks"]:
                print(f"  ack {ack['client_id']}: processed={json.dumps(ack['processed'])} {ack.get('message', '')}")
        print(f"ping: {(await bus.ping())['timestamp']}")
        received = 0
        while not args.count or received < args.count:
            delivery = await inbox.get()
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
