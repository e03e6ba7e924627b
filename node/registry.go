package node

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

// registry is the services a node offers, under its own lock. The
// built-ins are fixed at construction, answered before any registered
// service of the same name, and never announced. The registered services
// come in groups by source (the node's own set, a lobby bridge, the local
// API's clients), each replaced as a whole by Offer, so that one source
// never clobbers another's.
type registry struct {
	builtins map[string]*service

	mu sync.RWMutex
	// sources holds each source's services by name; ownSource is the
	// node's own set (SetServices).
	sources  map[string]map[string]*service
	services map[string]*service // what is offered: the union of sources
	names    []string            // sorted names of services, for envelopes' from.capabilities
	// seq is Hello.Seq: when the services last changed.
	seq int64
}

// ownSource names the node's own services, SetServices's group. It is
// not a valid source for Offer.
const ownSource = ""

func newRegistry(builtins ...*service) *registry {
	r := &registry{builtins: make(map[string]*service, len(builtins)), sources: map[string]map[string]*service{}, services: map[string]*service{}}
	for _, b := range builtins {
		r.builtins[b.Capability.Name] = b
	}
	return r
}

// set compiles ss and makes them the node's own services.
func (r *registry) set(ss []Service) error {
	_, err := r.offer(ownSource, ss)
	return err
}

// offer compiles ss and makes them source's services. A name another
// source offers is refused (ErrCapabilityTaken), except for the node's
// own set, which always applies and shadows the other sources' services
// of the same names; those names are returned.
func (r *registry) offer(source string, ss []Service) (shadowed []string, err error) {
	m := make(map[string]*service, len(ss))
	for _, s := range ss {
		cs, err := compileService(s)
		if err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
		m[s.Capability.Name] = cs
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for name := range m {
		for src, other := range r.sources {
			if src == source || other[name] == nil {
				continue
			}
			if source != ownSource {
				return nil, fmt.Errorf("%w: %q is already offered by %s", ErrCapabilityTaken, name, sourceName(src))
			}
			shadowed = append(shadowed, name)
		}
	}
	if len(m) == 0 {
		delete(r.sources, source)
	} else {
		r.sources[source] = m
	}
	// The node's own services win; the other sources never share a name.
	all := maps.Clone(r.sources[ownSource])
	if all == nil {
		all = map[string]*service{}
	}
	for src, group := range r.sources {
		if src == ownSource {
			continue
		}
		for name, s := range group {
			if all[name] == nil {
				all[name] = s
			}
		}
	}
	r.services = all
	r.names = slices.Sorted(maps.Keys(all))
	// Strictly increasing even if the clock stands still or steps back.
	r.seq = max(time.Now().UnixNano(), r.seq+1)
	slices.Sort(shadowed)
	return shadowed, nil
}

func sourceName(src string) string {
	if src == ownSource {
		return "the node itself"
	}
	return fmt.Sprintf("source %q", src)
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
// repeat while the first is answered waits for that answer; the refusal
// itself is not kept (taskTable.finish), so that a repeat once a handler
// is attached runs.
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

// SetServices replaces the node's own capabilities (those of its
// capabilities file) and announces the change to every connected agent
// with a fresh hello. The node's own capabilities take precedence over
// every other source's (see Offer): a name both offer is answered by the
// node's own service.
func (n *Node) SetServices(ss []Service) error {
	if err := validateServices(ss); err != nil {
		return err
	}
	shadowed, err := n.services.offer(ownSource, ss)
	if err != nil {
		return err
	}
	if len(shadowed) > 0 {
		n.log.Warn("the node's own capabilities shadow those other sources offer under the same names", "capabilities", shadowed)
	}
	n.announceServices()
	return nil
}

// Offer replaces the services of one source (a lobby bridge, the local
// API's clients, …) with ss, leaving every other source's alone, and
// announces the change as SetServices does. An empty ss withdraws the
// source's services. A name that another source offers is refused with
// an error wrapping ErrCapabilityTaken, and nothing changes. source must
// not be empty.
func (n *Node) Offer(source string, ss []Service) error {
	if source == ownSource {
		return fmt.Errorf("node: Offer needs a source name (SetServices replaces the node's own services)")
	}
	if err := validateServices(ss); err != nil {
		return err
	}
	if _, err := n.services.offer(source, ss); err != nil {
		return err
	}
	n.announceServices()
	return nil
}

// announceServices tells the directory, the topics' presence and every
// peer that speaks hello that the services changed.
func (n *Node) announceServices() {
	n.log.Info("capabilities changed", "capabilities", n.capabilityNames())
	if n.mailboxes != nil {
		// What a mailbox kept for want of a handler can come now.
		n.mailboxes.wake()
	}
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
}
