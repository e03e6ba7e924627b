"""The client against a fake node: every method's wire shape, and the errors."""
import asyncio
import unittest

import meshagent_client as mc
from fakenode import FakeNode


class ClientTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.node = await FakeNode().start()
        self.client = await mc.connect(self.node.url, "py-test", client_info={"name": "t", "version": "1"})

    async def asyncTearDown(self):
        await self.client.close()
        await self.node.stop()

    def go(self, coro):
        """Run a client call in the background while the test plays the node."""
        return asyncio.ensure_future(coro)

    async def test_initialize(self):
        self.assertEqual(self.node.init, {"clientId": "py-test", "clientInfo": {"name": "t", "version": "1"}})
        self.assertEqual(self.client.server_id, "12D3KooWFake")

    async def test_call_progress_then_result(self):
        seen = []
        call = self.go(self.client.call("echo", {"text": "hi"}, agent_id="12D3KooWA", timeout_ms=500,
                                        on_progress=seen.append, receipt=True))
        req = await self.node.next("mesh.call")
        self.assertEqual(req["params"], {"capability": "echo", "agentId": "12D3KooWA", "params": {"text": "hi"},
                                         "timeoutMs": 500, "receipt": True})
        for i in (1, 2):
            await self.node.notify("mesh.progress", {"requestId": req["id"], "response": {"status": "in_progress", "result": i}})
        await self.node.notify("mesh.progress", {"requestId": 999999, "response": {"result": "another call's"}})
        await self.node.reply(req, {"correlationId": "c1", "status": "success", "result": {"text": "hi"}})
        res = await call
        self.assertEqual(res["result"], {"text": "hi"})
        self.assertEqual([p["result"] for p in seen], [1, 2])

    async def test_call_without_agent_sends_none(self):
        call = self.go(self.client.call("summarize"))
        req = await self.node.next("mesh.call")
        self.assertEqual(req["params"], {"capability": "summarize"})
        await self.node.reply(req, {"status": "success"})
        await call

    async def test_mesh_error_is_typed(self):
        call = self.go(self.client.call("secret", agent_id="12D3KooWA"))
        req = await self.node.next("mesh.call")
        await self.node.reply(req, error={"code": -32017, "message": "not on the list",
                                          "data": {"code": "UNAUTHORIZED", "details": {"who": "me"}, "correlationId": "c9"}})
        with self.assertRaises(mc.MeshError) as cm:
            await call
        e = cm.exception
        self.assertEqual((e.code, e.rpc_code, e.details, e.correlation_id, e.message),
                         ("UNAUTHORIZED", -32017, {"who": "me"}, "c9", "not on the list"))

    async def test_rpc_error_is_not_mesh_error(self):
        pub = self.go(self.client.publish("news:1", {"a": 1}, filter={"personaTypes": ["qa"]}, timeout_ms=100))
        req = await self.node.next("mesh.publish")
        self.assertEqual(req["params"], {"topic": "news:1", "payload": {"a": 1}, "filter": {"personaTypes": ["qa"]}, "timeoutMs": 100})
        await self.node.reply(req, error={"code": -32007, "message": "no peers"})
        with self.assertRaises(mc.RPCError) as cm:
            await pub
        self.assertEqual(cm.exception.code, -32007)

    async def test_simple_methods(self):
        cases = [
            (self.client.ping(), "ping", {}),
            (self.client.id(), "mesh.id", {}),
            (self.client.peers(), "mesh.peers", {}),
            (self.client.task_status("t1"), "mesh.taskStatus", {"taskId": "t1"}),
            (self.client.task_cancel("t1", "12D3KooWA"), "mesh.taskCancel", {"taskId": "t1", "agentId": "12D3KooWA"}),
            (self.client.bus_send("outbound:1", {"x": 1}), "sendMessage", {"topic": "outbound:1", "payload": {"x": 1}}),
            (self.client.bus_unsubscribe("a:*"), "unsubscribe", {"topic": "a:*"}),
            (self.client.send_message("12D3KooWB", {"subject": "hi", "body": "b"}), "mesh.sendMessage",
             {"agentId": "12D3KooWB", "message": {"subject": "hi", "body": "b"}}),
            (self.client.unserve("summarize"), "mesh.unserve", {"capabilities": ["summarize"]}),
            (self.client.set_status("busy", current_bead="bd-1", max_concurrent_beads=2), "mesh.setStatus",
             {"status": "busy", "currentBead": "bd-1", "maxConcurrentBeads": 2}),
            (self.client.set_status("available"), "mesh.setStatus", {"status": "available"}),
            (self.client.submit("12D3KooWB", "approval", {"x": 1}, deadline="24h"), "mesh.submit",
             {"agentId": "12D3KooWB", "capability": "approval", "params": {"x": 1}, "deadline": "24h"}),
            (self.client.wait("01t", timeout_ms=500), "mesh.taskWait", {"taskId": "01t", "timeoutMs": 500}),
            (self.client.resolve("01t", True, "ok"), "mesh.taskResolve", {"taskId": "01t", "approve": True, "reason": "ok"}),
            (self.client.resolve("01t", False), "mesh.taskResolve", {"taskId": "01t", "approve": False}),
        ]
        for coro, method, params in cases:
            fut = self.go(coro)
            req = await self.node.next(method)
            self.assertEqual(req["params"], params, method)
            await self.node.reply(req, {"ok": method})
            self.assertEqual(await fut, {"ok": method})

    async def test_audit_returns_entries(self):
        fut = self.go(self.client.audit(agent="12D3KooWA", limit=5))
        req = await self.node.next("mesh.audit")
        self.assertEqual(req["params"], {"agent": "12D3KooWA", "limit": 5})
        await self.node.reply(req, {"entries": [{"id": "e1"}]})
        self.assertEqual(await fut, [{"id": "e1"}])

    async def test_tasks(self):
        fut = self.go(self.client.tasks("ESCALATED"))
        req = await self.node.next("mesh.tasks")
        self.assertEqual(req["params"], {"state": "ESCALATED"})
        await self.node.reply(req, {"tasks": [{"taskId": "01t"}]})
        self.assertEqual(await fut, [{"taskId": "01t"}])

    async def test_context_methods(self):
        for call, method, params in (
                (self.client.context_get("bd-1"), "mesh.contextGet", {"beadId": "bd-1"}),
                (self.client.context_set("bd-1", {"a": 1}), "mesh.contextSet", {"beadId": "bd-1", "context": {"a": 1}}),
                (self.client.context_patch("bd-1", {"a": None}), "mesh.contextPatch", {"beadId": "bd-1", "patch": {"a": None}}),
                (self.client.context_set("bd-1", {}, members=["ag-2"]), "mesh.contextSet",
                 {"beadId": "bd-1", "context": {}, "members": ["ag-2"]})):
            fut = self.go(call)
            req = await self.node.next(method)
            self.assertEqual(req["params"], params)
            await self.node.reply(req, {"bead_id": "bd-1", "shared_context": {}})
            self.assertEqual((await fut)["bead_id"], "bd-1")

    async def test_discover_streams_agents(self):
        found = []
        fut = self.go(self.client.discover("echo", timeout_ms=200, on_found=found.append))
        req = await self.node.next("mesh.discover")
        self.assertEqual(req["params"], {"capability": "echo", "timeoutMs": 200})
        await self.node.notify("mesh.discovered", {"requestId": req["id"], "agent": {"agentId": "A"}})
        await self.node.reply(req, {"services_found": [{"agent_id": "A"}], "discovered_for_capability": "echo"})
        self.assertEqual((await fut)["services_found"][0]["agent_id"], "A")
        self.assertEqual(found, [{"agentId": "A"}])

    async def test_subscribe_delivers_in_order(self):
        got, done = [], asyncio.Event()

        async def handler(m):
            got.append(m["payload"]["n"])
            if len(got) == 4:
                done.set()
        sub = self.go(self.client.subscribe("news:*", handler))
        req = await self.node.next("mesh.subscribe")
        self.assertEqual(req["params"], {"pattern": "news:*"})
        # A message may come before the answer naming its subscription.
        await self.node.notify("mesh.message", {"subscription": "s7", "message": {"topic": "news:a", "payload": {"n": 0}}})
        await self.node.reply(req, {"subscription": "s7"})
        self.assertEqual(await sub, "s7")
        for n in (1, 2, 3):
            await self.node.notify("mesh.message", {"subscription": "s7", "message": {"topic": "news:a", "payload": {"n": n}}})
        await self.node.notify("mesh.message", {"subscription": "s8", "message": {"payload": {"n": 99}}})
        await asyncio.wait_for(done.wait(), 5)
        self.assertEqual(got, [0, 1, 2, 3])
        uns = self.go(self.client.unsubscribe("s7"))
        req = await self.node.next("mesh.unsubscribe")
        self.assertEqual(req["params"], {"subscription": "s7"})
        await self.node.reply(req, True)
        await uns
        forget = self.go(self.client.forget_durable("reader"))
        req = await self.node.next("mesh.forgetDurable")
        self.assertEqual(req["params"], {"durable": "reader"})
        await self.node.reply(req, {"durable": "reader", "forgotten": True})
        self.assertTrue(await forget)

    async def test_durable_messages_are_answered(self):
        got, release = [], asyncio.Event()

        async def handler(m):
            n = m["payload"]["n"]
            if n == 1:
                await release.wait()
            if n == 2:
                raise mc.MeshError("INTERNAL_ERROR", "cannot take 2 now")
            if n == 3:
                raise ValueError("broken")
            got.append(n)
        sub = self.go(self.client.subscribe("news:*", handler, durable="reader"))
        req = await self.node.next("mesh.subscribe")
        self.assertEqual(req["params"], {"pattern": "news:*", "durable": "reader"})
        # The first message may come before the answer naming its
        # subscription: it is answered once the handler took it.
        rid = await self.node.request("mesh.message", {"subscription": "s7", "message": {"id": "m0", "payload": {"n": 0}}})
        await self.node.reply(req, {"subscription": "s7"})
        self.assertEqual(await sub, "s7")
        self.assertEqual((await self.node.answer(rid))["result"], {})
        self.assertEqual(got, [0])
        # An async handler is awaited before the answer.
        rid = await self.node.request("mesh.message", {"subscription": "s7", "message": {"id": "m1", "payload": {"n": 1}}})
        with self.assertRaises(asyncio.TimeoutError):
            await self.node.answer(rid, timeout=0.2)
        release.set()
        self.assertEqual((await self.node.answer(rid))["result"], {})
        self.assertEqual(got, [0, 1])
        # A handler that raises answers an error: not processed.
        rid = await self.node.request("mesh.message", {"subscription": "s7", "message": {"id": "m2", "payload": {"n": 2}}})
        self.assertEqual((await self.node.answer(rid))["error"]["data"]["code"], "INTERNAL_ERROR")
        rid = await self.node.request("mesh.message", {"subscription": "s7", "message": {"id": "m3", "payload": {"n": 3}}})
        self.assertIn("broken", (await self.node.answer(rid))["error"]["message"])
        rid = await self.node.request("mesh.message", {"subscription": "s8", "message": {"id": "m4", "payload": {"n": 4}}})
        self.assertEqual((await self.node.answer(rid))["error"]["code"], -32602)
        self.assertEqual(got, [0, 1])
        # The node lists the name subscribed under.
        listed = {"durables": [{"name": "reader", "bytes": 97, "active": True}], "limit": 256}
        ds = self.go(self.client.durables())
        req = await self.node.next("mesh.durables")
        self.assertEqual(req["params"], {})
        await self.node.reply(req, listed)
        self.assertEqual([d["name"] for d in (await ds)["durables"]], ["reader"])

    async def test_bus_subscribe_and_process_message(self):
        def handler(topic, payload):
            return {"processed": True, "message": f"got {topic} {payload['n']}"}
        sub = self.go(self.client.bus_subscribe("inbound:*", handler, policy="continueAll", group="workers"))
        req = await self.node.next("subscribe")
        self.assertEqual(req["params"], {"topic": "inbound:*", "policy": "continueAll", "group": "workers"})
        await self.node.reply(req, {"success": True})
        await sub
        rid = await self.node.request("processMessage", {"topic": "inbound:7", "payload": {"n": 7}})
        ans = await self.node.answer(rid)
        self.assertEqual(ans["result"], {"processed": True, "message": "got inbound:7 7"})
        rid = await self.node.request("processMessage", {"topic": "elsewhere", "payload": {}})
        self.assertIn("error", await self.node.answer(rid))

    async def test_bus_handler_return_values(self):
        answers = iter([None, False])
        sub = self.go(self.client.bus_subscribe("t", lambda t, p: next(answers)))
        await self.node.reply(await self.node.next("subscribe"), {"success": True})
        await sub
        for want in ({"processed": True}, {"processed": False}):
            rid = await self.node.request("processMessage", {"topic": "t", "payload": {}})
            self.assertEqual((await self.node.answer(rid))["result"], want)

    async def test_unknown_request_is_method_not_found(self):
        rid = await self.node.request("mesh.nothing", {})
        self.assertEqual((await self.node.answer(rid))["error"]["code"], -32601)

    async def test_close_fails_pending_calls(self):
        call = self.go(self.client.ping())
        await self.node.next("ping")
        await self.node.ws.close()
        with self.assertRaises(mc.ConnectionClosed):
            await call
        await asyncio.wait_for(self.client.wait_closed(), 5)
        self.assertTrue(self.client.closed)


class MatchTopicTest(unittest.TestCase):
    def test_table(self):
        for pattern, topic, want in [
            ("outbound:*", "outbound:42", True), ("outbound:*", "inbound:42", False),
            ("a/*", "a/b/c", False), ("a?", "ab", True), ("a?", "a/", False),
            ("x[0-9]", "x5", True), ("x[^0-9]", "x5", False), ("x[^0-9]", "xa", True),
            ("inbound:chat-", "inbound:chat-1", True), ("inbound:chat", "inbound:chat-1", False),
            ("exact", "exact", True), ("a.b", "a.b", True), ("a.b", "axb", False), ("[", "[", False),
        ]:
            self.assertEqual(mc.match_topic(pattern, topic), want, (pattern, topic))


if __name__ == "__main__":
    unittest.main()
