"""Serving and direct messages against a fake node, exactly as the README's
"Local API: serving" specifies them: a client that drifts from the spec
fails here."""
import asyncio
import datetime
import unittest

import meshagent_client as mc
from fakenode import FakeNode

SUMMARIZE = {"name": "summarize", "description": "tl;dr", "input_schema": {"type": "object"}, "idempotent": False}


def handle_params(task_id="t1", capability="summarize", params=None):
    return {"taskId": task_id, "requester": "12D3KooWCaller", "capability": capability,
            "params": params if params is not None else {"text": "long"}, "correlationId": "corr-" + task_id,
            "deadline": "2030-01-02T03:04:05Z"}


class ServeTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.node = await FakeNode().start()
        self.client = await mc.connect(self.node.url, "py-serve")

    async def asyncTearDown(self):
        await self.client.close()
        await self.node.stop()

    async def serve(self, handler, capability=SUMMARIZE):
        fut = asyncio.ensure_future(self.client.serve(capability, handler))
        req = await self.node.next("mesh.serve")
        self.assertEqual(req["params"], {"capabilities": [capability]})
        await self.node.reply(req, {"serving": [capability["name"]]})
        self.assertEqual(await fut, {"serving": [capability["name"]]})

    async def test_handle_progress_state_result(self):
        seen = {}

        async def handler(req):
            seen.update(task=req.task_id, requester=req.requester, capability=req.capability,
                        correlation=req.correlation_id, deadline=req.deadline, params=req.params)
            await req.progress({"step": 1})
            await req.set_state("ESCALATED")
            return {"summary": "short"}
        await self.serve(handler)
        rid = await self.node.request("mesh.handle", handle_params())
        msg = await self.node.next("mesh.progress")
        self.assertEqual(msg["params"], {"taskId": "t1", "result": {"step": 1}})
        self.assertNotIn("id", msg)  # a notification
        msg = await self.node.next("mesh.setState")
        self.assertEqual(msg["params"], {"taskId": "t1", "state": "ESCALATED"})
        self.assertNotIn("id", msg)
        ans = await self.node.answer(rid)
        self.assertEqual(ans["result"], {"summary": "short"})
        self.assertEqual(seen, {"task": "t1", "requester": "12D3KooWCaller", "capability": "summarize",
                                "correlation": "corr-t1", "params": {"text": "long"},
                                "deadline": datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)})

    async def test_escalate_and_learn_the_decision(self):
        learnt = []

        async def handler(req):
            await req.escalate("over budget")
            req.on_resolved(learnt.append)
            d = await req.decision()
            return {"approved": d["approved"], "task": req.task_id}
        await self.serve(handler)
        hp = dict(handle_params(), requesterTaskId="01task")
        rid = await self.node.request("mesh.handle", hp)
        msg = await self.node.next("mesh.setState")
        self.assertEqual(msg["params"], {"taskId": "t1", "state": "ESCALATED", "reason": "over budget"})
        await self.node.notify("mesh.taskResolved", {"taskId": "t1", "approved": True, "reason": "ok"})
        self.assertEqual((await self.node.answer(rid))["result"], {"approved": True, "task": "01task"})
        self.assertEqual(learnt, [{"approved": True, "reason": "ok"}])

    async def test_escalated_leaves_the_answer_to_the_decision(self):
        def handler(req):
            raise mc.Escalated("a human decides")
        await self.serve(handler)
        rid = await self.node.request("mesh.handle", handle_params())
        self.assertEqual((await self.node.answer(rid))["error"], {"code": -32021, "message": "a human decides"})

    async def test_sync_handler(self):
        await self.serve(lambda req: {"n": req.params["n"] + 1})
        rid = await self.node.request("mesh.handle", handle_params(params={"n": 1}))
        self.assertEqual((await self.node.answer(rid))["result"], {"n": 2})

    async def test_mesh_error_answer(self):
        def handler(req):
            raise mc.MeshError("UNAUTHORIZED", "not you", {"reason": "policy"})
        await self.serve(handler)
        rid = await self.node.request("mesh.handle", handle_params())
        self.assertEqual((await self.node.answer(rid))["error"],
                         {"code": -32017, "message": "not you", "data": {"code": "UNAUTHORIZED", "details": {"reason": "policy"}}})

    async def test_other_exception_is_internal_error(self):
        def handler(req):
            raise ValueError("boom")
        await self.serve(handler)
        with self.assertLogs("meshagent_client", "ERROR"):
            rid = await self.node.request("mesh.handle", handle_params())
            err = (await self.node.answer(rid))["error"]
        self.assertEqual((err["code"], err["data"]["code"]), (-32016, "INTERNAL_ERROR"))

    async def test_unserved_capability(self):
        rid = await self.node.request("mesh.handle", handle_params(capability="nothing"))
        err = (await self.node.answer(rid))["error"]
        self.assertEqual((err["code"], err["data"]["code"]), (-32013, "CAPABILITY_NOT_SUPPORTED"))

    async def test_cancel(self):
        started, cancelled = asyncio.Event(), asyncio.Event()

        async def handler(req):
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                return {"late": True}  # swallowed: still never the answer
        await self.serve(handler)
        rid = await self.node.request("mesh.handle", handle_params(task_id="t2"))
        await asyncio.wait_for(started.wait(), 5)
        await self.node.notify("mesh.cancel", {"taskId": "other"})
        await self.node.notify("mesh.cancel", {"taskId": "t2"})
        await asyncio.wait_for(cancelled.wait(), 5)
        ans = await self.node.answer(rid)
        self.assertEqual(ans["error"]["data"]["code"], "INTERNAL_ERROR")
        self.assertNotIn("result", ans)

    async def test_unserve_stops_handling(self):
        await self.serve(lambda req: 1)
        fut = asyncio.ensure_future(self.client.unserve("summarize"))
        req = await self.node.next("mesh.unserve")
        self.assertEqual(req["params"], {"capabilities": ["summarize"]})
        await self.node.reply(req, {"serving": []})
        self.assertEqual(await fut, {"serving": []})
        rid = await self.node.request("mesh.handle", handle_params())
        self.assertEqual((await self.node.answer(rid))["error"]["data"]["code"], "CAPABILITY_NOT_SUPPORTED")

    async def test_serve_refuses_a_handler_field(self):
        with self.assertRaises(ValueError):
            await self.client.serve({"name": "x", "handler": "echo"}, lambda r: 1)
        with self.assertRaises(ValueError):
            await self.client.serve({"description": "no name"}, lambda r: 1)

    async def test_serve_refused_forgets_handler(self):
        fut = asyncio.ensure_future(self.client.serve(SUMMARIZE, lambda r: 1))
        req = await self.node.next("mesh.serve")
        await self.node.reply(req, error={"code": -32602, "message": "bad schema"})
        with self.assertRaises(mc.RPCError):
            await fut
        rid = await self.node.request("mesh.handle", handle_params())
        self.assertEqual((await self.node.answer(rid))["error"]["data"]["code"], "CAPABILITY_NOT_SUPPORTED")

    async def test_agent_message_dedup(self):
        calls, release = [], asyncio.Event()

        async def handler(message, sender):
            calls.append((message["message_id"], sender))
            await release.wait()
            return {"reply": f"seen {message['subject']}", "n": len(calls)}
        fut = asyncio.ensure_future(self.client.on_message(handler))
        req = await self.node.next("mesh.onMessage")
        self.assertEqual(req["params"], {})
        await self.node.reply(req, {"ok": True})
        await fut
        msg = {"message_id": "m1", "subject": "review", "body": "please", "priority": "high", "requires_response": True}
        first = await self.node.request("mesh.agentMessage", {"from": "12D3KooWS", "message": msg})
        again = await self.node.request("mesh.agentMessage", {"from": "12D3KooWS", "message": msg})
        release.set()
        answers = {}
        for _ in range(2):
            a = await self.node.next()
            answers[a["id"]] = a["result"]
        self.assertEqual(answers[first], {"reply": "seen review", "n": 1})
        self.assertEqual(answers[again], answers[first])
        third = await self.node.request("mesh.agentMessage", {"from": "12D3KooWS", "message": msg})
        self.assertEqual((await self.node.answer(third))["result"], answers[first])
        other = await self.node.request("mesh.agentMessage", {"from": "12D3KooWS", "message": dict(msg, message_id="m2")})
        self.assertEqual((await self.node.answer(other))["result"]["n"], 2)
        self.assertEqual(calls, [("m1", "12D3KooWS"), ("m2", "12D3KooWS")])

    async def test_agent_message_without_handler(self):
        rid = await self.node.request("mesh.agentMessage", {"from": "A", "message": {"message_id": "m", "body": "b"}})
        self.assertIn("error", await self.node.answer(rid))

    async def test_close_cancels_running_handlers(self):
        started, cancelled = asyncio.Event(), asyncio.Event()

        async def handler(req):
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise
        await self.serve(handler)
        await self.node.request("mesh.handle", handle_params())
        await asyncio.wait_for(started.wait(), 5)
        await self.node.ws.close()
        await asyncio.wait_for(cancelled.wait(), 5)


if __name__ == "__main__":
    unittest.main()
