package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/beadctx"
	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/store"
)

// beadMember starts a node that keeps the history of bead contexts in
// the store at path (each member is a keeper: there is no central store).
func beadMember(t *testing.T, i int, path string) (*node.Node, *store.Store) {
	t.Helper()
	st, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return meshtest.Node(t, i, node.WithStore(st), node.WithKeepHistory("beadctx:*")), st
}

func sameContext(nodes ...*node.Node) func() error {
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var first *protocol.BeadContext
		for i, n := range nodes {
			c, err := n.ContextGet(ctx, "bead-abc-123")
			if err != nil {
				return err
			}
			if i == 0 {
				first = c
				continue
			}
			if !bytes.Equal(c.SharedContext, first.SharedContext) || c.Version != first.Version {
				return fmt.Errorf("member %d holds %s (version %+v), member 0 %s (version %+v)", i, c.SharedContext, c.Version, first.SharedContext, first.Version)
			}
		}
		return nil
	}
}

// TestBeadContextConvergesAfterAMemberWasAway: two agents patch one bead
// context concurrently while a third is closed; all patches reach both,
// the third comes back (a new node on its store) and catches up from the
// others' history, and all three hold the same document — the fold of
// every patch in (HLC, agent id) order.
func TestBeadContextConvergesAfterAMemberWasAway(t *testing.T) {
	dir := t.TempDir()
	a, _ := beadMember(t, 270, filepath.Join(dir, "a.db"))
	b, _ := beadMember(t, 271, filepath.Join(dir, "b.db"))
	c, cst := beadMember(t, 272, filepath.Join(dir, "c.db"))
	meshtest.Connect(t, a, b)
	meshtest.Connect(t, a, c)
	meshtest.Connect(t, b, c)
	ctx := meshtest.Context(t, 60*time.Second)
	for _, n := range []*node.Node{a, b, c} {
		if _, err := n.ContextGet(ctx, "bead-abc-123"); err != nil {
			t.Fatal(err)
		}
	}
	members := []string{a.AgentID(), b.AgentID()}
	if _, err := c.ContextSet(ctx, "bead-abc-123", json.RawMessage(`{"owner":"c","review_status":"new"}`), members); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, sameContext(a, b, c))

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cst.Close(); err != nil {
		t.Fatal(err)
	}

	const rounds = 15
	var wg sync.WaitGroup
	errs := make(chan error, 2*rounds)
	for _, w := range []struct {
		n    *node.Node
		name string
	}{{a, "a"}, {b, "b"}} {
		wg.Go(func() {
			for i := range rounds {
				patch := fmt.Sprintf(`{"review_status":"%s-%d","by_%s":{"n":%d,"seen":[%d]},"owner":null}`, w.name, i, w.name, i, i)
				if _, err := w.n.ContextPatch(ctx, "bead-abc-123", json.RawMessage(patch), nil); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Same document is not yet every patch: later patches by one agent
	// overwrite its earlier ones, so a member that has not had one yet (a
	// gossip message dropped under load, recovered by the next catch-up
	// from the keepers, every 10 s) can already hold the same bytes. Wait
	// for every patch at both.
	wait.For(t, 60*time.Second, func() error {
		if err := sameContext(a, b)(); err != nil {
			return err
		}
		for i, n := range []*node.Node{a, b} {
			c, err := n.ContextGet(ctx, "bead-abc-123")
			if err != nil {
				return err
			}
			if c.Patches != 2*rounds+1 {
				return fmt.Errorf("member %d holds %d patches, want %d", i, c.Patches, 2*rounds+1)
			}
		}
		return nil
	})
	got, err := a.ContextGet(ctx, "bead-abc-123")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(got.SharedContext, &doc); err != nil {
		t.Fatal(err)
	}
	if _, ok := doc["owner"]; ok || doc["by_a"] == nil || doc["by_b"] == nil {
		t.Fatalf("converged to %s, want both agents' members and owner removed", got.SharedContext)
	}
	if want := fmt.Sprintf("%d", rounds-1); !bytes.Contains(got.SharedContext, []byte(`"review_status":"a-`+want+`"`)) && !bytes.Contains(got.SharedContext, []byte(`"review_status":"b-`+want+`"`)) {
		t.Fatalf("review_status is not a last write: %s", got.SharedContext)
	}
	if got.Patches != 2*rounds+1 || len(got.CollaboratingAgents) != 3 {
		t.Fatalf("%d patches by %v, want %d by 3 agents", got.Patches, got.CollaboratingAgents, 2*rounds+1)
	}

	// The third comes back on its store and catches up.
	c2, _ := beadMember(t, 272, filepath.Join(dir, "c.db"))
	meshtest.Connect(t, c2, a)
	meshtest.Connect(t, c2, b)
	wait.For(t, 30*time.Second, sameContext(a, b, c2))
	// And its own patches reach the others.
	if _, err := c2.ContextPatch(ctx, "bead-abc-123", json.RawMessage(`{"decision_needed":false}`), nil); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, func() error {
		if err := sameContext(a, b, c2)(); err != nil {
			return err
		}
		got, _ := b.ContextGet(ctx, "bead-abc-123")
		if !bytes.Contains(got.SharedContext, []byte(`"decision_needed":false`)) {
			return fmt.Errorf("b has not got c's patch: %s", got.SharedContext)
		}
		return nil
	})
}

// TestBeadContextRefusesBadInput: bead ids, non-object values and
// oversize documents are INVALID_MESSAGE.
func TestBeadContextRefusesBadInput(t *testing.T) {
	n := meshtest.Node(t, 273)
	ctx := meshtest.Context(t, 20*time.Second)
	for name, call := range map[string]func() error{
		"bead id with a slash": func() error { _, err := n.ContextGet(ctx, "a/b"); return err },
		"empty bead id":        func() error { _, err := n.ContextGet(ctx, ""); return err },
		"bead id pattern":      func() error { _, err := n.ContextPatch(ctx, "a*", json.RawMessage(`{}`), nil); return err },
		"array patch":          func() error { _, err := n.ContextPatch(ctx, "b1", json.RawMessage(`[1]`), nil); return err },
		"string set":           func() error { _, err := n.ContextSet(ctx, "b1", json.RawMessage(`"x"`), nil); return err },
		"empty members":        func() error { _, err := n.ContextSet(ctx, "b1", json.RawMessage(`{}`), []string{}); return err },
		"duplicate member":     func() error { _, err := n.ContextPatch(ctx, "b1", json.RawMessage(`{"a":1,"a":2}`), nil); return err },
		"oversize": func() error {
			big := fmt.Sprintf(`{"a":"%s"}`, bytes.Repeat([]byte("x"), 40<<10))
			if _, err := n.ContextPatch(ctx, "b1", json.RawMessage(big), nil); err != nil {
				return fmt.Errorf("first half: %w", err)
			}
			_, err := n.ContextPatch(ctx, "b1", json.RawMessage(strings.Replace(big, `"a"`, `"b"`, 1)), nil)
			return err
		},
	} {
		err := call()
		if pe := protocol.AsError(err); err == nil || pe.Code != protocol.CodeInvalidMessage {
			t.Errorf("%s: %v, want INVALID_MESSAGE", name, err)
		}
	}
	// A lone member's changes apply at once.
	got, err := n.ContextPatch(ctx, "b2", json.RawMessage(`{"x":{"y":1}}`), nil)
	if err != nil || string(got.SharedContext) != `{"x":{"y":1}}` {
		t.Fatalf("%v %s", err, got.SharedContext)
	}
}

// TestBeadContextRefusesNonMembers: c creates a bead with a as the other
// member; b, not a member, is refused by its own node (UNAUTHORIZED, nothing
// published), and a patch b publishes on the bead's topic anyway (signed
// by b, as a modified node would) is applied by no member: a, b and c all
// count it refused and hold the document without it. Then a adds b, and
// b's change reaches every member.
func TestBeadContextRefusesNonMembers(t *testing.T) {
	dir := t.TempDir()
	a, _ := beadMember(t, 274, filepath.Join(dir, "a.db"))
	b, _ := beadMember(t, 275, filepath.Join(dir, "b.db"))
	c, _ := beadMember(t, 276, filepath.Join(dir, "c.db"))
	meshtest.Connect(t, a, b)
	meshtest.Connect(t, a, c)
	meshtest.Connect(t, b, c)
	ctx := meshtest.Context(t, 90*time.Second)
	const bead = "bead-abc-123"
	for _, n := range []*node.Node{a, b, c} {
		if _, err := n.ContextGet(ctx, bead); err != nil {
			t.Fatal(err)
		}
	}
	created, err := c.ContextSet(ctx, bead, json.RawMessage(`{"review_status":"new"}`), []string{a.AgentID()})
	if err != nil {
		t.Fatal(err)
	}
	if want := sortedIDs(a, c); fmt.Sprint(created.CollaboratingAgents) != fmt.Sprint(want) {
		t.Fatalf("members %v, want %v", created.CollaboratingAgents, want)
	}
	wait.For(t, 30*time.Second, sameContext(a, b, c))

	// b's own node refuses.
	_, err = b.ContextPatch(ctx, bead, json.RawMessage(`{"review_status":"hijacked"}`), nil)
	if pe := protocol.AsError(err); err == nil || pe.Code != protocol.CodeUnauthorized {
		t.Fatalf("non-member patch through its node: %v, want UNAUTHORIZED", err)
	}
	// A patch b publishes itself is refused by every member.
	p, err := beadctx.Patch{At: beadctx.HLC{Wall: time.Now().UnixMilli()}, Agent: b.AgentID(), Op: beadctx.OpPatch,
		Value: []byte(`{"review_status":"hijacked"}`), Members: []string{b.AgentID()}}.Check()
	if err != nil {
		t.Fatal(err)
	}
	payload, err := beadctx.EncodePayload(bead, p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(ctx, beadctx.Topic(bead), payload, nil); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 60*time.Second, func() error {
		for i, n := range []*node.Node{a, b, c} {
			got, err := n.ContextGet(ctx, bead)
			if err != nil {
				return err
			}
			if got.Refused != 1 {
				return fmt.Errorf("member %d has refused %d patches, want 1 (%s)", i, got.Refused, got.SharedContext)
			}
		}
		return nil
	})
	for i, n := range []*node.Node{a, b, c} {
		got, _ := n.ContextGet(ctx, bead)
		if string(got.SharedContext) != `{"review_status":"new"}` || got.Patches != 2 || fmt.Sprint(got.CollaboratingAgents) != fmt.Sprint(sortedIDs(a, c)) {
			t.Fatalf("member %d holds %s with %d patches and members %v: the non-member's patch took effect", i, got.SharedContext, got.Patches, got.CollaboratingAgents)
		}
		// The message history lists c's change only, in seed 004's names.
		if h := got.MessageHistory; len(h) != 1 || h[0].From != c.AgentID() || h[0].To != "beadctx:"+bead ||
			h[0].Subject != "set review_status; members: 1" || !strings.HasSuffix(h[0].Timestamp, "Z") {
			t.Fatalf("member %d: message_history %+v", i, h)
		}
		raw, _ := json.Marshal(got)
		if !bytes.Contains(raw, []byte(`"message_history":[{"from":"`)) {
			t.Fatalf("member %d answers %s", i, raw)
		}
	}

	// A member adds b; then b's changes take effect everywhere.
	if _, err := a.ContextPatch(ctx, bead, json.RawMessage(`{}`), []string{a.AgentID(), b.AgentID(), c.AgentID()}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, func() error {
		got, err := b.ContextGet(ctx, bead)
		if err != nil {
			return err
		}
		if len(got.CollaboratingAgents) != 3 {
			return fmt.Errorf("b sees members %v", got.CollaboratingAgents)
		}
		return nil
	})
	if _, err := b.ContextPatch(ctx, bead, json.RawMessage(`{"review_status":"in_progress"}`), nil); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, func() error {
		if err := sameContext(a, b, c)(); err != nil {
			return err
		}
		got, _ := c.ContextGet(ctx, bead)
		if string(got.SharedContext) != `{"review_status":"in_progress"}` {
			return fmt.Errorf("c holds %s", got.SharedContext)
		}
		return nil
	})
}

func sortedIDs(nodes ...*node.Node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.AgentID())
	}
	slices.Sort(out)
	return out
}

// TestBeadContextCatchUpBringsAMissedPatch: the periodic catch-up on its
// own. c and d follow a bead but drop every patch they get live (a test
// hook), so only catch-ups from the keeper a bring them; c catches up
// every 200 ms, d only every hour (its catch-up, in effect, disabled).
// After a's change, c holds it within a few intervals; d, which caught up
// only when it joined, before the change, still does not.
func TestBeadContextCatchUpBringsAMissedPatch(t *testing.T) {
	dir := t.TempDir()
	a, _ := beadMember(t, 277, filepath.Join(dir, "a.db"))
	c := meshtest.Node(t, 278, node.WithBeadResync(200*time.Millisecond))
	d := meshtest.Node(t, 279, node.WithBeadResync(time.Hour))
	meshtest.Connect(t, a, c)
	meshtest.Connect(t, a, d)
	meshtest.Connect(t, c, d)
	ctx := meshtest.Context(t, 60*time.Second)
	const bead = "bead-missed"
	for _, n := range []*node.Node{a, c, d} {
		node.DropLiveBeadPatches(n, n != a)
		if _, err := n.ContextGet(ctx, bead); err != nil {
			t.Fatal(err)
		}
	}
	sent, err := a.ContextSet(ctx, bead, json.RawMessage(`{"review_status":"new"}`), []string{c.AgentID()})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	wait.For(t, 30*time.Second, func() error {
		got, err := c.ContextGet(ctx, bead)
		if err != nil {
			return err
		}
		if !bytes.Equal(got.SharedContext, sent.SharedContext) || got.Version != sent.Version {
			return fmt.Errorf("c holds %s (version %+v), want %s", got.SharedContext, got.Version, sent.SharedContext)
		}
		return nil
	})
	t.Logf("c caught up %v after the change (interval 200 ms)", time.Since(start).Round(time.Millisecond))
	got, err := d.ContextGet(ctx, bead)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.SharedContext) != `{}` || got.Patches != 0 {
		t.Fatalf("d, which drops live patches and does not catch up again, holds %s: the patch came another way", got.SharedContext)
	}
}
