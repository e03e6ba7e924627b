// Command librarian runs seed 003's librarian as a mesh agent and three
// requester agents on loopback, printing each step (see README.md): task
// states, a rejection and its resubmission, an escalation a human decides,
// a QUERY, and the node policy (policy.json) refusing requests. main.go
// is the requesters' side; librarian.go is the librarian agent.
package main

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// policyJSON is seed 003's agent registry limits as a node policy.
//
//go:embed policy.json
var policyJSON []byte

const (
	claude   = "claude-3"
	copilot  = "copilot-2"
	stranger = "unregistered-bot"
)

// registry is the rest of seed 003's agent registry: allowed_targets.
var registry = map[string][]string{claude: {"architecture", "design", "code"}, copilot: {"code"}}

// agentKey returns the fixed, public example key of a named agent, so that
// policy.json can name its agent id.
func agentKey(name string) (crypto.PrivKey, error) {
	seed := sha256.Sum256([]byte("meshagent example librarian: " + name))
	return sign.KeyFromSeed(seed[:])
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "librarian:", err)
		os.Exit(1)
	}
}

func newNode(name string, k crypto.PrivKey, opts ...node.Option) (*node.Node, error) {
	return node.New(append([]node.Option{node.WithIdentity(k), node.WithName(name),
		node.WithListenAddrs(ma.StringCast("/ip4/127.0.0.1/tcp/0")), node.WithMDNS(false), node.WithDHT(false),
		node.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
}

func run(ctx context.Context, out io.Writer) error {
	policy, err := node.ParsePolicy(policyJSON)
	if err != nil {
		return fmt.Errorf("policy.json: %w", err)
	}
	lib := &Librarian{names: map[peer.ID]string{}, targets: registry, catalogue: []entry{
		{"arch-001", "docs/architecture.md", "Main architecture"},
		{"req-045", "docs/requirements/authentication.md", "Authentication requirements"},
	}}
	keys := map[string]crypto.PrivKey{}
	for _, name := range []string{claude, copilot, stranger} {
		if keys[name], err = agentKey(name); err != nil {
			return err
		}
		if id, _ := peer.IDFromPrivateKey(keys[name]); registry[name] != nil {
			lib.names[id] = name
		}
	}
	libKey, err := sign.GenerateKey()
	if err != nil {
		return err
	}
	libNode, err := newNode("librarian", libKey, node.WithServices(lib.Services()...), node.WithPolicy(policy))
	if err != nil {
		return err
	}
	defer libNode.Close()
	fmt.Fprintf(out, "librarian %s offers %s, %s\n", libNode.AgentID(), CapApproval, CapQuery)

	// The librarian's operator, told of each escalation by its node's task
	// events, approves it (a person would run meshagent task resolve).
	var reviews sync.WaitGroup
	stop, err := libNode.SubscribeTaskEvents(func(c protocol.TaskChange) {
		if c.Event == protocol.EventRequestEscalated { // fn must not block: decide on a goroutine
			reviews.Go(func() { _, _ = libNode.TaskResolve(ctx, c.TaskID, true, "bearer tokens limited to the web console") })
		}
	})
	if err != nil {
		return err
	}
	defer func() { stop(); reviews.Wait() }()

	agents := map[string]*node.Node{}
	var idToName []string
	for name, k := range keys {
		n, err := newNode(name, k, node.WithBootstrap(libNode.Addrs()...))
		if err != nil {
			return err
		}
		defer n.Close()
		if _, err := n.WaitHello(ctx, libNode.ID()); err != nil {
			return fmt.Errorf("%s: no hello from the librarian: %w", name, err)
		}
		agents[name] = n
		idToName = append(idToName, n.AgentID(), name)
	}

	// call sends r as name, id its task id, and prints what comes back.
	call := func(name, capability, id string, r Request) {
		params, _ := json.Marshal(r)
		res, err := agents[name].Call(ctx, protocol.CallRequest{To: libNode.AgentID(), Action: capability, Params: params,
			CorrelationID: id, Timeout: 20 * time.Second, Progress: func(p *protocol.Response) {
				var pr struct{ State, Note string }
				_ = json.Unmarshal(p.Result, &pr)
				fmt.Fprintf(out, "  progress: %s %s\n", pr.State, pr.Note)
			}})
		var resp Response
		var pe *protocol.Error
		if err == nil {
			err = json.Unmarshal(res.Result, &resp)
		} else if errors.As(err, &pe) && len(pe.Details) > 0 {
			_ = json.Unmarshal(pe.Details, &resp) // a rejection's Response
		}
		if err != nil {
			fmt.Fprintf(out, "  %s\n", strings.NewReplacer(idToName...).Replace(err.Error()))
		} else {
			fmt.Fprintf(out, "  %s: %s\n", strings.TrimSpace(resp.Status+" "+resp.AssignedID), resp.Feedback)
		}
		for _, s := range append(resp.Violations, resp.RelevantNodes...) {
			fmt.Fprintf(out, "  - %s\n", s)
		}
	}
	// status prints a request's task as its requester reads it.
	status := func(name, id string) {
		t, err := agents[name].TaskStatus(ctx, id, "")
		if err != nil {
			fmt.Fprintf(out, "  task status: %v\n", err)
			return
		}
		h := make([]string, len(t.History))
		for i, e := range t.History {
			h[i] = string(e.State)
		}
		fmt.Fprintf(out, "  task status: %s (history %s)\n", t.State, strings.Join(h, " > "))
	}

	fmt.Fprintln(out, "1. claude-3 asks APPROVAL for docs/design/new-feature.md")
	call(claude, CapApproval, "req-1", Request{AgentID: claude, TargetType: "design", TargetPath: "docs/design/new-feature.md",
		Content: "# New Feature Design\nSessions refresh their tokens.", Rationale: "US-123", References: []string{"arch-001"}})
	status(claude, "req-1")

	fmt.Fprintln(out, "2. claude-3 asks APPROVAL for docs/guides/token-refresh.md, then fixes it")
	guide := Request{AgentID: claude, TargetType: "docs", TargetPath: "docs/guides/token-refresh.md",
		Content: "Token refresh guide", References: []string{"req-045", "req-999"}}
	call(claude, CapApproval, "req-2", guide)
	status(claude, "req-2")
	guide.TargetType, guide.TargetPath, guide.Rationale = "design", "docs/design/token-refresh.md", "US-124"
	guide.Content, guide.References = "# Token Refresh Design\nRefresh tokens before they expire.", []string{"req-045"}
	call(claude, CapApproval, "req-3", guide)

	fmt.Fprintln(out, "3. claude-3 asks APPROVAL for docs/architecture/web-console.md with a deviation")
	call(claude, CapApproval, "req-4", Request{AgentID: claude, TargetType: "architecture", TargetPath: "docs/architecture/web-console.md",
		Content: "# Web console\nThe web console may use bearer tokens.", Rationale: "web console",
		Deviations: []string{"ed25519-only-auth: browsers cannot hold agent keys"}})
	status(claude, "req-4")

	fmt.Fprintln(out, "4. copilot-2 sends QUERY: authentication and token refresh?")
	call(copilot, CapQuery, "", Request{AgentID: copilot, Content: "authentication and token refresh?"})

	fmt.Fprintln(out, "5. copilot-2 (a code-completer) asks APPROVAL, then QUERY with 12KB")
	call(copilot, CapApproval, "", Request{AgentID: copilot, TargetType: "code", Content: "package auth"})
	call(copilot, CapQuery, "", Request{AgentID: copilot, Content: strings.Repeat("x", 12<<10)})

	fmt.Fprintln(out, "6. unregistered-bot sends QUERY four times in a row")
	for range 4 {
		call(stranger, CapQuery, "", Request{AgentID: stranger, Content: "architecture"})
	}
	return nil
}
