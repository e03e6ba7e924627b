package store

import (
	"encoding/json"
	"errors"
	bolt "go.etcd.io/bbolt"
	"slices"
	"strings"
	"testing"
	"time"
)

// fixture records a small history and returns it newest first.
//
//	id  min topic         from  to    conv
//	h1  0   inbound:chat  alice bob   c1
//	h2  1   outbound:chat bob   alice c1
//	h3  2   inbound:tg    carol -     c2
//	h4  3   task:42       alice alice -
//	h5  4   inbound:chat  bob   -     c1
//	h6  4   inbound       dave  alice c3   (same time as h5; ids break the tie)
//	h7  5   inboundx      alice -     -
func fixture(t *testing.T, s *Store) {
	t.Helper()
	rows := []struct {
		id       string
		min      int
		topic    string
		from, to string
		conv     string
	}{
		{"h1", 0, "inbound:chat", "alice", "bob", "c1"},
		{"h2", 1, "outbound:chat", "bob", "alice", "c1"},
		{"h3", 2, "inbound:tg", "carol", "", "c2"},
		{"h4", 3, "task:42", "alice", "alice", ""},
		{"h5", 4, "inbound:chat", "bob", "", "c1"},
		{"h6", 4, "inbound", "dave", "alice", "c3"},
		{"h7", 5, "inboundx", "alice", "", ""},
	}
	// Record out of time order: the store orders by time, not arrival.
	for _, i := range []int{6, 2, 0, 5, 1, 4, 3} {
		r := rows[i]
		m := Message{ID: r.id, Topic: r.topic, From: r.from, To: r.to, ConversationID: r.conv,
			Payload: json.RawMessage(`{"n":` + r.id[1:] + `}`), Time: t0.Add(time.Duration(r.min) * time.Minute)}
		if err := s.Record(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
}

func TestHistoryQueries(t *testing.T) {
	s, _ := open(t)
	fixture(t, s)
	min := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	tests := []struct {
		name string
		q    HistoryQuery
		want []string
	}{
		{"everything newest first", HistoryQuery{}, []string{"h7", "h6", "h5", "h4", "h3", "h2", "h1"}},
		{"agent as from or to", HistoryQuery{Agent: "alice"}, []string{"h7", "h6", "h4", "h2", "h1"}},
		{"agent bob", HistoryQuery{Agent: "bob"}, []string{"h5", "h2", "h1"}},
		{"agent is not a prefix", HistoryQuery{Agent: "ali"}, nil},
		{"unknown agent", HistoryQuery{Agent: "zed"}, nil},
		{"exact topic", HistoryQuery{Topic: "inbound:chat"}, []string{"h5", "h1"}},
		{"exact topic is not a prefix", HistoryQuery{Topic: "inbound"}, []string{"h6"}},
		{"topic prefix", HistoryQuery{Topic: "inbound:*"}, []string{"h5", "h3", "h1"}},
		{"topic prefix without separator", HistoryQuery{Topic: "inbound*"}, []string{"h7", "h6", "h5", "h3", "h1"}},
		{"star alone", HistoryQuery{Topic: "*"}, []string{"h7", "h6", "h5", "h4", "h3", "h2", "h1"}},
		{"conversation", HistoryQuery{ConversationID: "c1"}, []string{"h5", "h2", "h1"}},
		{"since inclusive", HistoryQuery{Since: min(4)}, []string{"h7", "h6", "h5"}},
		{"until exclusive", HistoryQuery{Until: min(2)}, []string{"h2", "h1"}},
		{"since and until", HistoryQuery{Since: min(1), Until: min(4)}, []string{"h4", "h3", "h2"}},
		{"limit", HistoryQuery{Limit: 2}, []string{"h7", "h6"}},
		{"agent and topic", HistoryQuery{Agent: "alice", Topic: "inbound:*"}, []string{"h1"}},
		{"agent and conversation", HistoryQuery{Agent: "bob", ConversationID: "c1"}, []string{"h5", "h2", "h1"}},
		{"topic and conversation", HistoryQuery{Topic: "inbound:chat", ConversationID: "c1"}, []string{"h5", "h1"}},
		{"agent, time window and limit", HistoryQuery{Agent: "alice", Since: min(1), Until: min(5), Limit: 2}, []string{"h6", "h4"}},
		{"topic prefix and window", HistoryQuery{Topic: "inbound:*", Since: min(1), Until: min(4)}, []string{"h3"}},
		{"before cursor", HistoryQuery{Before: "h5"}, []string{"h4", "h3", "h2", "h1"}},
		{"before cursor at a time tie", HistoryQuery{Before: "h6"}, []string{"h5", "h4", "h3", "h2", "h1"}},
		{"before cursor with agent", HistoryQuery{Agent: "alice", Before: "h4"}, []string{"h2", "h1"}},
		{"before cursor with topic prefix", HistoryQuery{Topic: "inbound*", Before: "h6"}, []string{"h5", "h3", "h1"}},
		{"before cursor and until, until tighter", HistoryQuery{Before: "h6", Until: min(2)}, []string{"h2", "h1"}},
		{"before cursor and until, cursor tighter", HistoryQuery{Before: "h2", Until: min(4)}, []string{"h1"}},
		{"before the oldest", HistoryQuery{Before: "h1"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.History(ctx, tt.q)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ids(got), tt.want) {
				t.Errorf("History(%+v) = %v, want %v", tt.q, ids(got), tt.want)
			}
		})
	}
}

func TestHistoryQueryErrors(t *testing.T) {
	s, _ := open(t)
	fixture(t, s)
	tests := []struct {
		name string
		q    HistoryQuery
		want error
	}{
		{"star inside a topic", HistoryQuery{Topic: "in*bound"}, ErrInvalid},
		{"NUL in agent", HistoryQuery{Agent: "a\x00"}, ErrInvalid},
		{"unknown cursor", HistoryQuery{Before: "nope"}, ErrNotFound},
		{"since out of range", HistoryQuery{Since: time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC)}, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := s.History(ctx, tt.q); !errors.Is(err, tt.want) {
				t.Errorf("History: %v, want %v", err, tt.want)
			}
		})
	}
}

func TestHistoryPaging(t *testing.T) {
	s, _ := open(t)
	const n = 53
	var want []string
	for i := range n {
		m := msg("", "inbound:chat")
		m.ID = "p" + string(rune('A'+i%26)) + string(rune('a'+i/26))
		m.From = "alice"
		// Several messages share each timestamp.
		m.Time = t0.Add(time.Duration(i/3) * time.Second)
		if err := s.Record(ctx, m); err != nil {
			t.Fatal(err)
		}
		want = append(want, m.ID)
	}
	all, err := s.History(ctx, HistoryQuery{Limit: n + 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != n {
		t.Fatalf("%d messages, want %d", len(all), n)
	}
	for _, q := range []HistoryQuery{{}, {Agent: "alice"}, {Topic: "inbound:chat"}, {Topic: "inbound:*"}} {
		for _, size := range []int{1, 7, 10, n} {
			var got []string
			cursor := ""
			for page := 0; ; page++ {
				if page > n {
					t.Fatal("paging does not end")
				}
				pq := q
				pq.Limit, pq.Before = size, cursor
				ms, err := s.History(ctx, pq)
				if err != nil {
					t.Fatal(err)
				}
				if len(ms) > size {
					t.Fatalf("page of %d, limit %d", len(ms), size)
				}
				if len(ms) == 0 {
					break
				}
				got = append(got, ids(ms)...)
				cursor = ms[len(ms)-1].ID
			}
			if !slices.Equal(got, ids(all)) {
				t.Errorf("query %+v in pages of %d: %v, want %v", q, size, got, ids(all))
			}
		}
	}
	// Newest first: by time, then id, descending.
	for i := 1; i < len(all); i++ {
		a, b := all[i-1], all[i]
		if a.Time.Before(b.Time) || (a.Time.Equal(b.Time) && a.ID < b.ID) {
			t.Fatalf("%s (%v) before %s (%v)", a.ID, a.Time, b.ID, b.Time)
		}
	}
}

func TestHistoryDefaultLimit(t *testing.T) {
	s, _ := open(t)
	for i := range DefaultHistoryLimit + 5 {
		m := msg("", "t")
		m.Time = t0.Add(time.Duration(i) * time.Millisecond)
		if err := s.Record(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.History(ctx, HistoryQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != DefaultHistoryLimit {
		t.Errorf("%d messages without a limit, want %d", len(got), DefaultHistoryLimit)
	}
}

func TestRecordIdempotent(t *testing.T) {
	s, _ := open(t)
	m := msg("dup", "inbound:chat")
	m.To, m.ConversationID, m.Time = "bob", "c1", t0
	if err := s.Record(ctx, m); err != nil {
		t.Fatal(err)
	}
	before := map[string]int{}
	for _, b := range []string{bucketHistory, bucketHistoryIDs, bucketIdxAgent, bucketIdxTopic, bucketIdxConv} {
		before[b] = countKeys(t, s, b)
	}
	// A redelivery, possibly with a different time, is not a new entry.
	m2 := m
	m2.Time = t0.Add(time.Minute)
	m2.Payload = json.RawMessage(`"changed"`)
	for _, r := range []Message{m, m2} {
		if err := s.Record(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	for b, n := range before {
		if got := countKeys(t, s, b); got != n {
			t.Errorf("%s has %d entries after re-recording, want %d", b, got, n)
		}
	}
	got, err := s.History(ctx, HistoryQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || string(got[0].Payload) != `{"text":"hi"}` || !got[0].Time.Equal(t0) {
		t.Errorf("history %+v, want the first recording only", got)
	}
	if before[bucketIdxAgent] != 2 || before[bucketIdxTopic] != 1 || before[bucketIdxConv] != 1 {
		t.Errorf("index entries %v, want agent 2 (from and to), topic 1, conversation 1", before)
	}
}

// TestRecordAll: one call records a batch as Record would each message:
// a duplicate (in the batch or already recorded) keeps the first entry, an
// invalid message is left out with its error, and the rest is recorded.
func TestRecordAll(t *testing.T) {
	s, _ := open(t)
	at := func(id string, min int) Message {
		m := msg(id, "inbound:chat")
		m.Time = t0.Add(time.Duration(min) * time.Minute)
		return m
	}
	if err := s.Record(ctx, at("a", 0)); err != nil {
		t.Fatal(err)
	}
	bad := at("bad", 1)
	bad.Payload = nil
	dup := at("b", 3)
	dup.Payload = json.RawMessage(`"changed"`)
	err := s.RecordAll(ctx, []Message{at("a", 5), at("b", 2), bad, dup, at("c", 4)})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "bad") {
		t.Fatalf("RecordAll error %v, want the invalid message's", err)
	}
	got, err := s.History(ctx, HistoryQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"c", "b", "a"}; !slices.Equal(ids(got), want) {
		t.Fatalf("history %v, want %v", ids(got), want)
	}
	if string(got[1].Payload) != `{"text":"hi"}` || !got[2].Time.Equal(t0) {
		t.Errorf("history %+v, want the first recording of each id", got)
	}
	if n := countKeys(t, s, bucketIdxTopic); n != 3 {
		t.Errorf("topic index has %d entries, want 3", n)
	}
	if err := s.RecordAll(ctx, nil); err != nil {
		t.Errorf("RecordAll(nil) = %v", err)
	}
}

// TestHistoryUsesIndexes checks that a query by agent, topic or
// conversation reads only its index's records: a corrupt record of another
// agent, topic and conversation breaks a full scan but not those queries.
func TestHistoryUsesIndexes(t *testing.T) {
	s, _ := open(t)
	fixture(t, s)
	// Corrupt h3 (carol, inbound:tg, c2) in the primary bucket.
	if err := s.db.Update(func(tx *bolt.Tx) error {
		pk := tx.Bucket([]byte(bucketHistoryIDs)).Get([]byte("h3"))
		return tx.Bucket([]byte(bucketHistory)).Put(pk, []byte{formatVersion, '{'})
	}); err != nil {
		t.Fatal(err)
	}
	_, err := s.History(ctx, HistoryQuery{})
	var ce *CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.Bucket != bucketHistory {
		t.Fatalf("full scan over a corrupt record: %v, want a CorruptError in %s", err, bucketHistory)
	}
	if !strings.Contains(err.Error(), "h3") && !strings.Contains(err.Error(), "6833") { // key is hex: "h3" = 6833
		t.Errorf("error %q does not name the key", err)
	}
	for _, q := range []HistoryQuery{{Agent: "alice"}, {Topic: "inbound:chat"}, {ConversationID: "c1"}, {Topic: "outbound:*"}} {
		if _, err := s.History(ctx, q); err != nil {
			t.Errorf("History(%+v) read outside its index: %v", q, err)
		}
	}
	if _, err := s.History(ctx, HistoryQuery{Agent: "carol"}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("query that reads the corrupt record: %v, want ErrCorrupt", err)
	}
}
