package sign_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"

	"github.com/meshagent/meshagent/sign"
)

// writeFile writes b to path with exactly mode perm (whatever the umask).
func writeFile(t *testing.T, path string, b []byte, perm fs.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, b, perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil {
		t.Fatal(err)
	}
}

func marshalKey(t *testing.T, k crypto.PrivKey) []byte {
	t.Helper()
	b, err := crypto.MarshalPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestKeyFromSeed(t *testing.T) {
	for _, n := range []int{0, 31, 33, 64} {
		if _, err := sign.KeyFromSeed(make([]byte, n)); err == nil {
			t.Errorf("KeyFromSeed(%d bytes): no error", n)
		}
	}
	a, b := testKey(t, 1), testKey(t, 1)
	if !a.Equals(b) {
		t.Error("KeyFromSeed is not deterministic")
	}
	if a.Equals(testKey(t, 2)) {
		t.Error("different seeds gave the same key")
	}
	if a.Type() != crypto.Ed25519 {
		t.Errorf("type %s, want Ed25519", a.Type())
	}
}

func TestGenerateKey(t *testing.T) {
	a, err := sign.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	b, err := sign.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if a.Type() != crypto.Ed25519 {
		t.Errorf("type %s, want Ed25519", a.Type())
	}
	if a.Equals(b) {
		t.Error("two generated keys are equal")
	}
}

func TestSaveKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a", "b", "identity.key")
	k := testKey(t, 1)
	if err := sign.SaveKey(path, k); err != nil {
		t.Fatalf("SaveKey: %v", err)
	}

	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != 0o600 || sign.KeyFileMode != 0o600 {
		t.Errorf("key file mode %04o, want 0600", got)
	}
	for _, d := range []string{filepath.Join(dir, "a"), filepath.Join(dir, "a", "b")} {
		st, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != 0o700 {
			t.Errorf("directory %s mode %04o, want 0700", filepath.Base(d), got)
		}
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want only the key (no temporary files left)", names)
	}

	got, err := sign.LoadKey(path)
	if err != nil {
		t.Fatalf("LoadKey: %v", err)
	}
	if !got.Equals(k) {
		t.Error("LoadKey returned a different key")
	}

	// An existing identity is never overwritten.
	before, _ := os.ReadFile(path)
	err = sign.SaveKey(path, testKey(t, 2))
	if !errors.Is(err, fs.ErrExist) {
		t.Errorf("SaveKey over an existing key: %v, want fs.ErrExist", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Error("SaveKey changed an existing key file")
	}
}

func TestSaveKeyRefusesOtherKeyTypes(t *testing.T) {
	for name, k := range otherKeyTypes(t) {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "identity.key")
			if err := sign.SaveKey(path, k); !errors.Is(err, sign.ErrUnsupportedKey) {
				t.Errorf("SaveKey: %v, want ErrUnsupportedKey", err)
			}
			if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("a key file was written: %v", err)
			}
		})
	}
}

func TestLoadKey(t *testing.T) {
	good := marshalKey(t, testKey(t, 1))
	others := otherKeyTypes(t)

	tests := []struct {
		name      string
		content   []byte
		perm      fs.FileMode
		wantPerm  bool  // a *KeyPermissionError
		wantErr   error // errors.Is target; nil with wantFail means "some error"
		wantFail  bool
		wantInMsg string
	}{
		{name: "0600", content: good, perm: 0o600},
		{name: "0400", content: good, perm: 0o400},
		{name: "0700 (owner only)", content: good, perm: 0o700},
		{name: "0644", content: good, perm: 0o644, wantPerm: true},
		{name: "0640", content: good, perm: 0o640, wantPerm: true},
		{name: "0604", content: good, perm: 0o604, wantPerm: true},
		{name: "0620 group-writable", content: good, perm: 0o620, wantPerm: true},
		{name: "0602 world-writable", content: good, perm: 0o602, wantPerm: true},
		{name: "0666", content: good, perm: 0o666, wantPerm: true},
		{name: "0644 garbage", content: []byte("garbage"), perm: 0o644, wantPerm: true}, // permissions first: say chmod, not "bad key"
		{name: "secp256k1", content: marshalKey(t, others["secp256k1"]), perm: 0o600, wantFail: true, wantErr: sign.ErrUnsupportedKey},
		{name: "ecdsa", content: marshalKey(t, others["ecdsa"]), perm: 0o600, wantFail: true, wantErr: sign.ErrUnsupportedKey},
		{name: "garbage", content: []byte("this is not a key\n"), perm: 0o600, wantFail: true, wantInMsg: "not a libp2p private key"},
		{name: "empty", content: nil, perm: 0o600, wantFail: true},
		{name: "raw 64-byte ed25519 key", content: bytes.Repeat([]byte{1}, 64), perm: 0o600, wantFail: true},
		{name: "truncated", content: good[:len(good)-1], perm: 0o600, wantFail: true},
		{name: "too large", content: append(append([]byte{}, good...), make([]byte, 8<<10)...), perm: 0o600, wantFail: true, wantInMsg: "too large"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "identity.key")
			writeFile(t, path, tc.content, tc.perm)
			k, err := sign.LoadKey(path)
			switch {
			case tc.wantPerm:
				var pe *sign.KeyPermissionError
				if !errors.As(err, &pe) {
					t.Fatalf("LoadKey: %v, want *KeyPermissionError", err)
				}
				if pe.Path != path || pe.Mode.Perm() != tc.perm {
					t.Errorf("KeyPermissionError{Path: %q, Mode: %v}, want %q and %v", pe.Path, pe.Mode, path, tc.perm)
				}
				if msg := err.Error(); !strings.Contains(msg, "chmod 600") || !strings.Contains(msg, path) {
					t.Errorf("message %q does not say to chmod 600 the file", msg)
				}
			case tc.wantFail:
				if err == nil {
					t.Fatal("LoadKey: no error")
				}
				if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
					t.Errorf("LoadKey: %v, want %v", err, tc.wantErr)
				}
				if tc.wantInMsg != "" && !strings.Contains(err.Error(), tc.wantInMsg) {
					t.Errorf("LoadKey: %v, want a message containing %q", err, tc.wantInMsg)
				}
				var pe *sign.KeyPermissionError
				if errors.As(err, &pe) {
					t.Errorf("LoadKey: unexpected permission error %v", err)
				}
			default:
				if err != nil {
					t.Fatalf("LoadKey: %v", err)
				}
				if !k.Equals(testKey(t, 1)) {
					t.Error("LoadKey returned a different key")
				}
			}
		})
	}
}

func TestLoadKeyNotAFile(t *testing.T) {
	t.Run("missing", func(t *testing.T) {
		_, err := sign.LoadKey(filepath.Join(t.TempDir(), "nope"))
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("LoadKey: %v, want fs.ErrNotExist", err)
		}
	})
	t.Run("directory", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "d")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		_, err := sign.LoadKey(dir)
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("LoadKey(directory): %v", err)
		}
	})
	t.Run("symlink to a good key", func(t *testing.T) {
		dir := t.TempDir()
		target := filepath.Join(dir, "real.key")
		writeFile(t, target, marshalKey(t, testKey(t, 1)), 0o600)
		link := filepath.Join(dir, "identity.key")
		if err := os.Symlink(target, link); err != nil {
			t.Skip("symlinks unsupported:", err)
		}
		if _, err := sign.LoadKey(link); err != nil {
			t.Errorf("LoadKey(symlink): %v", err)
		}
	})
}

func TestLoadOrCreateKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "home", "identity.key")

	k1, created, err := sign.LoadOrCreateKey(path)
	if err != nil {
		t.Fatalf("first LoadOrCreateKey: %v", err)
	}
	if !created {
		t.Error("first call: created = false")
	}
	if k1.Type() != crypto.Ed25519 {
		t.Errorf("created a %s key", k1.Type())
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("created key mode %04o, want 0600", st.Mode().Perm())
	}
	if st, err := os.Stat(filepath.Dir(path)); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("created directory: %v, mode %v, want 0700", err, st.Mode().Perm())
	}

	k2, created, err := sign.LoadOrCreateKey(path)
	if err != nil {
		t.Fatalf("second LoadOrCreateKey: %v", err)
	}
	if created {
		t.Error("second call: created = true")
	}
	if mustID(t, k1) != mustID(t, k2) {
		t.Errorf("second call loaded %s, want %s", mustID(t, k2), mustID(t, k1))
	}
}

func TestLoadOrCreateKeyRefusesBadKey(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		content []byte
		perm    fs.FileMode
	}{
		{"readable by others", marshalKey(t, testKey(t, 1)), 0o644},
		{"garbage", []byte("garbage"), 0o600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			writeFile(t, path, tc.content, tc.perm)
			if _, created, err := sign.LoadOrCreateKey(path); err == nil || created {
				t.Errorf("LoadOrCreateKey: created=%v err=%v, want an error", created, err)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, tc.content) {
				t.Error("LoadOrCreateKey replaced an existing file")
			}
		})
	}
}

// Concurrent first starts agree on one identity, and exactly one creates it.
func TestLoadOrCreateKeyConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "identity.key")
	const n = 8
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		ids     = map[string]int{}
		creates int
	)
	for range n {
		wg.Go(func() {
			k, created, err := sign.LoadOrCreateKey(path)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			ids[mustID(t, k).String()]++
			if created {
				creates++
			}
		})
	}
	wg.Wait()
	if len(ids) != 1 || creates != 1 {
		t.Errorf("%d distinct ids, %d creations; want 1 and 1", len(ids), creates)
	}
}
