"""A client of a meshagent node's local API (JSON-RPC 2.0 over WebSocket).

    import asyncio, meshagent_client

    async def main():
        async with await meshagent_client.connect("ws://127.0.0.1:7892/") as mesh:
            print(await mesh.call("echo", {"text": "hi"}, agent_id="12D3KooW..."))

    asyncio.run(main())

See the package README for every method, and for the serving API.
"""
from .client import Client, __version__, connect
from .dispatch import match_topic
from .errors import MESH_CODES, ClientError, ConnectionClosed, Escalated, MeshError, RPCError
from .serve import Request

__all__ = ["Client", "ClientError", "ConnectionClosed", "Escalated", "MESH_CODES", "MeshError", "RPCError", "Request",
           "__version__", "connect", "match_topic"]
