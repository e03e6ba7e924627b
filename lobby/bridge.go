package lobby

import (
	"context"
	"encoding/json"
	"maps"
	"slices"

	"github.com/meshagent/meshagent/protocol"
)

// Capabilities returns the capabilities the connected lobby agents offer,
// one per name, sorted by name: for a name offered by several agents, the
// object of the agent that attached most recently, which is the one Serve
// calls. The result is a copy.
func (l *Lobby) Capabilities() []protocol.Capability {
	l.mu.Lock()
	best := make(map[string]*connectedAgent)
	caps := make(map[string]protocol.Capability)
	for _, a := range l.agents {
		for _, c := range a.caps {
			if b := best[c.Name]; b == nil || a.seq > b.seq {
				best[c.Name], caps[c.Name] = a, c
			}
		}
	}
	l.mu.Unlock()
	out := make([]protocol.Capability, 0, len(caps))
	for _, name := range slices.Sorted(maps.Keys(caps)) {
		out = append(out, cloneCapability(caps[name]))
	}
	return out
}

func cloneCapability(c protocol.Capability) protocol.Capability {
	c.AuthorizedRequesterIDs = slices.Clone(c.AuthorizedRequesterIDs)
	c.Keywords = slices.Clone(c.Keywords)
	c.InputSchema = slices.Clone(c.InputSchema)
	c.OutputSchema = slices.Clone(c.OutputSchema)
	return c
}

// OnChange registers f to be called whenever the result of Capabilities
// changes (an agent attaches, re-registers or detaches and the set of
// objects is different afterwards). Calls run one at a time on a goroutine
// of the Lobby, with no lock held, and are coalesced: several changes in
// quick succession may produce one call, after which Capabilities returns
// the latest set. f must return promptly; Close waits for it. Changes
// before OnChange is called are not reported.
func (l *Lobby) OnChange(f func()) {
	if f == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.onChange = append(l.onChange, f)
}

func (l *Lobby) notifyChange() {
	select {
	case l.changed <- struct{}{}:
	default: // a look is already due
	}
}

// notifier runs OnChange callbacks when the capability set has changed.
func (l *Lobby) notifier() {
	last := "[]"
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-l.changed:
		}
		b, err := json.Marshal(l.Capabilities())
		if err != nil || string(b) == last {
			continue
		}
		last = string(b)
		l.mu.Lock()
		fns := slices.Clone(l.onChange)
		l.mu.Unlock()
		for _, f := range fns {
			l.runHook(f)
		}
	}
}

func (l *Lobby) runHook(f func()) {
	defer func() {
		if p := recover(); p != nil {
			l.log.Error("OnChange callback panicked", "panic", p)
		}
	}()
	f()
}

// Service is a lobby capability as the mesh sees it: the capability
// object without authorized_requester_ids (which name lobby agents; the
// lobby applies them itself in Serve), and Serve bound to its name.
type Service struct {
	Capability protocol.Capability
	// Serve answers a mesh request for the capability (see Lobby.Serve).
	// requester names the caller as authorized_requester_ids and policies
	// do: an agent id, or "<agent id>/<client>" for a client that agent
	// vouches for, so that a lobby agent's list naming another relay
	// admits that relay and not every client it speaks for.
	Serve func(ctx context.Context, requester string, params json.RawMessage) (json.RawMessage, error)
}

// Offerer is where Bridge offers the lobby agents' capabilities in the
// mesh: a node, through a few lines of the caller's that turn each
// Service into one of the node's services (lobby never imports node).
type Offerer interface {
	// Offer replaces the lobby services offered before with ss.
	Offer(ss []Service) error
}

// OffererFunc adapts a function to Offerer.
type OffererFunc func(ss []Service) error

// Offer calls f.
func (f OffererFunc) Offer(ss []Service) error { return f(ss) }

// Services returns Capabilities as mesh services, each served by Serve.
func (l *Lobby) Services() []Service {
	caps := l.Capabilities()
	out := make([]Service, 0, len(caps))
	for _, c := range caps {
		c.AuthorizedRequesterIDs = nil
		name := c.Name
		out = append(out, Service{Capability: c, Serve: func(ctx context.Context, requester string, params json.RawMessage) (json.RawMessage, error) {
			return l.Serve(ctx, requester, name, params)
		}})
	}
	return out
}

// Bridge offers the connected lobby agents' capabilities in the mesh
// through o whenever they change (see OnChange), so that mesh agents
// discover and call them as the node's own. A failed offer is logged;
// the next change offers the whole set again.
func (l *Lobby) Bridge(o Offerer) {
	l.OnChange(func() {
		if err := o.Offer(l.Services()); err != nil {
			l.log.Error("lobby capabilities not offered in the mesh", "err", err)
		}
	})
}
