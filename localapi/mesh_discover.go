package localapi

import (
	"context"
	"slices"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// discover serves mesh.discover (rpc.MethodMeshDiscover): params read by
// rpc.ParseDiscoverParams; each agent the filter admits is sent to the
// caller as a mesh.discovered notification as soon as it is confirmed,
// and the result lists them all in seed 000's SERVICES_AVAILABLE shape
// (rpc.ServicesAvailable). The search ends when the node's directory has
// no more to say or the query's timeout passes.
func (m methods) discover(ctx context.Context, r *rpc.Request) (any, error) {
	q, err := rpc.ParseDiscoverParams(r.Params)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, q.Timeout)
	defer cancel()
	found, err := m.n.Discover(ctx, q.Query, q.ByKeyword)
	if err != nil {
		return nil, protocol.AsError(err)
	}
	out := rpc.ServicesAvailable{ServicesFound: []rpc.ServiceFound{}, DiscoveredForCapability: q.Query}
	for pi := range found {
		if q.Filter != nil && !admits(q.Filter, pi, m.n.Peers()) {
			continue
		}
		if !r.IsNotification() {
			_ = r.Conn.Notify(rpc.MethodMeshDiscovered, rpc.DiscoveredParams{RequestID: r.ID, Agent: pi})
		}
		out.ServicesFound = append(out.ServicesFound, rpc.ServiceFound{AgentID: pi.AgentID, RelevantCapabilities: orEmpty(pi.Capabilities)})
	}
	return out, nil
}

// admits applies a mesh.discover filter to an agent found: with what the
// search says of it and what this node knows of it (its hello's
// capabilities, its last heartbeat's persona type), since a search lists
// only the capabilities that match the query.
func admits(f *protocol.Filter, found protocol.PeerInfo, known []protocol.PeerInfo) bool {
	persona := found.PersonaType
	var caps []string
	for _, c := range found.Capabilities {
		caps = append(caps, c.Name)
	}
	if i := slices.IndexFunc(known, func(p protocol.PeerInfo) bool { return p.AgentID == found.AgentID }); i >= 0 {
		if persona == "" {
			persona = known[i].PersonaType
		}
		for _, c := range known[i].Capabilities {
			caps = append(caps, c.Name)
		}
	}
	return f.Admits(found.AgentID, persona, caps)
}
