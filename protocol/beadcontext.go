package protocol

import "encoding/json"

// BeadContext is a shared bead context (seed 004) as a member sees it:
// the document its agents share, who wrote it, and the newest patch
// folded in. The local API (mesh.context*, GET/POST/PATCH
// /api/v1/beads/{bead_id}/context) answers with it.
type BeadContext struct {
	// BeadID is the bead.
	BeadID string `json:"bead_id"`
	// CollaboratingAgents are the bead's members, sorted: the agents
	// whose changes take effect (the first change's author and those it
	// named, then as members changed them; at most 65). Empty before the
	// first change.
	CollaboratingAgents []string `json:"collaborating_agents"`
	// SharedContext is the document, a JSON object.
	SharedContext json.RawMessage `json:"shared_context"`
	// Version names the newest patch folded in; zero when there is none.
	Version BeadVersion `json:"version"`
	// Patches is how many patches the member keeps in order.
	Patches int `json:"patches"`
	// Refused is how many patches had no effect because their author
	// was not a member, among those held and folded.
	Refused int `json:"refused"`
	// MessageHistory lists the newest changes that took effect (at most
	// 20, oldest first), in seed 004's member names.
	MessageHistory []BeadChange `json:"message_history"`
}

// BeadChange is one change to a bead context as its message_history
// lists it (seed 004's {"from","to","subject","timestamp"}).
type BeadChange struct {
	// From is the author's agent id.
	From string `json:"from"`
	// To is the bead's topic, beadctx:<bead_id>: a change goes to all
	// its members.
	To string `json:"to"`
	// Subject says what changed: "set" or "patch" and the top-level
	// members it wrote (at most 8 names of at most 64 bytes), and
	// "members: N" when it set the members; at most 256 bytes.
	Subject string `json:"subject"`
	// Timestamp is the change's hybrid logical clock wall time, RFC 3339
	// in UTC with milliseconds.
	Timestamp string `json:"timestamp"`
}

// BeadVersion is a patch's place in a bead context's order: its hybrid
// logical clock (wall milliseconds, counter) and its author.
type BeadVersion struct {
	Wall    int64  `json:"wall"`
	Counter uint32 `json:"counter"`
	Agent   string `json:"agent,omitempty"`
}
