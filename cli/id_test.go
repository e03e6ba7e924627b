package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshagent/meshagent/sign"
)

func TestIDCreatesKey(t *testing.T) {
	key := filepath.Join(t.TempDir(), "sub", "a.key")
	res := runCLI(t, "", "id", "--key", key)
	res.wantCode(t, ExitOK)
	st, err := os.Stat(key)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("key mode %04o, want 0600", st.Mode().Perm())
	}
	k, err := sign.LoadKey(key)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := sign.AgentID(k.GetPublic())
	pub, _ := sign.PublicKeyBase64(id)
	if !strings.Contains(res.stdout, "agent id:   "+id.String()) || !strings.Contains(res.stdout, "public key: "+pub) {
		t.Errorf("stdout lacks the id and key:\n%s", res.stdout)
	}
	res.wantStderr(t, "created a new identity in "+key)

	// The second run reuses the key and says so in --json.
	res = runCLI(t, "", "id", "--key", key, "--json")
	res.wantCode(t, ExitOK)
	var out idOutput
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
		t.Fatalf("--json output %q: %v", res.stdout, err)
	}
	want := idOutput{AgentID: id.String(), PublicKey: pub, KeyFile: key, Created: false}
	if out != want {
		t.Errorf("--json = %+v, want %+v", out, want)
	}
}

func TestIDDefaultKeyInDataDir(t *testing.T) {
	dir := t.TempDir()
	res := runCLI(t, "", "id", "--data", dir, "--json")
	res.wantCode(t, ExitOK)
	var out idOutput
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "identity.key"); out.KeyFile != want || !out.Created {
		t.Errorf("key file %q created=%v, want %q created", out.KeyFile, out.Created, want)
	}
}

func TestIDRefusesReadableKey(t *testing.T) {
	key := filepath.Join(t.TempDir(), "a.key")
	runCLI(t, "", "id", "--key", key).wantCode(t, ExitOK)
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	res := runCLI(t, "", "id", "--key", key)
	res.wantCode(t, ExitFailure)
	res.wantStderr(t, "refusing to use identity key "+key, "mode 0644", "chmod 600 "+key)
	if res.stdout != "" {
		t.Errorf("stdout = %q, want nothing", res.stdout)
	}
}
