package node

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
)

func TestAnyProvidersDownAndInFlight(t *testing.T) {
	now := time.Unix(1000, 0)
	ap := newAnyProviders(func() time.Time { return now })
	p := peer.ID("p")
	end := ap.begin(p)
	if k, down := ap.state(p, now); k != 1 || down {
		t.Fatalf("in flight %d, down %v", k, down)
	}
	end(false) // unreachable
	if k, down := ap.state(p, now); k != 0 || !down {
		t.Fatalf("after a failed dial: in flight %d, down %v", k, down)
	}
	if _, down := ap.state(p, now.Add(anyDownFor+time.Second)); down {
		t.Fatal("still down after anyDownFor")
	}
	ap.begin(p)(false)
	ap.begin(p)(true) // reached again
	if _, down := ap.state(p, now); down {
		t.Fatal("down after it answered")
	}
}

func TestAnyProvidersLookupReuse(t *testing.T) {
	now := time.Unix(1000, 0)
	ap := newAnyProviders(func() time.Time { return now })
	a, b := peer.ID("a"), peer.ID("b")
	c := protocol.Capability{Name: "x"}

	found, first, start := ap.lookup("x", now)
	if start == nil || len(found) != 0 {
		t.Fatalf("first lookup: start %v, found %v", start, found)
	}
	if _, _, again := ap.lookup("x", now); again != nil {
		t.Fatal("a second lookup started while one runs")
	}
	ap.found(start, a, c)
	select {
	case <-first:
	default:
		t.Fatal("first not closed by the first provider")
	}
	ap.found(start, b, c)
	ap.finish(start)
	if found, _, again := ap.lookup("x", now.Add(anyLookupEvery/2)); again != nil || len(found) != 2 {
		t.Fatalf("within anyLookupEvery: start %v, found %v", again, found)
	}
	// The next lookup finds only b: a is forgotten when it ends, not
	// before.
	_, _, start = ap.lookup("x", now.Add(anyLookupEvery+time.Second))
	if start == nil {
		t.Fatal("no lookup after anyLookupEvery")
	}
	ap.found(start, b, c)
	if found, _, _ := ap.lookup("x", now); len(found) != 2 {
		t.Fatalf("while the lookup runs: %v", found)
	}
	ap.finish(start)
	if found, _, _ := ap.lookup("x", now); len(found) != 1 || found[b].Name != "x" {
		t.Fatalf("after it ended: %v", found)
	}
	// An empty answer is reused for a shorter time.
	_, _, start = ap.lookup("y", now)
	ap.finish(start)
	if _, _, again := ap.lookup("y", now.Add(anyLookupEmptyEvery+time.Second)); again == nil {
		t.Fatal("an empty answer was reused past anyLookupEmptyEvery")
	}
}
