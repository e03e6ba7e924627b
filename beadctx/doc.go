// Package beadctx is the pure part of seed 004's shared bead context: a
// JSON object document that the agents working on a bead share with no
// central store, each member folding the same signed patches to the same
// document. It has no host, no network and no goroutines; node carries the
// patches over the mesh.
//
// # The merge rule
//
// A change is a Patch: an RFC 7396 JSON merge patch (OpPatch) or a whole
// new document (OpSet), stamped with a hybrid logical clock (HLC: wall
// milliseconds and a counter, see Clock) and its author's agent id. Every
// member orders the patches of a bead by (HLC, agent id) and applies them
// in that order to the empty document {}; a patch that arrives late is
// put in its place and the document recomputed from the oldest state
// kept. Whoever receives the same set of patches computes the same
// document, byte for byte, whatever the order of arrival: concurrent
// patches of two agents converge, and of two writes to the same member the
// one with the later (HLC, agent id) wins. Patch values are kept in RFC
// 8785 canonical form, so the bytes an author applies are those every
// member receives.
//
// A patch whose result would exceed MaxDocBytes has no effect (every
// member skips it the same way, since the check depends only on the
// document before it and the patch). Two patches with the same (HLC,
// agent id) are one patch: the one whose (op, value) sorts first is kept.
//
// # Members
//
// Only a bead's members change it. The first patch in (HLC, agent id)
// order creates the bead: its author and the agents its Members lists
// become the members. A later patch takes effect only if its author is a
// member at its place in the order; if it carries Members, they replace
// the members (so a member adds, removes, or leaves). A patch by anyone
// else is kept in the log (a member list that arrives late, earlier in
// the order, may still admit it) but has no effect and is counted
// (Refused). Membership is part of the state the patches fold to, so
// every member, applying the same patches in the same order, admits and
// refuses the same ones. Reading is not restricted: the topic is public
// to the mesh, and patches are signed, not encrypted. A bead is claimed
// by whoever's patch sorts first; a backdated patch (its HLC may lie up
// to MaxSkew before its signed envelope time) can claim a bead created
// less than that long ago.
//
// # Bounds
//
// A document holds at most MaxDocBytes (64 KiB) of JSON, a patch value at
// most MaxPatchBytes (64 KiB). A members list names at most MaxMembers
// (64) agents, so a bead has at most 65 members. History lists at most
// MaxHistory (20) changes. A bead keeps its MaxPatches (1024) newest
// patches; older ones are folded into a base document and forgotten, and
// a patch older than the newest folded one is refused (ErrTooLate): such
// a patch would have to be applied before the base, which is gone.
// Members converge as long as none receives a patch later than
// MaxPatches newer ones. Refused patches occupy the log like others. A document is an immutable tree (a merge copies
// only the objects on the paths it changes), so a late patch costs one
// replay of the log kept (BenchmarkLatePatch: 38 ms for a 60 KiB
// document and 1,024 patches on a 2-core machine), an in-order one a
// single merge. A node follows at most MaxBeads (64) beads. An
// HLC's wall time must lie within MaxSkew (one minute, plus one second of
// the envelope timestamp's resolution) of the signed envelope time that
// carries it (CheckStamp), a rule that depends only on the message, so
// every member accepts or refuses a patch alike; a Clock adopts a remote
// HLC only within MaxSkew of its own wall clock.
package beadctx
