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
}

// BeadVersion is a patch's place in a bead context's order: its hybrid
// logical clock (wall milliseconds, counter) and its author.
type BeadVersion struct {
	Wall    int64  `json:"wall"`
	Counter uint32 `json:"counter"`
	Agent   string `json:"agent,omitempty"`
}
