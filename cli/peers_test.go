package cli

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata")

// TestPeersTable pins the human output of `meshagent peers`: a peer heard
// only through heartbeats, a connected one with latency, a stale one and
// one that has sent no heartbeat yet.
func TestPeersTable(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	peers := []protocol.PeerInfo{
		{AgentID: "12D3KooWAlice", Name: "alice", Status: protocol.StatusAvailable, LastHeartbeat: now.Add(-2400 * time.Millisecond),
			Connected: true, LatencyMS: 0.42, Capabilities: []protocol.Capability{{Name: "echo"}, {Name: "translate"}},
			Addrs: []string{"/ip4/127.0.0.1/tcp/4001", "/ip4/127.0.0.1/udp/4001/quic-v1"}},
		{AgentID: "12D3KooWBob", Name: "bob", Status: protocol.StatusBusy, LastHeartbeat: now.Add(-9 * time.Second),
			Capabilities: []protocol.Capability{}, Addrs: []string{"/ip4/10.0.0.2/tcp/4001"}},
		{AgentID: "12D3KooWCarol", Status: protocol.StatusStale, LastHeartbeat: now.Add(-75 * time.Second)},
		{AgentID: "12D3KooWDave", Name: "dave", Connected: true},
	}
	var out bytes.Buffer
	r := &runState{stdout: &out}
	if err := writePeersTable(r, peers, now); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "peers.golden")
	if *update {
		if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if out.String() != string(want) {
		t.Errorf("peers table:\n%s\nwant:\n%s", out.String(), want)
	}
}
