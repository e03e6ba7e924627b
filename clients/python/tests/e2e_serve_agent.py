"""A serving agent against a real node (run by the Go test in clients/).

    e2e_serve_agent.py URL CAPABILITY

Serves CAPABILITY (its input_schema: an object with a string "text")
through the node at URL until it is killed, and prints "serving" once the
node offers it. Each request prints "handled <text>" and sends the
progress {"done": 0.5}; the text "escalate" sets the task ESCALATED and
waits for its cancellation (printing "cancelled"); the text "approve-me"
escalates it with the reason "a human decides", prints "escalated
<task id>", waits for the operator's decision and answers {"approved",
"reason", "task": <task id>, "by": "python"}; any other text is
answered {"summary": <its first 10 characters>, "by": "python"}. It
takes direct messages too, printing "message <subject>" for each and
answering {"ack": <subject>, "by": "python"}.

It calls other agents through its own node too: each line
"call CAPABILITY [AGENT_ID]" read on standard input is a mesh.call with
the params {"text": "hello from python"} (without agentId when AGENT_ID
is absent), printed as "called CAPABILITY AGENT_ID|any {"agentId",
"result"}" or "call failed CAPABILITY AGENT_ID|any <error>".
"""
import asyncio
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import meshagent_client as mc  # noqa: E402

SCHEMA = {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}}


async def handler(req):
    text = req.params["text"]
    print(f"handled {text}", flush=True)
    await req.progress({"done": 0.5})
    if text == "approve-me":
        await req.escalate("a human decides")
        print(f"escalated {req.task_id}", flush=True)
        d = await req.decision()
        return {"approved": d["approved"], "reason": d["reason"], "task": req.task_id, "by": "python"}
    if text == "escalate":
        await req.set_state("ESCALATED")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            print("cancelled", flush=True)
            raise
    return {"summary": text[:10], "by": "python"}


async def inbox(message, sender):
    print(f"message {message['subject']}", flush=True)
    return {"ack": message["subject"], "by": "python"}


async def caller(mesh):
    # A thread reads standard input so that the event loop keeps serving
    # while no line comes; end of input ends only the calls.
    loop = asyncio.get_running_loop()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        words = line.split()
        if len(words) < 2 or words[0] != "call":
            continue
        capability, agent_id = words[1], (words[2] if len(words) > 2 else None)
        target = agent_id or "any"
        try:
            res = await mesh.call(capability, {"text": "hello from python"}, agent_id=agent_id)
        except Exception as e:  # noqa: BLE001 - the test reads the failure
            print(f"call failed {capability} {target} {e}", flush=True)
            continue
        answer = json.dumps({"agentId": res.get("agentId"), "result": res.get("result")}, separators=(",", ":"))
        print(f"called {capability} {target} {answer}", flush=True)


async def main(url, name):
    async with await mc.connect(url, f"{name}-agent") as mesh:
        await mesh.serve({"name": name, "description": "summarizes, in Python", "input_schema": SCHEMA}, handler)
        await mesh.on_message(inbox)
        print("serving", flush=True)
        calls = asyncio.create_task(caller(mesh))
        await mesh.wait_closed()
        calls.cancel()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
