package protocol

import "encoding/json"

// BeadContext is a shared bead context (seed 004) as a member sees it:
// the document its agents share, who wrote it, and the newest patch
// folded in. The local API (mesh.context*, GET/POST/PATCH
// /api/v1/beads/{bead_id}/context) answers with it.
type BeadContext struct {
	// BeadID is the bead.
	BeadID string `json:"bead_id"`
	// CollaboratingAgents are the authors of the patches this member
	// holds, sorted (at most 256).
	CollaboratingAgents []string `json:"collaborating_agents"`
	// SharedContext is the document, a JSON object.
	SharedContext json.RawMessage `json:"shared_context"`
	// Version names the newest patch folded in; zero when there is none.
	Version BeadVersion `json:"version"`
	// Patches is how many patches the member keeps in order.
	Patches int `json:"patches"`
}

// BeadVersion is a patch's place in a bead context's order: its hybrid
// logical clock (wall milliseconds, counter) and its author.
type BeadVersion struct {
	Wall    int64  `json:"wall"`
	Counter uint32 `json:"counter"`
	Agent   string `json:"agent,omitempty"`
}
