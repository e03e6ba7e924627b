package rpc

import (
	"context"

	"github.com/meshagent/meshagent/protocol"
)

// ConnLister is implemented by a Mesh that can list its open connections
// (*node.Node is one); mesh.connections serves them.
type ConnLister interface {
	Conns() []protocol.ConnInfo
}

// CallLister is implemented by a Mesh that remembers its last calls
// (*node.Node is one); mesh.recentCalls serves them.
type CallLister interface {
	RecentCalls() []protocol.CallRecord
}

// Method names of what a node's operator watches, served with a Control
// only (like mesh.status) and when the Mesh implements the lister.
const (
	// MethodMeshConnections returns the node's open connections
	// ([]protocol.ConnInfo), each saying whether it is direct or relayed.
	MethodMeshConnections = "mesh.connections"
	// MethodMeshRecentCalls returns the last calls the node sent or
	// served ([]protocol.CallRecord), newest first, with their outcome.
	MethodMeshRecentCalls = "mesh.recentCalls"
)

// registerActivityMethods serves what the Mesh can tell of its activity.
// They are the operator's, like mesh.status: a peer list with addresses
// and the calls of other agents are not for a relay's public clients.
func (s *Server) registerActivityMethods() {
	if s.cfg.Control == nil {
		return
	}
	if cl, ok := s.mesh.(ConnLister); ok {
		s.Handle(MethodMeshConnections, func(_ context.Context, r *Request) (any, error) {
			if err := NoParams(r); err != nil {
				return nil, err
			}
			return orEmptySlice(cl.Conns()), nil
		})
	}
	if cl, ok := s.mesh.(CallLister); ok {
		s.Handle(MethodMeshRecentCalls, func(_ context.Context, r *Request) (any, error) {
			if err := NoParams(r); err != nil {
				return nil, err
			}
			return orEmptySlice(cl.RecentCalls()), nil
		})
	}
}

// orEmptySlice makes a nil slice encode as [] rather than null.
func orEmptySlice[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
