package localapi_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/localapi"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

func fileID(s *sign.Signer, base64ID bool) string {
	if !base64ID {
		return s.IDString()
	}
	raw, _ := base64.StdEncoding.DecodeString(s.PublicKeyBase64())
	return base64.RawURLEncoding.EncodeToString(raw)
}

func TestExchange(t *testing.T) {
	mesh := &fakeMesh{signer: newSigner(t)}
	dir := t.TempDir()
	x, err := localapi.StartExchange(localapi.NewAgentProtocol(mesh, nil), dir, mesh.AgentID(), mesh.signer.PublicKeyBase64(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	client, other := newSigner(t), newSigner(t)

	put := func(name string, doc []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name+".tmp"), doc, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, name+".tmp"), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	name := func(from, to string) string {
		return fmt.Sprintf("%s-%s-%d-%s.json", from, to, time.Now().UnixMilli(), protocol.NewID())
	}
	// A request by peer ids, one by base64 keys, one for another agent,
	// and one that does not verify.
	put(name(fileID(client, false), fileID(mesh.signer, false)), envelope(t, client, protocol.TypeRequest, mesh.AgentID(), protocol.Request{Action: "echo", CorrelationID: "f-1", Params: json.RawMessage(`{"a":1}`)}, false, nil))
	put(name(fileID(client, true), fileID(mesh.signer, true)), envelope(t, client, protocol.TypeRequest, mesh.signer.PublicKeyBase64(), protocol.Request{Action: "echo", CorrelationID: "f-2"}, true, nil))
	othersFile := name(fileID(client, false), fileID(other, false))
	put(othersFile, envelope(t, client, protocol.TypeRequest, other.IDString(), protocol.Request{Action: "echo", CorrelationID: "f-3"}, false, nil))
	badFile := name(fileID(client, false), fileID(mesh.signer, false))
	put(badFile, []byte(`{"not":"an envelope"}`))

	answers := func() map[string]*protocol.Envelope {
		out := map[string]*protocol.Envelope{}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), fileID(mesh.signer, false)+"-") && !strings.HasPrefix(e.Name(), fileID(mesh.signer, true)+"-") || !strings.HasSuffix(e.Name(), ".json") {
				continue
			}
			doc, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				continue
			}
			env, _, err := protocol.OpenJSON(doc)
			if err != nil {
				t.Fatalf("answer %s does not verify: %v", e.Name(), err)
			}
			var r protocol.Response
			_ = json.Unmarshal(env.Payload, &r)
			out[r.CorrelationID] = env
		}
		return out
	}
	wait.For(t, 30*time.Second, func() error {
		if got := answers(); len(got) != 2 {
			return fmt.Errorf("%d answers", len(got))
		}
		if _, err := os.Stat(filepath.Join(dir, localapi.ExchangeRejected, badFile+".reason")); err != nil {
			return errors.New("the bad file is not set aside with a reason")
		}
		return nil
	})
	got := answers()
	if env := got["f-2"]; env.From.AgentID != mesh.signer.PublicKeyBase64() {
		t.Errorf("answer to a base64 sender is from %s", env.From.AgentID)
	}
	if _, err := os.Stat(filepath.Join(dir, othersFile)); err != nil {
		t.Errorf("another agent's file was touched: %v", err)
	}
	processed, _ := os.ReadDir(filepath.Join(dir, localapi.ExchangeProcessed))
	if len(processed) != 2 {
		t.Errorf("%d files in processed/, want the two requests", len(processed))
	}
	mesh.mu.Lock()
	calls := len(mesh.calls)
	mesh.mu.Unlock()
	if calls != 2 {
		t.Fatalf("%d calls, want each request run once", calls)
	}
}
