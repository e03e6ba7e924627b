package dht

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	kaddht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/internal/testlog"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
)

// join starts one more directory in m, bootstrapped to one or two random
// earlier ones, as agents join a mesh.
func (m *mesh) join(t *testing.T, rng *rand.Rand, opts ...Option) {
	t.Helper()
	i := len(m.dirs)
	o := append([]Option{WithLogger(testlog.New(t).With("dir", i))}, opts...)
	if i > 0 {
		boot := []int{rng.IntN(i)}
		if j := rng.IntN(i); j != boot[0] && rng.IntN(2) == 0 {
			boot = append(boot, j)
		}
		for _, j := range boot {
			o = append(o, WithBootstrapPeers(peer.AddrInfo{ID: m.hosts[j].ID(), Addrs: m.hosts[j].Addrs()}))
		}
	}
	h := newHost(t)
	d, err := New(h, o...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.Bootstrap(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.hosts = append(m.hosts, h)
	m.dirs = append(m.dirs, d)
}

// closest returns the k of ids closest to key in the DHT's XOR metric
// (distances between the SHA-256 of each).
func closest(ids []peer.ID, key []byte, k int) []peer.ID {
	target := sha256.Sum256(key)
	dist := func(id peer.ID) []byte {
		h := sha256.Sum256([]byte(id))
		for i := range h {
			h[i] ^= target[i]
		}
		return h[:]
	}
	s := slices.Clone(ids)
	slices.SortFunc(s, func(a, b peer.ID) int { return bytes.Compare(dist(a), dist(b)) })
	return s[:min(k, len(s))]
}

// TestProviderStartedFirstFoundByAll: a provider whose record went out
// while the mesh was two agents (so to the one peer it knew) ends up with
// its record at the peers closest to the key, where lookups ask, and is
// found by every agent that joins after it. A bucket size of 4 puts 16
// agents in the regime of a mesh many times larger than kad-dht's default
// of 20, where a lookup ends at the peers closest to the key and never
// reaches a record placed elsewhere.
func TestProviderStartedFirstFoundByAll(t *testing.T) {
	const n = 16
	rng := rand.New(rand.NewPCG(16, 1))
	opts := []Option{WithKadOptions(kaddht.BucketSize(4), kaddht.Concurrency(2))}
	m := &mesh{}
	m.join(t, rng, opts...)
	m.join(t, rng, opts...)
	m.dirs[0].Advertise([]protocol.Capability{translate()})
	prov := m.hosts[0].ID()
	key := CapabilityKey("translate").Hash()
	wait.For(t, 30*time.Second, func() error {
		ps, err := m.dirs[1].kad.ProviderStore().GetProviders(context.Background(), key)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(ps, func(ai peer.AddrInfo) bool { return ai.ID == prov }) {
			return errors.New("the provider's first record has not reached the one other agent")
		}
		return nil
	})
	for len(m.dirs) < n {
		m.join(t, rng, opts...)
	}
	ids := make([]peer.ID, len(m.hosts))
	for i, h := range m.hosts {
		ids[i] = h.ID()
	}
	// A lookup ends by asking the peers closest to the key, so the record
	// must reach some of them. Not all: one that joined after the
	// provider's last doubling of its routing table gets the record only at
	// the next provide, and a lookup finds it at the others meanwhile.
	// Generous deadlines: on a loaded CI machine a lookup round of 16
	// in-process agents takes seconds; the conditions, not the times, are
	// the test.
	wait.For(t, 60*time.Second, func() error {
		near := closest(ids, key, 4)
		for _, p := range near {
			i := slices.Index(ids, p)
			ps, err := m.dirs[i].kad.ProviderStore().GetProviders(context.Background(), key)
			if err != nil {
				return err
			}
			if p == prov || slices.ContainsFunc(ps, func(ai peer.AddrInfo) bool { return ai.ID == prov }) {
				return nil
			}
		}
		return fmt.Errorf("none of the 4 agents closest to the key has a record of the provider")
	})
	var mu sync.Mutex
	found := map[int]bool{}
	wait.For(t, 60*time.Second, func() error {
		var wg sync.WaitGroup
		for i := 1; i < n; i++ {
			mu.Lock()
			done := found[i]
			mu.Unlock()
			if done {
				continue
			}
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if slices.Contains(collect(ctx, m.dirs[i], "translate", false), prov) {
					mu.Lock()
					found[i] = true
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(found) < n-1 {
			return fmt.Errorf("%d of %d agents found the provider that started first", len(found), n-1)
		}
		return nil
	})
}
