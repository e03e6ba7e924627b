package localapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/localapi"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

type fakeDir struct {
	self  protocol.PeerInfo
	peers []protocol.PeerInfo
}

func (d fakeDir) SelfInfo() protocol.PeerInfo { return d.self }
func (d fakeDir) Peers() []protocol.PeerInfo  { return d.peers }

func newID(t *testing.T) peer.ID {
	t.Helper()
	k, err := sign.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func caps(names ...string) []protocol.Capability {
	out := make([]protocol.Capability, len(names))
	for i, n := range names {
		out[i] = protocol.Capability{Name: n}
	}
	return out
}

func TestAgentsREST(t *testing.T) {
	self, qa, eng, quiet := newID(t), newID(t), newID(t), newID(t)
	now := time.Date(2026, 2, 5, 20, 0, 0, 0, time.UTC)
	dir := fakeDir{
		self: protocol.PeerInfo{AgentID: self.String(), Name: "me", Capabilities: caps("plan"), Status: protocol.StatusAvailable, PersonaType: "project-manager", LastHeartbeat: now, Connected: true},
		peers: []protocol.PeerInfo{
			{AgentID: qa.String(), Name: "qa", Capabilities: caps("run_tests", "review_test_coverage"), Status: protocol.StatusAvailable, PersonaType: "qa-engineer", LastHeartbeat: now, Connected: true, Load: 0.333},
			{AgentID: eng.String(), Name: "eng", Capabilities: caps("write_code", "run_tests"), Status: protocol.StatusBusy, PersonaType: "engineer", LastHeartbeat: now},
			{AgentID: quiet.String(), Capabilities: caps("run_tests")},
		},
	}
	srv := httptest.NewServer(localapi.AgentsHandler(dir))
	defer srv.Close()
	pub, err := sign.PublicKeyBase64(qa)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name     string
		method   string
		path     string
		wantCode int
		wantIDs  []peer.ID // for lists
		wantErr  string
	}{
		{"all", "GET", "/api/v1/agents", 200, []peer.ID{self, qa, eng, quiet}, ""},
		{"seed 004 available qa", "GET", "/api/v1/agents?status=available&persona_type=qa-engineer", 200, []peer.ID{qa}, ""},
		{"by capability", "GET", "/api/v1/agents?capability=run_tests", 200, []peer.ID{qa, eng, quiet}, ""},
		{"every capability named", "GET", "/api/v1/agents?capability=run_tests&capability=write_code", 200, []peer.ID{eng}, ""},
		{"busy", "GET", "/api/v1/agents?status=busy", 200, []peer.ID{eng}, ""},
		{"no heartbeat yet", "GET", "/api/v1/agents?status=unknown", 200, []peer.ID{quiet}, ""},
		{"none match", "GET", "/api/v1/agents?persona_type=designer", 200, []peer.ID{}, ""},
		{"unknown parameter", "GET", "/api/v1/agents?persona=qa-engineer", 400, nil, `unknown query parameter "persona"`},
		{"bad status", "GET", "/api/v1/agents?status=free", 400, nil, "status must be"},
		{"status twice", "GET", "/api/v1/agents?status=busy&status=available", 400, nil, "status must be given once"},
		{"empty capability", "GET", "/api/v1/agents?capability=", 400, nil, "capability must not be empty"},
		{"wrong method", "POST", "/api/v1/agents", 405, nil, ""},
		{"one agent", "GET", "/api/v1/agents/" + qa.String(), 200, []peer.ID{qa}, ""},
		{"one agent by base64 key", "GET", "/api/v1/agents/" + strings.NewReplacer("/", "%2F", "+", "%2B").Replace(pub), 200, []peer.ID{qa}, ""},
		{"self", "GET", "/api/v1/agents/" + self.String(), 200, []peer.ID{self}, ""},
		{"unknown agent", "GET", "/api/v1/agents/" + newID(t).String(), 404, nil, "not known"},
		{"not an id", "GET", "/api/v1/agents/agent-qa-engineer-1", 400, nil, "is not an agent id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, srv.URL+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.wantCode {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.wantCode)
			}
			if tt.wantCode == 405 {
				return
			}
			if resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("Content-Type %q", resp.Header.Get("Content-Type"))
			}
			if tt.wantErr != "" {
				var e struct{ Error string }
				if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || !strings.Contains(e.Error, tt.wantErr) {
					t.Fatalf("error %q (%v), want one containing %q", e.Error, err, tt.wantErr)
				}
				return
			}
			var got []localapi.Agent
			if strings.HasPrefix(tt.name, "one agent") || tt.name == "self" {
				var a localapi.Agent
				if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
					t.Fatal(err)
				}
				got = []localapi.Agent{a}
			} else {
				var list localapi.AgentList
				if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
					t.Fatal(err)
				}
				if list.Count != len(list.Agents) {
					t.Errorf("count %d for %d agents", list.Count, len(list.Agents))
				}
				got = list.Agents
			}
			var ids []string
			for _, a := range got {
				ids = append(ids, a.AgentID)
			}
			var want []string
			for _, id := range tt.wantIDs {
				want = append(want, id.String())
			}
			if strings.Join(ids, ",") != strings.Join(sortedStrings(want), ",") {
				t.Fatalf("agents %v, want %v", ids, want)
			}
		})
	}
}

// sortedStrings is s sorted: the handler lists agents by agent_id.
func sortedStrings(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// TestAgentShapeGolden pins seed 004's member names and the nulls of what
// an agent has not said.
func TestAgentShapeGolden(t *testing.T) {
	id, err := sign.ParseAgentID("12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN")
	if err != nil {
		t.Fatal(err)
	}
	dir := fakeDir{self: protocol.PeerInfo{AgentID: id.String(), Name: "qa-1", Capabilities: caps("run_tests"), Status: protocol.StatusAvailable, PersonaType: "qa-engineer", LastHeartbeat: time.Date(2026, 2, 5, 20, 0, 0, 0, time.UTC), Connected: true, Load: 0.5}}
	rec := httptest.NewRecorder()
	localapi.AgentsHandler(dir).ServeHTTP(rec, httptest.NewRequest("GET", "/api/v1/agents/"+id.String(), nil))
	want := `{"agent_id":"12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN","name":"qa-1","persona_type":"qa-engineer","capabilities":["run_tests"],"status":"available","current_bead":null,"max_concurrent_beads":null,"load":0.5,"last_heartbeat":"2026-02-05T20:00:00Z","connected":true}`
	if got := strings.TrimSpace(rec.Body.String()); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	// A declared bead and capacity (mesh.setStatus) fill the seed's members.
	dir.self.Status, dir.self.CurrentBead, dir.self.MaxConcurrentBeads = protocol.StatusBusy, "bd-7", 2
	rec = httptest.NewRecorder()
	localapi.AgentsHandler(dir).ServeHTTP(rec, httptest.NewRequest("GET", "/api/v1/agents/"+id.String(), nil))
	want = strings.NewReplacer(`"status":"available"`, `"status":"busy"`, `"current_bead":null`, `"current_bead":"bd-7"`, `"max_concurrent_beads":null`, `"max_concurrent_beads":2`).Replace(want)
	if got := strings.TrimSpace(rec.Body.String()); got != want {
		t.Fatalf("with a declared status:\ngot  %s\nwant %s", got, want)
	}
}
