package relay

import (
	"encoding/json"

	"github.com/meshagent/meshagent/rpc"
)

// The names below are rpc's, under the names the bus and its tests still
// use from this package. (The lobby, which needed more of them, is package
// lobby now.)

type (
	// Limits is rpc.Limits.
	Limits = rpc.Limits
	// Mesh is rpc.Mesh.
	Mesh = rpc.Mesh
)

// DefaultLimits returns rpc.DefaultLimits().
func DefaultLimits() Limits { return rpc.DefaultLimits() }

func isNull(raw json.RawMessage) bool { return string(raw) == "null" }

// MethodMeshCall is rpc.MethodMeshCall.
const MethodMeshCall = rpc.MethodMeshCall
