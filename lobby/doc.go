// Package lobby is seed 000's Agent Lobby over WebSocket: agents that
// speak the seed's message shapes (Message), one JSON message per
// WebSocket text message, register, discover each other and the mesh's
// agents, and call each other and the mesh through it. A Lobby is an
// http.Handler, served at whatever path it is mounted (the relay command
// mounts it at "/lobby", next to the bus at "/"). It reaches the mesh
// only through the Mesh interface it declares, so it never imports the
// node; *node.Node satisfies Mesh and Discoverer.
//
// # Registration and tokens
//
// REGISTER (no token) stores the sender_id as an agent with its
// capabilities (protocol.Capability objects, each validated) and answers
// REGISTER_ACK with a fresh auth_token: 256 random bits from crypto/rand,
// base64url. The store keeps only the token's SHA-256, so registrations and
// tokens survive a restart of the relay. A sender_id already registered is
// refused with ERROR unless the REGISTER carries that agent's current
// auth_token; then it re-registers: the capabilities are replaced and a new
// token is issued (the old one stops working). Ids that parse as mesh
// agent ids (sign.ParseAgentID) and the lobby's own id are refused, so a
// lobby client can never pass for a mesh agent in an
// authorized_requester_ids check. A client that loses its token cannot
// reclaim its agent_id.
//
// A new agent_id must be printable ASCII ('!' to '~') without '/' or '*',
// and must not look like a registered one: ids equal once lower-cased and
// with "0" read as "o", "1", "i" and "|" as "l", "rn" as "m" and "vv" as
// "w" are refused. So "rogue_ОО7" (Cyrillic О), "ｒｏｇｕｅ_007"
// (fullwidth) and "Rogue_OO7" are all refused, with ERROR code
// INVALID_MESSAGE, while "rogue_007" is registered.
//
// Every other message must carry the auth_token of its sender_id, or it
// is answered with ERROR (code UNAUTHORIZED) and goes no further.
//
// # Connections and re-attaching
//
// A connection serves at most one agent. It is bound to the agent by a
// REGISTER, or by the first message carrying a valid auth_token: a client
// that reconnects (after a network failure or a relay restart) re-attaches
// just by sending its next message with its old token; no REGISTER is
// needed. If the agent is already attached on another connection, the
// newer connection takes over and the older one stops receiving requests.
// An agent is "connected" while a connection is bound to it: only
// connected agents are discovered and served, and when its connection ends
// it leaves the directory (its registration stays in the store).
//
// # Messages
//
// What a client sends is decoded strictly (protocol.DecodeStrict, see
// ParseMessage): one JSON object, exact member names, no name given
// twice, each member of its type. Members the lobby does not read are
// tolerated, at the top level and in payloads, since seed 000 lists a
// base structure rather than a closed one; a payload's members reach the
// receiver in the order the sender wrote them.
//
// DISCOVER_SERVICES {capability_name, query_keywords} is answered by
// SERVICES_AVAILABLE listing the connected lobby agents (other than the
// sender) with their capabilities that match, sorted by agent id,
// followed by the mesh agents the directory finds within
// Config.DiscoverTimeout when the Mesh is a Discoverer, sorted by agent id
// (the relay's own node is left out: it advertises the lobby's
// capabilities itself). A capability matches when its name is
// capability_name, or when one of query_keywords (seed 000 §4.3's
// alternative; at most MaxQueryKeywords) equals one of its keywords or
// occurs in its name or description, ignoring case. In the mesh
// directory, which records exact names and keywords, each keyword is
// looked up as sent and lower-cased. At least one of the two is needed;
// SERVICES_AVAILABLE echoes them as discovered_for_capability and
// discovered_for_keywords.
//
// REQUEST {capability_name, …} to receiver_id goes:
//
//   - to a connected lobby agent: after the §5.3 check (the capability
//     exists, and the requester is in its authorized_requester_ids when
//     that list is non-empty), the REQUEST is forwarded with the sender's
//     auth_token removed. The provider's RESPONSEs with the same
//     conversation_id and receiver_id = the requester are routed back:
//     any number with status "in_progress", then one final one (any other
//     status). A RESPONSE that no REQUEST awaits is refused with ERROR. A
//     REQUEST without conversation_id gets one (a UUID) from the lobby.
//   - to a mesh agent (a peer ID or base64 key that is not a lobby agent):
//     Mesh.Call with action = capability_name and params = the payload
//     without capability_name. A result object becomes the RESPONSE
//     payload with "status" added; a result that is not an object is put
//     under "result". The relay's node signs the request and vouches for
//     the lobby agent in it (CallRequest.OnBehalfOf = ClientPrefix +
//     agent_id, signed in the envelope's metadata): the mesh agent sees
//     the relay as the signer and the lobby agent as the client it speaks
//     for, and authorizes "<relay id>/lobby:<agent_id>", not the relay.
//
// As seed 000 §5.3 and §8 say, a REQUEST that is refused or fails
// (UNAUTHORIZED, CAPABILITY_NOT_SUPPORTED, UNKNOWN_AGENT, TIMEOUT after
// Config.RequestTimeout, a mesh error) is answered with a RESPONSE with
// status "error", the same conversation_id, and payload
// {"status":"error","error":…,"code":…,"details"?} (ErrorResponse); its
// sender_id is the lobby when the lobby refused it, the receiver when the
// receiver or the mesh answered. ERROR (ErrorPayload) is for everything
// else: malformed JSON, an unknown message_type, a bad token, a REQUEST
// without capability_name or receiver_id. The connection stays open after
// any of them. An ERROR an agent sends for a pending REQUEST ends it as a
// RESPONSE with status "error"; the lobby never answers an ERROR with an
// ERROR.
//
// # The mesh side
//
// Capabilities lists what the connected lobby agents offer; OnChange
// tells when that changes; and Serve forwards a mesh request to the lobby
// agent serving a capability. When several agents offer the same name,
// the one that attached most recently serves it. Bridge ties the three
// together once for every process that offers the lobby's capabilities in
// the mesh: whenever they change it hands the current Services to an
// Offerer (the node, through a small adapter of the caller's), each
// served by Serve for the requester as the node verified it.
//
// # Files
//
// lobby.go holds the Lobby and its lifecycle; conn.go one client
// connection (the WebSocket plumbing itself, admission, send queue,
// pings and close, is the shared internal wsconn package's); dispatch.go
// the message types' dispatch; registry.go and ids.go registration,
// authentication and the agent id rules; routing.go REQUEST/RESPONSE
// routing and settling; mesh.go calls into the mesh; discover.go
// DISCOVER_SERVICES; serve.go and bridge.go the mesh side; messages.go
// and members.go the wire format; options.go the Config.
//
// # Goroutines and limits
//
// Per connection: the read loop, a writer, a pinger, and one goroutine
// per REQUEST or DISCOVER_SERVICES in flight (at most
// Limits.MaxConcurrentCalls); plus one goroutine of the Lobby that runs
// OnChange callbacks. Close stops and waits for all of them. A client
// whose send queue fills, or that misses a write deadline, is
// disconnected: the lobby never waits for a slow reader.
//
// # A Go client
//
// Client is a lobby agent written in Go: Dial, Register, then Ask to send
// a message and read its conversation's answers (RESPONSEs in progress,
// then the final one), Discover for SERVICES_AVAILABLE, or Recv and Send
// to serve REQUESTs. It reads messages of at most DefaultClientReadLimit
// bytes.
package lobby
