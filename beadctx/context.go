package beadctx

import (
	"bytes"
	"cmp"
	"fmt"
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
	tree  any // Value parsed, set by Check
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
	return bytes.Compare(a.Value, b.Value)
}

// apply returns doc with p (Check'ed) applied, and true; or doc as it
// is, and false, when the result would be larger than MaxDocBytes.
func apply(doc any, p Patch) (any, bool) {
	next := p.tree
	if next == nil { // not Check'ed: has no effect
		return doc, false
	}
	if p.Op == OpPatch {
		next = merge(doc, p.tree)
	}
	if sizeOf(next) > MaxDocBytes {
		return doc, false
	}
	return next, true
}

// Doc is one bead's document and its ordered patch log. It is not safe
// for concurrent use.
type Doc struct {
	base    any     // the document after the folded patches
	folded  *Patch  // the newest folded patch; nil when none
	log     []Patch // the kept patches, in order, all after folded
	cur     any     // base with log applied
	curJSON []byte  // cur encoded; nil until asked for after a change
	agents  map[string]struct{}
}

// NewDoc returns the empty document {}.
func NewDoc() *Doc {
	empty := newObject(map[string]member{})
	return &Doc{base: empty, cur: empty, agents: map[string]struct{}{}}
}

// Fits reports whether p (Check'ed) applied to the document now would
// keep it within MaxDocBytes.
func (d *Doc) Fits(p Patch) bool {
	_, ok := apply(d.cur, p)
	return ok
}

// Add puts p in its place and updates the document, and reports whether
// the patch was new. A patch already held is not new; one older than the
// history kept is refused with ErrTooLate. p must have passed Check.
func (d *Doc) Add(p Patch) (bool, error) {
	if d.folded != nil && compare(p, *d.folded) <= 0 {
		return false, fmt.Errorf("%w: %s by %s", ErrTooLate, p.At, p.Agent)
	}
	i, found := slices.BinarySearchFunc(d.log, p, compare)
	if found {
		if tieBreak(p, d.log[i]) >= 0 {
			return false, nil
		}
		d.log[i] = p
		d.recompute()
		return true, nil
	}
	d.log = slices.Insert(d.log, i, p)
	if len(d.agents) < maxAgents {
		d.agents[p.Agent] = struct{}{}
	}
	if i == len(d.log)-1 {
		d.cur, _ = apply(d.cur, p)
		d.curJSON = nil
	} else {
		d.recompute()
	}
	if len(d.log) > MaxPatches {
		d.fold(len(d.log) - MaxPatches)
	}
	return true, nil
}

// maxAgents bounds the authors a document lists.
const maxAgents = 256

// fold folds the n oldest patches into the base.
func (d *Doc) fold(n int) {
	for _, p := range d.log[:n] {
		d.base, _ = apply(d.base, p)
	}
	last := d.log[n-1]
	d.folded = &last
	d.log = slices.Delete(d.log, 0, n)
}

func (d *Doc) recompute() {
	doc := d.base
	for _, p := range d.log {
		doc, _ = apply(doc, p)
	}
	d.cur, d.curJSON = doc, nil
}

// JSON returns the document: objects with their members sorted by name,
// no insignificant whitespace. The caller must not modify it.
func (d *Doc) JSON() []byte {
	if d.curJSON == nil {
		d.curJSON = encodeTree(d.cur)
	}
	return d.curJSON
}

// Version returns the (HLC, agent) of the newest patch applied, zero
// when there is none.
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

// Agents returns the authors of the document's patches, sorted (at most
// 256 are listed).
func (d *Doc) Agents() []string {
	out := make([]string, 0, len(d.agents))
	for a := range d.agents {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}
