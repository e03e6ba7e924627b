"""The package against two real nodes (run by the Go test in clients/).

    e2e_real_node.py URL_A URL_B AGENT_A

Node A serves the built-in echo; B is bootstrapped to A. Prints one
"ok: ..." line per check and exits non-zero at the first failure.
"""
import asyncio
import os
import sys
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import meshagent_client as mc  # noqa: E402

# How long the mesh may take to settle (directory, topic peers).
SETTLE = 20


async def retry(what, fn):
    """fn() until it returns truthy without raising, for SETTLE seconds."""
    loop = asyncio.get_running_loop()
    end, last = loop.time() + SETTLE, None
    while loop.time() < end:
        try:
            res = await fn()
            if res:
                return res
            last = f"{what}: not yet"
        except (mc.MeshError, mc.RPCError) as exc:
            last = exc
        await asyncio.sleep(0.2)
    raise SystemExit(f"FAIL {what}: {last}")


def check(cond, what):
    if not cond:
        raise SystemExit(f"FAIL {what}")
    print(f"ok: {what}", flush=True)


async def main(url_a, url_b, agent_a):
    async with await mc.connect(url_a, "py-e2e-a") as a, await mc.connect(url_b, "py-e2e-b") as b:
        check((await a.id())["agentId"] == agent_a, "mesh.id names node A")
        agent_b = (await b.id())["agentId"]

        # A declared status reaches the other node in a heartbeat.
        declared = await a.set_status("busy", current_bead="bd-py", max_concurrent_beads=2)
        check(declared == {"status": "busy", "currentBead": "bd-py", "maxConcurrentBeads": 2}, "set_status answers the status")

        async def b_sees_a_busy():
            return any(p["agentId"] == agent_a and p.get("currentBead") == "bd-py" and p.get("status") == "busy"
                       for p in await b.peers())
        await retry("node B sees node A's declared status", b_sees_a_busy)
        await a.set_status("available")

        # A shared bead context: B follows the bead, A sets and patches it, and B
        # reads the merged document (live, or from A's history within a catch-up).
        await b.context_get("bd-ctx-py")
        await a.context_set("bd-ctx-py", {"files_modified": ["src/auth.go"], "review_status": "new", "owner": "a"})
        mine = await a.context_patch("bd-ctx-py", {"review_status": "in_progress", "owner": None,
                                                   "test_results": {"passed": 14, "failed": 1}})
        merged = {"files_modified": ["src/auth.go"], "review_status": "in_progress",
                  "test_results": {"passed": 14, "failed": 1}}
        check(mine["shared_context"] == merged and mine["patches"] == 2, "context_patch answers the merged document")

        async def b_reads_merged():
            got = await b.context_get("bd-ctx-py")
            return got["shared_context"] == merged and got["version"] == mine["version"] and \
                [h["from"] for h in got["message_history"]] == [agent_a, agent_a]
        await retry("node B reads the merged context and its message history", b_reads_merged)
        check(True, "context patched on A is merged on B")
        try:
            await b.context_patch("bd-ctx-py", {"review_status": "hijacked"})
            check(False, "a non-member's patch refused")
        except mc.MeshError as exc:
            check(exc.code == "UNAUTHORIZED", f"a non-member's patch is MeshError {exc.code}")

        # A built-in capability, with a progress callback and a task id.
        task = "py-" + uuid.uuid4().hex[:12]
        progress = []
        res = await b.call("echo", {"text": "hello from python"}, agent_id=agent_a, timeout_ms=10000,
                           on_progress=progress.append, task_id=task)
        check(res["status"] == "success" and res["result"] == {"text": "hello from python"}, "call echo")
        status = await b.task_status(task, agent_a)
        check(status.get("state") == "COMPLETED", f"task status {status.get('state')}")

        found = []
        await retry("discover finds node A", lambda: _has_agent(b, agent_a, found))
        check(agent_a in [f["agentId"] for f in found], "discover echo finds node A (streamed too)")

        # A typed error: an unknown capability.
        try:
            await b.call("no.such.capability", {}, agent_id=agent_a)
            check(False, "unknown capability refused")
        except mc.MeshError as exc:
            check(exc.code == "CAPABILITY_NOT_SUPPORTED" and exc.rpc_code == -32013,
                  f"unknown capability is MeshError {exc.code} ({exc.rpc_code})")

        # Topics between the two nodes.
        inbox = asyncio.Queue()
        sub = await a.subscribe("news:*", inbox.put)
        await retry("publish news:py", lambda: b.publish("news:py", {"n": 1, "from": "python"}, timeout_ms=2000))
        msg = await asyncio.wait_for(inbox.get(), SETTLE)
        check(msg["topic"] == "news:py" and msg["payload"]["from"] == "python" and msg["from"] == agent_b,
              "subscribe on A gets B's publish")
        await a.unsubscribe(sub)

        # The seed 001 bus on node A: one client subscribes, another sends.
        async with await mc.connect(url_a, "py-e2e-bus") as bus:
            await bus.bus_subscribe("inbound:py-e2e", lambda topic, payload: {
                "processed": True, "message": f"bus got {payload['text']}"})
            res = await a.bus_send("inbound:py-e2e", {"type": "plaintext_message", "text": "hi"})
            acks = [(k["client_id"], k["processed"], k.get("message")) for k in res["acks"]]
            check(res["success"] and ("py-e2e-bus", True, "bus got hi") in acks, "bus round trip")
    print("e2e: ok", flush=True)


async def _has_agent(client, agent, found):
    res = await client.discover("echo", timeout_ms=3000, on_found=found.append)
    return any(s["agent_id"] == agent for s in res["services_found"])


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
