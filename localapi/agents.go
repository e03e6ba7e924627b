package localapi

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// Directory is what the discovery REST needs of a node: itself and the
// agents it knows. *node.Node satisfies it.
type Directory interface {
	SelfInfo() protocol.PeerInfo
	Peers() []protocol.PeerInfo
}

// AgentsPath is where the discovery REST is mounted.
const AgentsPath = "/api/v1/agents"

// Agent is one agent in seed 004's registry shape.
type Agent struct {
	AgentID      string   `json:"agent_id"`
	Name         string   `json:"name,omitempty"`
	PersonaType  *string  `json:"persona_type"`
	Capabilities []string `json:"capabilities"`
	Status       string   `json:"status"`
	// CurrentBead and MaxConcurrentBeads are seed 004's; null where the
	// agent has not said.
	CurrentBead        *string   `json:"current_bead"`
	MaxConcurrentBeads *int      `json:"max_concurrent_beads"`
	Load               float64   `json:"load"`
	LastHeartbeat      time.Time `json:"last_heartbeat,omitzero"`
	Connected          bool      `json:"connected"`
}

// AgentList is the answer of GET /api/v1/agents.
type AgentList struct {
	Agents []Agent `json:"agents"`
	Count  int     `json:"count"`
}

// Owns reports whether path is served by the discovery REST.
func Owns(path string) bool {
	return path == AgentsPath || strings.HasPrefix(path, AgentsPath+"/")
}

// AgentsHandler serves seed 004's discovery REST over dir (see the package
// doc).
func AgentsHandler(dir Directory) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+AgentsPath, func(w http.ResponseWriter, r *http.Request) {
		f, err := parseAgentFilter(r)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		list := AgentList{Agents: []Agent{}}
		for _, pi := range known(dir) {
			if a := agentOf(pi); f.admits(a) {
				list.Agents = append(list.Agents, a)
			}
		}
		slices.SortFunc(list.Agents, func(a, b Agent) int { return cmp.Compare(a.AgentID, b.AgentID) })
		list.Count = len(list.Agents)
		writeJSON(w, http.StatusOK, list)
	})
	mux.HandleFunc("GET "+AgentsPath+"/{id}", func(w http.ResponseWriter, r *http.Request) {
		if len(r.URL.Query()) > 0 {
			writeError(w, http.StatusBadRequest, "an agent's details take no query parameters")
			return
		}
		id, err := sign.ParseAgentID(r.PathValue("id"))
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("%q is not an agent id (a peer id 12D3KooW… or a base64 Ed25519 public key)", r.PathValue("id")))
			return
		}
		for _, pi := range known(dir) {
			if pi.AgentID == id.String() {
				writeJSON(w, http.StatusOK, agentOf(pi))
				return
			}
		}
		writeError(w, http.StatusNotFound, fmt.Sprintf("agent %s is not known to this node", id))
	})
	return mux
}

// known is this node and the agents it knows, itself first.
func known(dir Directory) []protocol.PeerInfo {
	return append([]protocol.PeerInfo{dir.SelfInfo()}, dir.Peers()...)
}

func agentOf(pi protocol.PeerInfo) Agent {
	a := Agent{
		AgentID:       pi.AgentID,
		Name:          pi.Name,
		Capabilities:  make([]string, 0, len(pi.Capabilities)),
		Status:        string(pi.Status),
		Load:          pi.Load,
		LastHeartbeat: pi.LastHeartbeat,
		Connected:     pi.Connected,
	}
	if pi.PersonaType != "" {
		a.PersonaType = &pi.PersonaType
	}
	if pi.CurrentBead != "" {
		a.CurrentBead = &pi.CurrentBead
	}
	if pi.MaxConcurrentBeads > 0 {
		a.MaxConcurrentBeads = &pi.MaxConcurrentBeads
	}
	if a.Status == "" {
		// No heartbeat heard: a hello says the agent exists, not whether
		// it is free.
		a.Status = "unknown"
	}
	for _, c := range pi.Capabilities {
		a.Capabilities = append(a.Capabilities, c.Name)
	}
	return a
}

type agentFilter struct {
	status, persona string
	capabilities    []string
}

// knownStatuses are the values the status filter takes.
var knownStatuses = []string{string(protocol.StatusAvailable), string(protocol.StatusBusy), string(protocol.StatusStale), "unknown"}

func parseAgentFilter(r *http.Request) (agentFilter, error) {
	var f agentFilter
	for k, vs := range r.URL.Query() {
		switch k {
		case "status":
			if len(vs) != 1 || !slices.Contains(knownStatuses, vs[0]) {
				return f, fmt.Errorf("status must be given once, one of %s", strings.Join(knownStatuses, ", "))
			}
			f.status = vs[0]
		case "persona_type":
			if len(vs) != 1 || vs[0] == "" {
				return f, fmt.Errorf("persona_type must be given once and not be empty")
			}
			f.persona = vs[0]
		case "capability":
			for _, v := range vs {
				if v == "" {
					return f, fmt.Errorf("capability must not be empty")
				}
			}
			f.capabilities = vs
		default:
			return f, fmt.Errorf("unknown query parameter %q (known: status, persona_type, capability)", k)
		}
	}
	return f, nil
}

func (f agentFilter) admits(a Agent) bool {
	if f.status != "" && a.Status != f.status {
		return false
	}
	if f.persona != "" && (a.PersonaType == nil || *a.PersonaType != f.persona) {
		return false
	}
	for _, c := range f.capabilities {
		if !slices.Contains(a.Capabilities, c) {
			return false
		}
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
