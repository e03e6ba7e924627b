package beadctx

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"slices"

	"github.com/meshagent/meshagent/sign"
)

// Bounds of shared bead contexts (see the package doc).
const (
	// MaxDocBytes bounds a document's JSON.
	MaxDocBytes = 64 << 10
	// MaxPatchBytes bounds a patch's value.
	MaxPatchBytes = 64 << 10
	// MaxPatches bounds the patches a document keeps in order; older ones
	// are folded into its base.
	MaxPatches = 1024
	// MaxBeads bounds the beads a node follows.
	MaxBeads = 64
	// MaxBeadID bounds a bead id, in bytes.
	MaxBeadID = 128
	// MaxMembers bounds a bead's members, and the list a patch sets.
	MaxMembers = 64
	// MaxAgentID bounds a member's agent id, in bytes.
	MaxAgentID = 256
)

// Op is what a patch does.
type Op string

// The ops.
const (
	// OpPatch merges its value (an object) into the document (RFC 7396).
	OpPatch Op = "patch"
	// OpSet replaces the document with its value (an object).
	OpSet Op = "set"
)

var beadIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// CheckBeadID checks a bead id: 1 to MaxBeadID bytes of ASCII letters,
// digits, '.', '_' and '-', starting with a letter or digit (so that it
// is one path segment and a literal topic name).
func CheckBeadID(id string) error {
	if len(id) == 0 || len(id) > MaxBeadID || !beadIDRe.MatchString(id) {
		return fmt.Errorf("%w: bead id %q: 1 to %d ASCII letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalid, id, MaxBeadID)
	}
	return nil
}

// Patch is one change to a bead's document.
type Patch struct {
	// At and Agent order the patch: by At, then by Agent.
	At    HLC
	Agent string
	Op    Op
	// Value is a JSON object: the merge patch (OpPatch) or the new
	// document (OpSet).
	Value []byte
	// Members, when not nil, replaces the bead's members (see the
	// package doc, Members): 1 to MaxMembers agent ids, kept sorted
	// without repeats by Check. The first patch of a bead makes its
	// author a member in any case.
	Members []string
	tree    any // Value parsed, set by Check
}

// Check validates p and returns it with its value in RFC 8785 canonical
// form, the form every member applies.
func (p Patch) Check() (Patch, error) {
	switch {
	case p.Agent == "":
		return p, fmt.Errorf("%w: patch without an agent", ErrInvalid)
	case p.At.IsZero():
		return p, fmt.Errorf("%w: patch without a clock", ErrInvalid)
	case p.Op != OpPatch && p.Op != OpSet:
		return p, fmt.Errorf("%w: op %q (want %q or %q)", ErrInvalid, p.Op, OpPatch, OpSet)
	case len(p.Value) > MaxPatchBytes:
		return p, fmt.Errorf("%w: patch value of %d bytes (at most %d)", ErrTooLarge, len(p.Value), MaxPatchBytes)
	}
	if p.Members != nil {
		if len(p.Members) == 0 || len(p.Members) > MaxMembers {
			return p, fmt.Errorf("%w: a members list names 1 to %d agents, not %d", ErrInvalid, MaxMembers, len(p.Members))
		}
		for _, m := range p.Members {
			if m == "" || len(m) > MaxAgentID {
				return p, fmt.Errorf("%w: member %q: an agent id of 1 to %d bytes", ErrInvalid, m, MaxAgentID)
			}
		}
		p.Members = slices.Compact(slices.Sorted(slices.Values(p.Members)))
	}
	v := bytes.TrimSpace(p.Value)
	if len(v) == 0 || v[0] != '{' {
		return p, fmt.Errorf("%w: the %s value must be a JSON object", ErrInvalid, p.Op)
	}
	c, err := sign.Canonicalize(v)
	if err != nil {
		return p, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if p.tree, err = parse(c); err != nil {
		return p, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	p.Value = c
	return p, nil
}

// compare orders patches by (At, Agent), then by (Op, Value) for two
// with the same key (one of which Add keeps).
func compare(a, b Patch) int {
	if c := a.At.Compare(b.At); c != 0 {
		return c
	}
	return cmp.Compare(a.Agent, b.Agent)
}

func tieBreak(a, b Patch) int {
	if c := cmp.Compare(a.Op, b.Op); c != 0 {
		return c
	}
	if c := bytes.Compare(a.Value, b.Value); c != 0 {
		return c
	}
	// A list sorts before none; lists compare member by member.
	if an, bn := a.Members == nil, b.Members == nil; an != bn {
		if an {
			return 1
		}
		return -1
	}
	return slices.Compare(a.Members, b.Members)
}

// state is what the patches fold to: the document and the members. A
// nil members means no patch was applied yet.
type state struct {
	doc     any
	members []string // sorted
}

// outcome is what applying a patch did.
type outcome int

const (
	applied   outcome = iota
	tooLarge          // the document would exceed MaxDocBytes: no effect
	notMember         // the author is not a member: no effect
)

// apply returns st with p (Check'ed) applied, or st as it is when p has
// no effect: its author is not a member (when the bead has members), or
// the document would be larger than MaxDocBytes. The first patch applied
// makes its author a member, with the members it lists; a later one by a
// member replaces the members when it lists them.
func apply(st state, p Patch) (state, outcome) {
	if p.tree == nil { // not Check'ed: has no effect
		return st, tooLarge
	}
	members := st.members
	switch {
	case members == nil:
		members = slices.Compact(slices.Sorted(slices.Values(append([]string{p.Agent}, p.Members...))))
	case !isMember(members, p.Agent):
		return st, notMember
	case p.Members != nil:
		members = p.Members
	}
	next := p.tree
	if p.Op == OpPatch {
		next = merge(st.doc, p.tree)
	}
	if sizeOf(next) > MaxDocBytes {
		return st, tooLarge
	}
	return state{doc: next, members: members}, applied
}

func isMember(members []string, agent string) bool {
	_, ok := slices.BinarySearch(members, agent)
	return ok
}

// Doc is one bead's document and its ordered patch log. It is not safe
// for concurrent use.
type Doc struct {
	base        state     // the state after the folded patches
	baseRefused int       // folded patches refused as not by a member
	folded      *Patch    // the newest folded patch; nil when none
	log         []Patch   // the kept patches, in order, all after folded
	outs        []outcome // what each patch of log did, at its place
	cur         state     // base with log applied
	refused     int       // patches refused as not by a member, folded or not
	curJSON     []byte    // cur.doc encoded; nil until asked for after a change
}

// NewDoc returns the empty document {}, with no members yet.
func NewDoc() *Doc {
	empty := state{doc: newObject(map[string]member{})}
	return &Doc{base: empty, cur: empty}
}

// Admit reports whether p (Check'ed) applied to the document now would
// take effect: ErrNotMember when its author is not a member of a bead
// that has members, ErrTooLarge when the document would exceed
// MaxDocBytes.
func (d *Doc) Admit(p Patch) error {
	switch _, out := apply(d.cur, p); out {
	case notMember:
		return fmt.Errorf("%w: %s is not one of the bead's %d members", ErrNotMember, p.Agent, len(d.cur.members))
	case tooLarge:
		return fmt.Errorf("%w: the context would exceed %d bytes", ErrTooLarge, MaxDocBytes)
	}
	return nil
}

// Add puts p in its place and updates the document, and reports whether
// the patch was new. A patch already held is not new; one older than the
// history kept is refused with ErrTooLate. A new patch whose author is
// not a member where it falls in the order is kept (a member list that
// arrives late may still admit it) but has no effect: Add reports it new
// with ErrNotMember. p must have passed Check.
func (d *Doc) Add(p Patch) (bool, error) {
	if d.folded != nil && compare(p, *d.folded) <= 0 {
		return false, fmt.Errorf("%w: %s by %s", ErrTooLate, p.At, p.Agent)
	}
	i, found := slices.BinarySearchFunc(d.log, p, compare)
	var out outcome
	switch {
	case found && tieBreak(p, d.log[i]) >= 0:
		return false, nil
	case found:
		d.log[i] = p
		out = d.recompute(i)
	default:
		d.log = slices.Insert(d.log, i, p)
		d.outs = slices.Insert(d.outs, i, applied)
		if i == len(d.log)-1 {
			d.cur, out = apply(d.cur, p)
			d.outs[i] = out
			if out == notMember {
				d.refused++
			}
			d.curJSON = nil
		} else {
			out = d.recompute(i)
		}
	}
	if len(d.log) > MaxPatches {
		d.fold(len(d.log) - MaxPatches)
	}
	if out == notMember {
		return true, fmt.Errorf("%w: %s by %s", ErrNotMember, p.At, p.Agent)
	}
	return true, nil
}

// fold folds the n oldest patches into the base.
func (d *Doc) fold(n int) {
	for _, p := range d.log[:n] {
		var out outcome
		if d.base, out = apply(d.base, p); out == notMember {
			d.baseRefused++
		}
	}
	last := d.log[n-1]
	d.folded = &last
	d.log = slices.Delete(d.log, 0, n)
	d.outs = slices.Delete(d.outs, 0, n)
}

// recompute replays the log on the base and returns the outcome of the
// patch at index i.
func (d *Doc) recompute(i int) outcome {
	st, refused, at := d.base, d.baseRefused, applied
	for j, p := range d.log {
		var out outcome
		st, out = apply(st, p)
		d.outs[j] = out
		if out == notMember {
			refused++
		}
		if j == i {
			at = out
		}
	}
	d.cur, d.refused, d.curJSON = st, refused, nil
	return at
}

// JSON returns the document: objects with their members sorted by name,
// no insignificant whitespace. The caller must not modify it.
func (d *Doc) JSON() []byte {
	if d.curJSON == nil {
		d.curJSON = encodeTree(d.cur.doc)
	}
	return d.curJSON
}

// Version returns the (HLC, agent) of the newest patch held, zero when
// there is none.
func (d *Doc) Version() (HLC, string) {
	switch {
	case len(d.log) > 0:
		p := d.log[len(d.log)-1]
		return p.At, p.Agent
	case d.folded != nil:
		return d.folded.At, d.folded.Agent
	}
	return HLC{}, ""
}

// Patches returns how many patches the document keeps in its log.
func (d *Doc) Patches() int { return len(d.log) }

// Members returns the bead's members, sorted: the agents whose patches
// take effect (at most MaxMembers). It is empty before the first patch.
func (d *Doc) Members() []string { return slices.Clone(d.cur.members) }

// Refused returns how many patches held or folded had no effect because
// their author was not a member.
func (d *Doc) Refused() int { return d.refused }

// MaxHistory bounds the changes History lists.
const MaxHistory = 20

// maxChangeKeys bounds the member names a Change lists.
const maxChangeKeys = 8

// Change is a patch that took effect, as History lists it.
type Change struct {
	// At and Agent are the patch's place in the order and its author.
	At    HLC
	Agent string
	Op    Op
	// Keys are the top-level member names the patch sets (or, for
	// OpPatch, removes), sorted: at most 8 of them.
	Keys []string
	// MoreKeys is how many names Keys leaves out.
	MoreKeys int
	// Members is the members list the patch set; nil when it left them.
	Members []string
}

// History returns the newest n (at most MaxHistory) patches held that
// took effect, oldest first. Patches folded into the base are not
// listed.
func (d *Doc) History(n int) []Change {
	n = min(n, MaxHistory)
	var out []Change
	for j := len(d.log) - 1; j >= 0 && len(out) < n; j-- {
		if d.outs[j] != applied {
			continue
		}
		p := d.log[j]
		c := Change{At: p.At, Agent: p.Agent, Op: p.Op, Members: slices.Clone(p.Members)}
		if o, ok := p.tree.(*object); ok {
			keys := slices.Sorted(maps.Keys(o.members))
			if len(keys) > maxChangeKeys {
				c.MoreKeys = len(keys) - maxChangeKeys
				keys = keys[:maxChangeKeys]
			}
			c.Keys = keys
		}
		out = append(out, c)
	}
	slices.Reverse(out)
	return out
}
