package bus

import "sync"

// recentMeshIDs bounds the bus's memory of mesh message ids (about 100
// bytes each). A message whose id was forgotten before all its copies came
// back (more than this many mesh messages in between) may be delivered
// locally twice: at least once, as the bus promises.
const recentMeshIDs = 8192

// recentIDs is a bounded set of keys that forgets the oldest first.
type recentIDs struct {
	mu   sync.Mutex
	set  map[string]struct{}
	ring []string
	next int
}

func newRecentIDs(n int) *recentIDs {
	return &recentIDs{set: make(map[string]struct{}, n), ring: make([]string, n)}
}

// add records key and reports whether it was new.
func (r *recentIDs) add(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.set[key]; ok {
		return false
	}
	if old := r.ring[r.next]; old != "" {
		delete(r.set, old)
	}
	r.ring[r.next] = key
	r.next = (r.next + 1) % len(r.ring)
	r.set[key] = struct{}{}
	return true
}

// meshKey identifies a mesh message: ids are chosen by their authors, so
// one author cannot shadow another's message by reusing its id.
func meshKey(author, id string) string { return author + "\x00" + id }
