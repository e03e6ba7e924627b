"""Errors raised by the client, and the table of AgentProtocol codes.

A node answers a failed mesh operation with a JSON-RPC error whose
``data.code`` is the AgentProtocol code; that is what callers branch on,
so it becomes :class:`MeshError`. Any other JSON-RPC error (bad params,
no topic peers, ...) is an :class:`RPCError`.
"""

# AgentProtocol code -> JSON-RPC error code, as the node's error table has it.
MESH_CODES = {
    "INVALID_MESSAGE": -32010,
    "INVALID_SIGNATURE": -32011,
    "UNKNOWN_AGENT": -32012,
    "CAPABILITY_NOT_SUPPORTED": -32013,
    "TIMEOUT": -32014,
    "RATE_LIMITED": -32015,
    "INTERNAL_ERROR": -32016,
    "UNAUTHORIZED": -32017,
}

# JSON-RPC codes the client itself uses when it answers the node.
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603


class ClientError(Exception):
    """Base class of every error this package raises."""


class ConnectionClosed(ClientError, ConnectionError):
    """The connection to the node is closed; pending calls fail with it."""


class RPCError(ClientError):
    """A JSON-RPC error that carries no AgentProtocol code.

    ``code`` is the JSON-RPC code (for example -32602 for invalid params,
    -32007 when a publish found no subscriber), ``data`` its data member.
    """

    def __init__(self, code, message, data=None):
        super().__init__(f"json-rpc error {code}: {message}")
        self.code, self.message, self.data = code, message, data


# JSON-RPC code of a serving client's answer that escalates its task and
# leaves the answer to the operator's decision.
ESCALATED = -32021


class Escalated(Exception):
    """Raised by a serving handler: the request is ESCALATED with this reason,
    and the operator's decision (``meshagent task resolve``) is its answer."""

    def __init__(self, reason=""):
        super().__init__(reason)
        self.reason = reason


class MeshError(ClientError):
    """An AgentProtocol error: ``code`` is its code (``"UNAUTHORIZED"``, ...).

    ``rpc_code`` is the JSON-RPC code it travels as, ``details`` the
    error's details, ``correlation_id`` the request's id when known. A
    serving handler raises one to refuse a request with that code.
    """

    def __init__(self, code, message="", details=None, *, rpc_code=None, correlation_id=None):
        super().__init__(f"{code}: {message}" if message else code)
        self.code, self.message, self.details = code, message or code, details
        self.rpc_code = rpc_code if rpc_code is not None else MESH_CODES.get(code, MESH_CODES["INTERNAL_ERROR"])
        self.correlation_id = correlation_id

    def to_rpc(self):
        """The JSON-RPC error object the node expects for this error."""
        data = {"code": self.code}
        if self.details is not None:
            data["details"] = self.details
        return {"code": self.rpc_code, "message": self.message, "data": data}


def from_rpc(err):
    """Turn a JSON-RPC error object into a MeshError or an RPCError."""
    if not isinstance(err, dict):
        return RPCError(INTERNAL_ERROR, f"malformed error {err!r}")
    code, message, data = err.get("code"), err.get("message", ""), err.get("data")
    if isinstance(data, dict) and data.get("code") in MESH_CODES:
        return MeshError(data["code"], message, data.get("details"), rpc_code=code,
                         correlation_id=data.get("correlationId"))
    return RPCError(code, message, data)
