package node

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

// registry is the services a node offers, under its own lock. The
// built-ins are fixed at construction, answered before any registered
// service of the same name, and never announced; the registered services
// are replaced as a whole by SetServices.
type registry struct {
	builtins map[string]*service

	mu       sync.RWMutex
	services map[string]*service
	names    []string // sorted names of services, for envelopes' from.capabilities
	// seq is Hello.Seq: when the services last changed.
	seq int64
}

func newRegistry(builtins ...*service) *registry {
	r := &registry{builtins: make(map[string]*service, len(builtins)), services: map[string]*service{}}
	for _, b := range builtins {
		r.builtins[b.Capability.Name] = b
	}
	return r
}

// set compiles ss and makes them the registered services.
func (r *registry) set(ss []Service) error {
	m := make(map[string]*service, len(ss))
	for _, s := range ss {
		cs, err := compileService(s)
		if err != nil {
			return fmt.Errorf("node: %w", err)
		}
		m[s.Capability.Name] = cs
	}
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	r.mu.Lock()
	r.services = m
	r.names = names
	// Strictly increasing even if the clock stands still or steps back.
	r.seq = max(time.Now().UnixNano(), r.seq+1)
	r.mu.Unlock()
	return nil
}

// lookup returns the service that answers action, or nil.
func (r *registry) lookup(action string) *service {
	if b := r.builtins[action]; b != nil {
		return b
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.services[action]
}

// runsAsTask reports whether a request for action is kept in the task
// table: every action but the built-ins', including unknown ones, whose
// refusal a retry then gets from the table.
func (r *registry) runsAsTask(action string) bool {
	if b := r.builtins[action]; b != nil {
		return b.task
	}
	return true
}

// serves reports whether action is a built-in or a registered service.
func (r *registry) serves(action string) bool { return r.lookup(action) != nil }

// capabilities returns the registered capabilities, sorted by name.
func (r *registry) capabilities() []protocol.Capability {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]protocol.Capability, 0, len(r.services))
	for _, name := range r.names {
		out = append(out, r.services[name].Capability)
	}
	return out
}

// capabilityNames returns the sorted names of the registered services. The
// slice is shared: callers must not modify it.
func (r *registry) capabilityNames() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.names
}

// version returns Hello.Seq.
func (r *registry) version() int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.seq
}

// Capabilities returns the capability objects this node offers, sorted by
// name.
func (n *Node) Capabilities() []protocol.Capability { return n.services.capabilities() }

func (n *Node) capabilityNames() []string { return slices.Clone(n.services.capabilityNames()) }

// SetServices replaces the capabilities this node offers and announces the
// change to every connected agent with a fresh hello.
func (n *Node) SetServices(ss []Service) error {
	if err := validateServices(ss); err != nil {
		return err
	}
	if err := n.services.set(ss); err != nil {
		return err
	}
	n.log.Info("capabilities changed", "capabilities", n.capabilityNames())
	if n.dir != nil {
		n.dir.Advertise(n.Capabilities())
	}
	if n.topics != nil {
		n.topics.SetSelf(n.topicSelf())
		n.kickPresence()
	}
	for _, p := range n.host.Network().Peers() {
		// A peer speaks hello if identify says so or if it has sent us one
		// (our own identify of it may not have finished yet).
		_, known := n.peers.get(p)
		if ok, _ := n.host.Peerstore().SupportsProtocols(p, protocol.HelloProtocol); len(ok) == 0 && !known {
			continue
		}
		n.goTracked(func() { n.sayHello(p) })
	}
	return nil
}
