package relay

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/meshagent/meshagent/internal/wsconn"
	"github.com/meshagent/meshagent/rpc"
)

// The names below are what the lobby (lobby*.go) still takes from this
// package while it lives here; they go when it moves to a package of its
// own. Everything else of the JSON-RPC server is in package rpc.

type (
	// Limits is rpc.Limits.
	Limits = rpc.Limits
	// Mesh is rpc.Mesh.
	Mesh = rpc.Mesh
	// Discoverer is rpc.Discoverer.
	Discoverer = rpc.Discoverer
	// ServiceFound is rpc.ServiceFound.
	ServiceFound = rpc.ServiceFound
	// ServicesAvailable is rpc.ServicesAvailable.
	ServicesAvailable = rpc.ServicesAvailable
)

// DefaultLimits returns rpc.DefaultLimits().
func DefaultLimits() Limits { return rpc.DefaultLimits() }

var (
	// ErrClosed is rpc.ErrClosed.
	ErrClosed = rpc.ErrClosed
	// ErrSlowConsumer is rpc.ErrSlowConsumer.
	ErrSlowConsumer = rpc.ErrSlowConsumer
)

// Config holds the lobby's origin patterns (LobbyConfig.OriginPatterns).
type Config struct {
	// OriginPatterns lists the browser origins allowed to connect.
	OriginPatterns []string
}

func (c *Config) originAllowed(r *http.Request) bool {
	return wsconn.OriginAllowed(c.OriginPatterns, r)
}

func isNull(raw json.RawMessage) bool { return string(raw) == "null" }

// trimJSONSpace trims the four whitespace characters JSON allows.
func trimJSONSpace(b []byte) []byte { return bytes.Trim(b, " \t\r\n") }

// marshal encodes v as JSON without escaping HTML.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// MethodMeshCall is rpc.MethodMeshCall.
const MethodMeshCall = rpc.MethodMeshCall
