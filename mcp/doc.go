// Package mcp speaks the Model Context Protocol for the mesh, both ways.
//
// Outward, Server is an MCP server (github.com/modelcontextprotocol/go-sdk)
// whose tools are the mesh's capabilities: those a node serves (its
// capabilities file, its built-ins and what clients offer with mesh.serve)
// and those of the agents it knows. It is a client of the node's local API
// (an rpc.Client satisfies API) and never imports the node. A tools/call
// runs the capability on any provider (as `meshagent call --any`).
//
// # Mapping
//
// Tool names are capability names with every character outside
// [A-Za-z0-9_.-] replaced by "_" (SanitizeName); names over 128 characters
// are cut and end in a short hash; collisions take "_2", "_3"… in sorted
// order, names already valid keeping theirs (AssignNames). The description
// is the capability's, else "mesh capability NAME". An object input schema
// ("type": "object") is passed through unchanged; none is
// {"type":"object"}; any other schema S becomes
// {"type":"object","properties":{"value":S},"required":["value"]}. Output
// schemas map the same way with "result", and a result that is not an
// object is given as {"result": v}. A schema that does not compile leaves
// its capability out of the list (MapTool), so a peer's schema never
// reaches the SDK unchecked. Arguments are checked against the schema
// before a call is sent: a violating call never reaches a provider.
//
// A result is structuredContent plus one text item with the same JSON; a
// mesh error is isError with the text "CODE: message". With a
// progressToken, each in_progress response becomes notifications/progress
// with a strictly increasing progress. notifications/cancelled cancels the
// mesh task (mesh.taskCancel).
//
// Inward, ToolHandler serves one tool of an MCP server (a command on
// stdio, or a Streamable HTTP URL) as a mesh capability; cli registers it
// as the capabilities file's "mcp" handler kind.
//
// # Bounds
//
// The tool list holds at most MaxTools tools and is refreshed every
// DefaultPollInterval; a tools/call lasts at most DefaultCallTimeout.
// Streamable HTTP sessions idle for 30 minutes are closed. See
// handler.go for the inward handler's bounds.
//
// # Goroutines
//
// Server's refresh loop is stopped by Server.Close; a Pool's servers and
// their watchers by Pool.Close.
package mcp
