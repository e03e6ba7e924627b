"""An agent for the Go test of offline delivery in clients/ (real nodes).

    e2e_offline_agent.py durable URL PATTERN NAME
                                                 subscribe to PATTERN as durable NAME;
                                                 print "kept <name> active|idle" per durable
                                                 name the node lists, "subscribed", then
                                                 "msg <n>" per message
    e2e_offline_agent.py inbox URL              take direct messages; print "listening",
                                                 then "message <subject>" per message
    e2e_offline_agent.py send URL AGENT SUBJECT send AGENT a direct message; print the result
    e2e_offline_agent.py group URL TOPIC GROUP NAME
                                                 join bus queue group GROUP on TOPIC; print
                                                 "subscribed", then "got <NAME> <n>" per message
    e2e_offline_agent.py calls URL AGENT        call echo on AGENT with a receipt, then echo
                                                 with no agent id; print "receipt <json>" and
                                                 "any <agent id>"

The long-running modes run until killed.
"""
import asyncio
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import meshagent_client as mc  # noqa: E402


async def durable(mesh, pattern, name):
    await mesh.subscribe(pattern, lambda m: print(f"msg {m['payload']['n']}", flush=True), durable=name)
    for d in (await mesh.durables())["durables"]:
        print(f"kept {d['name']} {'active' if d['active'] else 'idle'}", flush=True)
    print("subscribed", flush=True)
    await mesh.wait_closed()


async def inbox(mesh):
    async def on_message(message, sender):
        print(f"message {message['subject']}", flush=True)
        return {"ack": message["subject"], "by": "python"}

    await mesh.on_message(on_message)
    print("listening", flush=True)
    await mesh.wait_closed()


async def send(mesh, agent, subject):
    res = await mesh.send_message(agent, {"subject": subject, "body": "from python", "requires_response": True})
    print(json.dumps(res), flush=True)


async def group(mesh, topic, name, me):
    def on_delivery(topic, payload):
        print(f"got {me} {payload['n']}", flush=True)

    await mesh.bus_subscribe(topic, on_delivery, group=name)
    print("subscribed", flush=True)
    await mesh.wait_closed()


async def calls(mesh, agent):
    res = await mesh.call("echo", {"text": "receipt"}, agent_id=agent, receipt=True)
    print("receipt " + json.dumps(res["receipt"]), flush=True)
    res = await mesh.call("echo", {"text": "any"})
    print("any " + res["agentId"], flush=True)


async def main(mode, url, *args):
    async with await mc.connect(url, f"offline-{mode}-{os.getpid()}") as mesh:
        if mode == "durable":
            await durable(mesh, *args)
        elif mode == "inbox":
            await inbox(mesh)
        elif mode == "send":
            await send(mesh, *args)
        elif mode == "group":
            await group(mesh, *args)
        elif mode == "calls":
            await calls(mesh, *args)
        else:
            sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
