package node

import (
	"fmt"
	"strings"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// requester is who a request comes from: the agent that signed it and,
// when that agent vouches for one of its clients (a relay calling for a
// lobby or bus client, protocol.MetaOnBehalfOf), the client's name.
type requester struct {
	agent  peer.ID
	client string // "" when the agent asks for itself
}

// String is the requester as ACL and policy entries name it: the agent
// id, or "<agent id>/<client>".
func (r requester) String() string { return r.stringWith(r.agent.String()) }

// stringWith is String given the agent id's string, which a stream
// already holds, so that no request pays to encode it again.
func (r requester) stringWith(agent string) string {
	if r.client == "" {
		return agent
	}
	return agent + "/" + r.client
}

// requesterEntry is one parsed entry of authorized_requester_ids or of a
// policy's agents and groups:
//
//	"12D3KooW…"              the agent itself, asking for itself
//	"12D3KooW…/lobby:alice"  that agent's client lobby:alice, vouched by it
//	"12D3KooW…/lobby:*"      any client of that agent whose name starts with "lobby:"
//	"12D3KooW…/*"            any client that agent vouches for
//
// The agent id may be in either form (peer ID or base64 key). A bare agent
// id does not admit the agent's clients: a relay's lobby and bus clients
// are not the relay.
type requesterEntry struct {
	agent  peer.ID
	client string // "" for a bare agent id; else the name, or the prefix when wild
	wild   bool   // client is a prefix ("*" ended the entry)
}

// parseRequesterEntry parses an entry of authorized_requester_ids or of a
// policy. A base64 agent id may itself contain '/': the agent id is the
// shortest prefix before a '/' that parses as one.
func parseRequesterEntry(s string) (requesterEntry, error) {
	if id, err := sign.ParseAgentID(s); err == nil {
		return requesterEntry{agent: id}, nil
	}
	for i := strings.IndexByte(s, '/'); i >= 0; {
		if id, err := sign.ParseAgentID(s[:i]); err == nil {
			e := requesterEntry{agent: id, client: s[i+1:]}
			if base, ok := strings.CutSuffix(e.client, "*"); ok {
				e.client, e.wild = base, true
			}
			if e.client == "" && !e.wild {
				return requesterEntry{}, fmt.Errorf("%q names no client after the agent id (write <agent id>/<client>, or <agent id>/* for all its clients)", truncateID(s))
			}
			if e.client != "" {
				if err := protocol.CheckOnBehalfOf(e.client); err != nil {
					return requesterEntry{}, fmt.Errorf("%q: client: %s ('*' may only end an entry)", truncateID(s), protocol.AsError(err).Message)
				}
			}
			return e, nil
		}
		j := strings.IndexByte(s[i+1:], '/')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	_, err := sign.ParseAgentID(s)
	return requesterEntry{}, fmt.Errorf("%w (or <agent id>/<client> for a client the agent vouches for)", err)
}

// matches reports whether the entry names the requester.
func (e requesterEntry) matches(r requester) bool {
	switch {
	case e.agent != r.agent:
		return false
	case e.wild:
		return r.client != "" && strings.HasPrefix(r.client, e.client)
	default:
		return e.client == r.client
	}
}

func truncateID(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// acl is a capability's authorized_requester_ids, parsed. Empty admits
// everyone.
type acl struct {
	agents  map[peer.ID]bool             // bare agent ids
	clients map[peer.ID][]requesterEntry // entries naming clients, by agent
}

func compileACL(ids []string) (*acl, error) {
	a := &acl{agents: make(map[peer.ID]bool, len(ids))}
	for _, s := range ids {
		e, err := parseRequesterEntry(s)
		if err != nil {
			return nil, err
		}
		if e.client == "" && !e.wild {
			a.agents[e.agent] = true
			continue
		}
		if a.clients == nil {
			a.clients = make(map[peer.ID][]requesterEntry)
		}
		a.clients[e.agent] = append(a.clients[e.agent], e)
	}
	return a, nil
}

// public reports whether the ACL admits everyone.
func (a *acl) public() bool { return a == nil || len(a.agents)+len(a.clients) == 0 }

// admits reports whether the ACL lets r call.
func (a *acl) admits(r requester) bool {
	if a.public() {
		return true
	}
	if r.client == "" {
		return a.agents[r.agent]
	}
	for _, e := range a.clients[r.agent] {
		if e.matches(r) {
			return true
		}
	}
	return false
}

// requesterOf reads who a verified request envelope from agent comes
// from (the client it vouches for, if any) and applies the policy rule
// naming that client, whose size limit is checked against size.
func (n *Node) requesterOf(e *protocol.Envelope, agent peer.ID, size int) (requester, error) {
	client, err := protocol.OnBehalfOf(e)
	if err != nil {
		return requester{agent: agent}, err
	}
	r := requester{agent: agent, client: client}
	if err := n.policy.Load().admitClient(r, size); err != nil {
		return r, err
	}
	return r, nil
}
