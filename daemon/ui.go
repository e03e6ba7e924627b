package daemon

import (
	"log/slog"
	"net/http"

	"github.com/meshagent/meshagent/localapi"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/ui"
)

// statusPage mounts the status page (/ui), seed 004's discovery REST
// (/api/v1/agents), the audit log (/api/v1/messages), seed 002's bindings
// (/agentprotocol, /agentprotocol/ws) and seed 003's REST (/agent/*,
// /docs; nil: one without tokens, which answers 404) for n on the local
// API beside ops (/metrics,
// /healthz, /readyz; may be nil), and admits the page as a
// browser client of the API. The page is served by the local API only,
// never by a relay's public listener or the --metrics listener: it needs
// the operator's methods (mesh.status, …), which only the loopback API
// serves.
func statusPage(ops http.Handler, n *node.Node, log *slog.Logger, seed003 *localapi.Seed003) []rpc.Option {
	page := ui.Handler()
	if seed003 == nil {
		seed003 = localapi.NewSeed003(n)
	}
	agents := localapi.AgentsHandler(n)
	envelopes := localapi.NewAgentProtocol(n, log.With("component", "agentprotocol"))
	messages := localapi.MessagesHandler(n)
	beadContexts := localapi.BeadContextHandler(n)
	return []rpc.Option{
		rpc.WithHTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case ui.Owns(r.URL.Path):
				page.ServeHTTP(w, r)
			case localapi.Owns(r.URL.Path):
				agents.ServeHTTP(w, r)
			case localapi.OwnsAgentProtocol(r.URL.Path):
				envelopes.ServeHTTP(w, r)
			case localapi.OwnsMessages(r.URL.Path):
				messages.ServeHTTP(w, r)
			case localapi.OwnsSeed003(r.URL.Path):
				seed003.ServeHTTP(w, r)
			case localapi.OwnsBeadContext(r.URL.Path):
				beadContexts.ServeHTTP(w, r)
			case ops != nil:
				ops.ServeHTTP(w, r)
			default:
				http.NotFound(w, r)
			}
		})),
		rpc.WithLoopbackPages(),
	}
}

// *node.Node answers the status page's methods (localapi.Node's, checked
// in api.go), and seed 004's discovery REST what it knows of the mesh.
var (
	_ localapi.Directory = (*node.Node)(nil)
	_ localapi.Envelopes = (*node.Node)(nil)
	_ localapi.AuditLog  = (*node.Node)(nil)
	_ localapi.Librarian = (*node.Node)(nil)
	// and seed 004's shared bead contexts, on the local API and its REST.
	_ localapi.BeadContexts = (*node.Node)(nil)
)
