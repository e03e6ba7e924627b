package beadctx

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func mustPatch(t testing.TB, wall int64, counter uint32, agent string, op Op, value string) Patch {
	t.Helper()
	p, err := Patch{At: HLC{Wall: wall, Counter: counter}, Agent: agent, Op: op, Value: []byte(value)}.Check()
	if err != nil {
		t.Fatalf("Check(%s): %v", value, err)
	}
	return p
}

func withMembers(p Patch, members ...string) Patch {
	p.Members = members
	p, err := p.Check()
	if err != nil {
		panic(err)
	}
	return p
}

// TestConcurrentPatchesConvergeInAnyOrder: members that receive the same
// patches in different orders hold the same document, byte for byte, and
// it is the fold of the patches in (HLC, agent) order.
func TestConcurrentPatchesConvergeInAnyOrder(t *testing.T) {
	patches := []Patch{
		mustPatch(t, 100, 0, "agent-a", OpPatch, `{"review_status":"in_progress","files":["a.go"]}`),
		mustPatch(t, 100, 0, "agent-b", OpPatch, `{"review_status":"blocked","tests":{"passed":3}}`),
		mustPatch(t, 101, 0, "agent-a", OpPatch, `{"tests":{"failed":1}}`),
		mustPatch(t, 101, 1, "agent-b", OpPatch, `{"files":null,"decision_needed":false}`),
		withMembers(mustPatch(t, 99, 5, "agent-c", OpSet, `{"seed":true,"review_status":"new"}`), "agent-b", "agent-a"),
		mustPatch(t, 102, 0, "agent-c", OpPatch, `{"tests":{"passed":14}}`),
	}
	want := `{"decision_needed":false,"review_status":"blocked","seed":true,"tests":{"failed":1,"passed":14}}`
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		order := rng.Perm(len(patches))
		d := foldInOrder(t, patches, order)
		// Duplicates change nothing.
		if added, _ := d.Add(patches[order[0]]); added {
			t.Fatalf("round %d: a duplicate was added", round)
		}
		if got := string(d.JSON()); got != want {
			t.Fatalf("round %d (order %v): %s, want %s", round, order, got, want)
		}
		if at, agent := d.Version(); at != (HLC{Wall: 102}) || agent != "agent-c" {
			t.Fatalf("version %s %s", at, agent)
		}
	}
}

// TestSameKeyKeepsOnePatchEverywhere: two different patches under one
// (HLC, agent) resolve to the same one whatever the order.
func TestSameKeyKeepsOnePatchEverywhere(t *testing.T) {
	a := mustPatch(t, 5, 0, "x", OpPatch, `{"v":1}`)
	b := mustPatch(t, 5, 0, "x", OpPatch, `{"v":2}`)
	d1, d2 := NewDoc(), NewDoc()
	for _, p := range []Patch{a, b} {
		_, _ = d1.Add(p)
	}
	for _, p := range []Patch{b, a} {
		_, _ = d2.Add(p)
	}
	if string(d1.JSON()) != string(d2.JSON()) || string(d1.JSON()) != `{"v":1}` {
		t.Fatalf("%s vs %s", d1.JSON(), d2.JSON())
	}
}

// TestFoldingBoundsTheLog: past MaxPatches the oldest are folded, the
// document is unchanged by folding, and a patch older than the fold is
// refused with ErrTooLate.
func TestFoldingBoundsTheLog(t *testing.T) {
	d := NewDoc()
	for i := range MaxPatches + 10 {
		if _, err := d.Add(mustPatch(t, int64(1000+i), 0, "a", OpPatch, fmt.Sprintf(`{"n":%d,"k%d":true}`, i, i%3))); err != nil {
			t.Fatal(err)
		}
	}
	if d.Patches() != MaxPatches {
		t.Fatalf("kept %d patches, want %d", d.Patches(), MaxPatches)
	}
	want := fmt.Sprintf(`{"k0":true,"k1":true,"k2":true,"n":%d}`, MaxPatches+9)
	if got := string(d.JSON()); got != want {
		t.Fatalf("%s, want %s", got, want)
	}
	if _, err := d.Add(mustPatch(t, 1005, 0, "b", OpPatch, `{"late":1}`)); !errors.Is(err, ErrTooLate) {
		t.Fatalf("late patch: %v, want ErrTooLate", err)
	}
	// A late patch within the kept log is re-sorted.
	if _, err := d.Add(mustPatch(t, 1500, 1, "a", OpPatch, `{"mid":1}`)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(d.JSON()), `"mid":1`) {
		t.Fatalf("%s lacks the re-sorted patch", d.JSON())
	}
}

// TestOversizePatchHasNoEffect: a patch that would take the document past
// MaxDocBytes is skipped, the same way on every member.
func TestOversizePatchHasNoEffect(t *testing.T) {
	d := NewDoc()
	big := `{"a":"` + strings.Repeat("x", MaxDocBytes/2) + `"}`
	big2 := `{"b":"` + strings.Repeat("y", MaxDocBytes/2) + `"}`
	for _, p := range []Patch{mustPatch(t, 1, 0, "a", OpPatch, big), mustPatch(t, 2, 0, "a", OpPatch, big2), mustPatch(t, 3, 0, "a", OpPatch, `{"c":1}`)} {
		if _, err := d.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Contains(string(d.JSON()), `"b"`) || !strings.Contains(string(d.JSON()), `"c":1`) {
		t.Fatalf("oversize patch applied or later one lost: %d bytes", len(d.JSON()))
	}
}

// TestPatchCheck refuses malformed patches with typed errors.
func TestPatchCheck(t *testing.T) {
	ok := Patch{At: HLC{Wall: 1}, Agent: "a", Op: OpPatch, Value: []byte(`{"a":1}`)}
	for name, tc := range map[string]struct {
		p    Patch
		want error
	}{
		"no agent":      {Patch{At: ok.At, Op: OpPatch, Value: ok.Value}, ErrInvalid},
		"no clock":      {Patch{Agent: "a", Op: OpPatch, Value: ok.Value}, ErrInvalid},
		"bad op":        {Patch{At: ok.At, Agent: "a", Op: "merge", Value: ok.Value}, ErrInvalid},
		"array value":   {Patch{At: ok.At, Agent: "a", Op: OpPatch, Value: []byte(`[1]`)}, ErrInvalid},
		"null value":    {Patch{At: ok.At, Agent: "a", Op: OpSet, Value: []byte(`null`)}, ErrInvalid},
		"duplicate key": {Patch{At: ok.At, Agent: "a", Op: OpPatch, Value: []byte(`{"a":1,"a":2}`)}, ErrInvalid},
		"too large":     {Patch{At: ok.At, Agent: "a", Op: OpPatch, Value: []byte(`{"a":"` + strings.Repeat("x", MaxPatchBytes) + `"}`)}, ErrTooLarge},
	} {
		if _, err := tc.p.Check(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	if p, err := ok.Check(); err != nil || string(p.Value) != `{"a":1}` {
		t.Fatalf("valid patch: %v %s", err, p.Value)
	}
}

func TestCheckBeadID(t *testing.T) {
	for _, id := range []string{"bead-abc-123", "b", "B.1_x", strings.Repeat("a", MaxBeadID)} {
		if err := CheckBeadID(id); err != nil {
			t.Errorf("%q: %v", id, err)
		}
	}
	for _, id := range []string{"", "-x", "a/b", "a*", "a b", "bead:1", "é", strings.Repeat("a", MaxBeadID+1)} {
		if err := CheckBeadID(id); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q accepted", id)
		}
	}
}

// TestClock: timestamps increase through a stalled wall clock, adopt a
// remote one within MaxSkew and refuse one beyond it.
func TestClock(t *testing.T) {
	now := time.UnixMilli(1000)
	c := NewClock(func() time.Time { return now })
	a, b := c.Now(), c.Now()
	if a != (HLC{Wall: 1000}) || b != (HLC{Wall: 1000, Counter: 1}) {
		t.Fatalf("%s %s", a, b)
	}
	if !c.Observe(HLC{Wall: 5000, Counter: 7}) {
		t.Fatal("a remote clock 4 s ahead was not adopted")
	}
	if got := c.Now(); got != (HLC{Wall: 5000, Counter: 8}) {
		t.Fatalf("after Observe: %s", got)
	}
	if c.Observe(HLC{Wall: 1000 + MaxSkew.Milliseconds() + 1}) {
		t.Fatal("a remote clock beyond MaxSkew was adopted")
	}
	now = time.UnixMilli(9000)
	if got := c.Now(); got != (HLC{Wall: 9000}) {
		t.Fatalf("after the wall clock passed: %s", got)
	}
}

// TestDecodePayloadIsStrict: wrong JSON types, unknown or missing members,
// bad bead ids and clocks far from the envelope time are refused.
func TestDecodePayloadIsStrict(t *testing.T) {
	sent := time.UnixMilli(1_700_000_000_000)
	good := `{"bead":"b1","op":"patch","hlc":{"wall":1700000000000,"counter":2},"value":{"a":1}}`
	bead, p, err := DecodePayload([]byte(good), "agent", sent)
	if err != nil || bead != "b1" || p.At != (HLC{Wall: 1_700_000_000_000, Counter: 2}) || p.Agent != "agent" {
		t.Fatalf("%v %s %+v", err, bead, p)
	}
	for _, bad := range []string{
		`{"bead":1,"op":"patch","hlc":{"wall":1700000000000,"counter":2},"value":{"a":1}}`,
		`{"bead":"b1","op":"patch","hlc":{"wall":"1700000000000","counter":2},"value":{"a":1}}`,
		`{"bead":"b1","op":"patch","hlc":{"wall":1700000000000,"counter":-1},"value":{"a":1}}`,
		`{"bead":"b1","op":"patch","hlc":{"wall":1700000000000,"counter":2,"x":1},"value":{"a":1}}`,
		`{"bead":"b1","op":"patch","hlc":{"wall":1700000000000,"counter":2},"value":[1]}`,
		`{"bead":"b1","op":"patch","hlc":{"wall":1700000000000,"counter":2}}`,
		`{"bead":"b1","op":"patch","hlc":{"wall":1700000000000,"counter":2},"value":{"a":1},"agent":"x"}`,
		`{"bead":"b/1","op":"patch","hlc":{"wall":1700000000000,"counter":2},"value":{"a":1}}`,
		`{"bead":"b1","op":"patch","hlc":{"wall":1700000100000,"counter":2},"value":{"a":1}}`,
		`{"bead":"b1","op":"patch","hlc":{"wall":1700000000000,"counter":2},"value":{"a":1},"bead":"b2"}`,
		`[]`,
	} {
		if _, _, err := DecodePayload([]byte(bad), "agent", sent); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", bad, err)
		}
	}
	// Encode and decode are inverse.
	raw, err := EncodePayload("b1", p)
	if err != nil {
		t.Fatal(err)
	}
	if _, q, err := DecodePayload(raw, "agent", sent); err != nil || q.At != p.At || string(q.Value) != string(p.Value) || q.Op != p.Op {
		t.Fatalf("round trip: %v %+v", err, q)
	}
}

// TestOnlyMembersChangeABead: the first patch makes its author and the
// agents it lists the members; a non-member's patches have no effect
// (counted as refused), a member changes the members, and a patch
// refused where it first fell is admitted when a member list that
// arrives later, earlier in the order, names its author. Every order of
// arrival gives the same document, members and count.
func TestOnlyMembersChangeABead(t *testing.T) {
	patches := []Patch{
		withMembers(mustPatch(t, 10, 0, "creator", OpSet, `{"owner":"creator"}`), "qa"),
		mustPatch(t, 11, 0, "mallory", OpPatch, `{"owner":"mallory"}`),
		mustPatch(t, 12, 0, "qa", OpPatch, `{"tests":"ok"}`),
		mustPatch(t, 13, 0, "reviewer", OpPatch, `{"review":"early"}`), // before it is a member
		withMembers(mustPatch(t, 14, 0, "qa", OpPatch, `{}`), "creator", "qa", "reviewer"),
		mustPatch(t, 15, 0, "reviewer", OpPatch, `{"review":"done"}`),
		withMembers(mustPatch(t, 16, 0, "mallory", OpPatch, `{}`), "mallory"), // a non-member cannot join
		mustPatch(t, 17, 0, "mallory", OpSet, `{}`),
	}
	want := `{"owner":"creator","review":"done","tests":"ok"}`
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 50 {
		order := rng.Perm(len(patches))
		d := foldInOrder(t, patches, order)
		if got := string(d.JSON()); got != want {
			t.Fatalf("round %d (order %v): %s, want %s", round, order, got, want)
		}
		if got := fmt.Sprint(d.Members()); got != "[creator qa reviewer]" || d.Refused() != 4 {
			t.Fatalf("round %d: members %s, %d refused; want [creator qa reviewer], 4", round, got, d.Refused())
		}
	}
	// Add reports a refused patch, Admit one before it is sent.
	d := NewDoc()
	if _, err := d.Add(patches[0]); err != nil {
		t.Fatal(err)
	}
	if added, err := d.Add(patches[1]); !added || !errors.Is(err, ErrNotMember) {
		t.Fatalf("non-member patch: added %v, %v", added, err)
	}
	if err := d.Admit(patches[6]); !errors.Is(err, ErrNotMember) {
		t.Fatalf("Admit(non-member): %v", err)
	}
	if err := d.Admit(patches[2]); err != nil {
		t.Fatalf("Admit(member): %v", err)
	}
}

// TestMembersCheck: a members list names 1 to MaxMembers non-empty ids
// and is kept sorted without repeats.
func TestMembersCheck(t *testing.T) {
	base := Patch{At: HLC{Wall: 1}, Agent: "a", Op: OpPatch, Value: []byte(`{}`)}
	for name, tc := range map[string]struct {
		members []string
		want    string // the members kept, or "" for ErrInvalid
	}{
		"sorted":    {[]string{"c", "a", "b", "a"}, "[a b c]"},
		"empty":     {[]string{}, ""},
		"empty id":  {[]string{"a", ""}, ""},
		"long id":   {[]string{strings.Repeat("x", MaxAgentID+1)}, ""},
		"too many":  {make([]string, MaxMembers+1), ""},
		"most kept": {[]string{strings.Repeat("x", MaxAgentID)}, "[" + strings.Repeat("x", MaxAgentID) + "]"},
	} {
		p := base
		p.Members = tc.members
		got, err := p.Check()
		switch {
		case tc.want == "" && !errors.Is(err, ErrInvalid):
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		case tc.want != "" && (err != nil || fmt.Sprint(got.Members) != tc.want):
			t.Errorf("%s: %v %v, want %s", name, err, got.Members, tc.want)
		}
	}
}

// TestHistoryListsChangesThatTookEffect: History lists the newest patches
// that took effect, oldest first, the same whatever the order of arrival,
// without refused ones, at most MaxHistory, with at most 8 names each.
func TestHistoryListsChangesThatTookEffect(t *testing.T) {
	patches := []Patch{
		withMembers(mustPatch(t, 10, 0, "creator", OpSet, `{"review_status":"new"}`), "qa"),
		mustPatch(t, 11, 0, "mallory", OpPatch, `{"owner":"mallory"}`),
		mustPatch(t, 12, 0, "qa", OpPatch, `{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":null}`),
	}
	for _, order := range [][]int{{0, 1, 2}, {2, 1, 0}, {1, 2, 0}} {
		d := NewDoc()
		for _, i := range order {
			_, _ = d.Add(patches[i])
		}
		h := d.History(MaxHistory)
		if len(h) != 2 || h[0].Agent != "creator" || h[1].Agent != "qa" {
			t.Fatalf("order %v: history %+v, want creator's then qa's", order, h)
		}
		if fmt.Sprintf("%v %v %v", h[0].Keys, h[0].Members, h[0].Op) != "[review_status] [qa] set" {
			t.Fatalf("order %v: first change %+v", order, h[0])
		}
		if fmt.Sprintf("%v %v %v", h[1].Keys, h[1].MoreKeys, h[1].Members == nil) != "[a b c d e f g h] 2 true" {
			t.Fatalf("order %v: second change %+v", order, h[1])
		}
	}
	d := NewDoc()
	for i := range MaxHistory + 5 {
		if _, err := d.Add(mustPatch(t, int64(100+i), 0, "a", OpPatch, fmt.Sprintf(`{"n":%d}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	h := d.History(1000)
	if len(h) != MaxHistory || h[0].At.Wall != 105 || h[len(h)-1].At.Wall != int64(100+MaxHistory+4) {
		t.Fatalf("%d changes from %s to %s, want the newest %d", len(h), h[0].At, h[len(h)-1].At, MaxHistory)
	}
}

// foldInOrder adds patches to a new document in the order given. A patch
// may fall before the creator's has arrived, or come from a non-member:
// ErrNotMember is expected, any other error fails the test.
func foldInOrder(t *testing.T, patches []Patch, order []int) *Doc {
	t.Helper()
	d := NewDoc()
	for _, i := range order {
		if _, err := d.Add(patches[i]); err != nil && !errors.Is(err, ErrNotMember) {
			t.Fatal(err)
		}
	}
	return d
}
