package pubsub

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// memArchive is an Archive in memory, for tests.
type memArchive struct {
	mu   sync.Mutex
	msgs []KeptMessage
	keys map[string]bool
}

func newMemArchive() *memArchive { return &memArchive{keys: map[string]bool{}} }

func (a *memArchive) Keep(_ context.Context, m KeptMessage) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := m.Family + "\x00" + m.Key
	if a.keys[k] {
		return nil
	}
	a.keys[k] = true
	a.msgs = append(a.msgs, m)
	slices.SortStableFunc(a.msgs, func(x, y KeptMessage) int {
		if c := x.Time.Compare(y.Time); c != 0 {
			return c
		}
		return strings.Compare(x.Key, y.Key)
	})
	return nil
}

func (a *memArchive) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.msgs)
}

// Page uses the index of the next message as its cursor (enough for
// tests: nothing is deleted).
func (a *memArchive) Page(_ context.Context, q ArchiveQuery) (ArchivePage, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	start := 0
	if q.After != "" {
		if err := json.Unmarshal([]byte(q.After), &start); err != nil {
			return ArchivePage{}, err
		}
	}
	var p ArchivePage
	for i := start; i < len(a.msgs); i++ {
		m := a.msgs[i]
		if m.Family != q.Family || m.Time.Before(q.Since) || !q.Until.IsZero() && !m.Time.Before(q.Until) || q.Match != nil && !q.Match(m.Topic) {
			continue
		}
		if len(p.Messages) == q.Limit {
			p.Next = string(must(json.Marshal(i)))
			break
		}
		p.Messages = append(p.Messages, m)
	}
	return p, nil
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// memPositions is Positions in memory, for at most max names (0: no
// bound).
type memPositions struct {
	mu  sync.Mutex
	m   map[string][]byte
	max int
}

func (p *memPositions) SavePosition(_ context.Context, name string, v []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string][]byte{}
	}
	if _, ok := p.m[name]; !ok && p.max > 0 && len(p.m) >= p.max {
		return ErrTooManyDurables
	}
	p.m[name] = slices.Clone(v)
	return nil
}

func (p *memPositions) ForgetPosition(_ context.Context, name string) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.m[name]
	delete(p.m, name)
	return ok, nil
}

func (p *memPositions) ListPositions(context.Context) ([]SavedPosition, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []SavedPosition
	for _, name := range slices.Sorted(maps.Keys(p.m)) {
		out = append(out, SavedPosition{Name: name, Bytes: len(p.m[name])})
	}
	return out, nil
}

func (p *memPositions) Position(_ context.Context, name string) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[name], nil
}

// keptAt returns a signed topic message as a keeper keeps it.
func keptAt(t testing.TB, s *sign.Signer, topic string, at time.Time, n int) KeptMessage {
	t.Helper()
	e, err := protocol.NewEnvelope(protocol.TypeNotify, &protocol.Recipient{Broadcast: true, Topic: topic}, map[string]int{"n": n})
	if err != nil {
		t.Fatal(err)
	}
	e.Timestamp = protocol.FormatTime(at)
	body, sig, err := protocol.Seal(s, e)
	if err != nil {
		t.Fatal(err)
	}
	return KeptMessage{Family: Family(topic), Topic: topic, Key: messageKey(e.ID, s.ID()), Time: at.Truncate(time.Millisecond), Data: append(sig, body...)}
}
