// Errors the client throws, and the table of AgentProtocol codes.
//
// A node answers a failed mesh operation with a JSON-RPC error whose
// data.code is the AgentProtocol code; that is what callers branch on, so
// it becomes a MeshError. Any other JSON-RPC error (bad params, no topic
// peers, ...) is an RPCError.

/** AgentProtocol code -> JSON-RPC error code, as the node's error table has it. */
export const MESH_CODES = Object.freeze({
  INVALID_MESSAGE: -32010,
  INVALID_SIGNATURE: -32011,
  UNKNOWN_AGENT: -32012,
  CAPABILITY_NOT_SUPPORTED: -32013,
  TIMEOUT: -32014,
  RATE_LIMITED: -32015,
  INTERNAL_ERROR: -32016,
  UNAUTHORIZED: -32017,
});

export const METHOD_NOT_FOUND = -32601;
export const INVALID_PARAMS = -32602;

/** Base class of every error this package throws. */
export class ClientError extends Error {}

/** The connection to the node is closed; pending calls reject with it. */
export class ConnectionClosedError extends ClientError {
  constructor(message = 'the connection to the node is closed') {
    super(message);
    this.name = 'ConnectionClosedError';
  }
}

/** A JSON-RPC error that carries no AgentProtocol code (code is the JSON-RPC code). */
export class RPCError extends ClientError {
  constructor(code, message, data) {
    super(`json-rpc error ${code}: ${message}`);
    this.name = 'RPCError';
    this.code = code;
    this.rpcMessage = message;
    this.data = data;
  }
}

/** The JSON-RPC code of a serving client's answer that escalates its task. */
export const ESCALATED = -32021;

/**
 * Thrown by a serving handler: the request is ESCALATED with this reason,
 * and the operator's decision (meshagent task resolve) is its answer.
 */
export class Escalated extends RPCError {
  constructor(reason = '') {
    super(ESCALATED, reason);
    this.name = 'Escalated';
    this.reason = reason;
  }
}

/**
 * An AgentProtocol error: code is its code ('UNAUTHORIZED', ...), rpcCode
 * the JSON-RPC code it travels as, details the error's details. A serving
 * handler throws one to refuse a request with that code.
 */
export class MeshError extends ClientError {
  constructor(code, message = '', details = undefined, { rpcCode, correlationId } = {}) {
    super(message ? `${code}: ${message}` : code);
    this.name = 'MeshError';
    this.code = code;
    this.rpcMessage = message || code;
    this.details = details;
    this.rpcCode = rpcCode ?? MESH_CODES[code] ?? MESH_CODES.INTERNAL_ERROR;
    this.correlationId = correlationId;
  }

  /** The JSON-RPC error object the node expects for this error. */
  toRPC() {
    const data = { code: this.code };
    if (this.details !== undefined) data.details = this.details;
    return { code: this.rpcCode, message: this.rpcMessage, data };
  }
}

/** Turns a JSON-RPC error object into a MeshError or an RPCError. */
export function fromRPC(err) {
  if (err === null || typeof err !== 'object') return new RPCError(-32603, `malformed error ${JSON.stringify(err)}`);
  const { code, message = '', data } = err;
  if (data && typeof data === 'object' && Object.hasOwn(MESH_CODES, data.code)) {
    return new MeshError(data.code, message, data.details, { rpcCode: code, correlationId: data.correlationId });
  }
  return new RPCError(code, message, data);
}
