package lobby

import (
	"strings"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// New lobby agent ids are printable ASCII, and none may look like one
// already registered. Unicode offers many letters that render like ASCII
// ones (Cyrillic "о", fullwidth "ｏ", mathematical "𝗈"…); rather than chase
// them with a confusables table, a new id must be ASCII from '!' to '~',
// without '/' (which separates an agent id from its client in the
// "<relay id>/lobby:<agent_id>" names mesh agents authorize) and '*' (the
// wildcard of those names). Within ASCII, an id is refused when its
// skeleton equals a registered id's: the skeleton lower-cases the id and
// folds the look-alikes of Unicode's confusables list (UTS #39) that are
// ASCII: "0" as "o"; "1", "i" and "|" as "l"; "rn" as "m"; "vv" as "w".
// So with "rogue_007" registered, "Rogue_007", "rogue_OO7" and
// "rogue_0O7" are refused, and "rogue_008" is not.
//
// Ids registered before this rule keep working (re-registering and
// re-attaching with their token); they take part in the skeleton check.

// checkNewAgentID applies the rules above to an id not yet registered.
// The caller holds l.regMu.
func (l *Lobby) checkNewAgentID(id string) *protocol.Error {
	for i := 0; i < len(id); i++ {
		if b := id[i]; b < '!' || b > '~' || b == '/' || b == '*' {
			return protocol.Errorf(protocol.CodeInvalidMessage,
				"agent_id %q: a new agent_id must be printable ASCII without '/' or '*' (ids that only look like another are refused)", id)
		}
	}
	sk := idSkeleton(id)
	if sk == idSkeleton(l.cfg.ID) {
		return protocol.Errorf(protocol.CodeInvalidMessage, "agent_id %q looks like the lobby's own id %q; choose another", id, l.cfg.ID)
	}
	if other, ok := l.skeletons[sk]; ok && other != id {
		return protocol.Errorf(protocol.CodeInvalidMessage, "agent_id %q looks like the registered agent %q (ids equal up to case, 0/O, 1/l/I, rn/m, vv/w are refused); choose another", id, other)
	}
	return nil
}

// idSkeleton folds an id's ASCII look-alikes (see checkNewAgentID).
// Non-ASCII runes are lower-cased and kept.
func idSkeleton(id string) string {
	var b strings.Builder
	b.Grow(len(id))
	for _, r := range strings.ToLower(id) {
		switch r {
		case '0':
			r = 'o'
		case '1', 'i', '|':
			r = 'l'
		}
		b.WriteRune(r)
	}
	return strings.NewReplacer("rn", "m", "vv", "w").Replace(b.String())
}

// noteSkeleton records a registered id's skeleton; the first id keeps it.
// The caller holds l.regMu (or owns l, in New).
func (l *Lobby) noteSkeleton(id string) {
	if _, ok := l.skeletons[idSkeleton(id)]; !ok {
		l.skeletons[idSkeleton(id)] = id
	}
}

// normalizeAgentID returns a mesh agent id in its peer ID form, and any
// other id unchanged.
func normalizeAgentID(s string) string {
	if id, err := sign.ParseAgentID(s); err == nil {
		return id.String()
	}
	return s
}
