package lobby_test

import (
	"path/filepath"
	"testing"

	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/lobby"
	"github.com/meshagent/meshagent/store"
)

func TestNewOptions(t *testing.T) {
	st := lobbyStore(t, filepath.Join(t.TempDir(), "store.db"))
	defer st.Close()
	mesh := fakemesh.New()
	for _, tc := range []struct {
		mesh lobby.Mesh
		st   *store.Store
		opt  lobby.Option
	}{
		{nil, st, nil},
		{mesh, nil, nil},
		{mesh, st, lobby.WithLogger(nil)},
		{mesh, st, lobby.WithLimits(lobby.Limits{})},
		{mesh, st, lobby.WithID("")},
		{mesh, st, lobby.WithRequestTimeout(0)},
		{mesh, st, lobby.WithDiscoverTimeout(-1)},
		{mesh, st, lobby.WithOriginPatterns("[")},
		{mesh, st, lobby.WithMaxRegistrations(0)},
	} {
		if l, err := lobby.New(tc.mesh, tc.st, tc.opt); err == nil {
			_ = l.Close()
			t.Errorf("New accepted a bad configuration (%v)", tc)
		}
	}
	l, err := lobby.New(mesh, st, lobby.WithID("my_lobby"), lobby.WithOriginPatterns("example.com"))
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Close()
}
