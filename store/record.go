package store

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// Message is one bus message as the store keeps it: in the outbox while it
// waits for delivery, in the dead-letter queue after the last retry, and in
// history once it has been recorded.
type Message struct {
	// ID is unique. Enqueue and Record generate one with NewID when it is
	// empty.
	ID string
	// Topic is the bus topic; it must not be empty.
	Topic string
	// From is the sending agent or client id.
	From string
	// To is the addressed agent, if any.
	To string
	// ConversationID groups the messages of one conversation, if any.
	ConversationID string
	// Payload is the message body. It must be valid JSON, which the store
	// does not parse again (its callers decoded it; a record whose
	// payload is not JSON reads back as a *CorruptError); its bytes are
	// kept exactly as given (no re-encoding), so signed payloads survive.
	Payload json.RawMessage
	// Metadata is optional; when set it must be valid JSON (not parsed
	// either).
	Metadata json.RawMessage
	// Time is when the message was sent; the store's clock is used when it
	// is zero. Times are returned in UTC.
	Time time.Time
	// Attempts counts failed deliveries (bumped by Retry).
	Attempts int
	// LastError is the error of the last failed delivery.
	LastError string
	// NextAttempt is when the outbox delivers the message next (set by
	// Enqueue to now, moved by Retry). It is zero outside the outbox.
	NextAttempt time.Time
	// Expires, when set, is when the outbox stops waiting to deliver the
	// message (the bus dead-letters it then). Replay clears it: a replayed
	// message starts afresh.
	Expires time.Time
	// Queue names the outbox queue the message waits in: "" is the bus's,
	// read by Due, NextDue, Wake and Pending; another name is read by
	// DueIn, NextDueIn, WakeIn and PendingIn. A dead letter keeps it, so
	// that Replay puts the message back where it came from.
	Queue string
	// Left is when the message's recipient first fetched it and left it
	// for later (MarkLeft); zero until then. EnqueueDisplacing lets a
	// message that finds its recipient's bound reached take the place of
	// messages left long enough.
	Left time.Time
	// Pool names the part of its named queue the message is counted in,
	// for Bounds.PoolBytes (a mailbox counts deposits from senders unknown
	// to their recipient in one); empty: none.
	Pool string
}

// DeadLetter is a message whose delivery was given up, with why and when.
type DeadLetter struct {
	Message
	// Reason says why the message was dead-lettered.
	Reason string
	// DeadAt is when it was dead-lettered.
	DeadAt time.Time
}

// Registration is a lobby registration (seed 000 §4): an agent, the auth
// token the lobby issued it, and its capability objects.
type Registration struct {
	// AgentID identifies the registered agent.
	AgentID string
	// Token is the auth token. It is only an input: the store keeps its
	// SHA-256, so a Registration read back has an empty Token.
	Token string
	// Capabilities is the agent's capability list, as JSON.
	Capabilities json.RawMessage
	// RegisteredAt is when the agent registered; the store's clock is used
	// when it is zero.
	RegisteredAt time.Time
}

// formatVersion is the first byte of every stored value.
const formatVersion byte = 1

// MaxErrorText is the longest LastError or dead-letter reason kept, in
// bytes; longer texts are cut (at a UTF-8 boundary) so that an error string
// cannot grow a record past the size limit.
const MaxErrorText = 4096

// clip cuts s to MaxErrorText bytes without splitting a UTF-8 sequence.
func clip(s string) string {
	if len(s) <= MaxErrorText {
		return s
	}
	i := MaxErrorText
	// s[i] is the first byte cut; while it continues a rune, cut that rune.
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

// maxIDLen bounds ids and indexed strings so that keys stay small
// (bbolt's limit is 32 KiB).
const maxIDLen = 1024

// msgRecord is the stored form of a Message (and of a DeadLetter).
// []byte fields are base64 in JSON, which keeps payload bytes verbatim.
type msgRecord struct {
	ID             string `json:"id"`
	Topic          string `json:"topic"`
	From           string `json:"from,omitempty"`
	To             string `json:"to,omitempty"`
	ConversationID string `json:"conv,omitempty"`
	Payload        []byte `json:"payload"`
	Metadata       []byte `json:"meta,omitempty"`
	Time           int64  `json:"time"`
	Attempts       int    `json:"attempts,omitempty"`
	LastError      string `json:"lastError,omitempty"`
	Seq            uint64 `json:"seq,omitempty"`
	Next           int64  `json:"next,omitempty"`
	Reason         string `json:"reason,omitempty"`
	DeadAt         int64  `json:"deadAt,omitempty"`
	Expires        int64  `json:"expires,omitempty"`
	Queue          string `json:"queue,omitempty"`
	Left           int64  `json:"left,omitempty"`
	Pool           string `json:"pool,omitempty"`
}

type regRecord struct {
	AgentID      string `json:"agent"`
	TokenHash    []byte `json:"tokenSha256"`
	Capabilities []byte `json:"caps,omitempty"`
	RegisteredAt int64  `json:"at"`
}

// NewID returns a new message id: 32 lowercase hex digits, the time in
// milliseconds (48 bits) followed by 80 random bits. Ids made later sort
// after those made earlier, so the id buckets (keyed by id) grow at their
// right edge, where bbolt appends without splitting pages all over the
// tree; 80 random bits keep ids unguessable and make a collision within one
// millisecond negligible.
func NewID() string {
	return newIDAt(time.Now())
}

func newIDAt(t time.Time) string {
	var b [16]byte
	ms := uint64(t.UnixMilli())
	binary.BigEndian.PutUint64(b[:8], ms<<16)
	_, _ = rand.Read(b[6:]) // crypto/rand.Read never fails (Go 1.24+).
	return hex.EncodeToString(b[:])
}

// checkTime rejects times UnixNano cannot represent (before 1678, after 2262).
func checkTime(field string, t time.Time) error {
	if t.Before(time.Unix(0, math.MinInt64)) || t.After(time.Unix(0, math.MaxInt64)) {
		return invalidf("%s %s is outside the years 1678-2262", field, t)
	}
	return nil
}

func checkKeyString(field, v string) error {
	if len(v) > maxIDLen {
		return invalidf("%s is %d bytes long, the limit is %d", field, len(v), maxIDLen)
	}
	if strings.IndexByte(v, 0) >= 0 {
		return invalidf("%s contains a NUL byte", field)
	}
	return nil
}

// prepare validates m, filling in a missing id and time.
func (s *Store) prepare(m *Message) error {
	if m.ID == "" {
		m.ID = NewID()
	}
	if m.Time.IsZero() {
		m.Time = s.cfg.clock()
	}
	if m.Topic == "" {
		return invalidf("empty topic")
	}
	for _, f := range []struct{ name, v string }{
		{"id", m.ID}, {"topic", m.Topic}, {"from", m.From}, {"to", m.To}, {"conversation id", m.ConversationID}, {"queue", m.Queue}, {"pool", m.Pool},
	} {
		if err := checkKeyString(f.name, f.v); err != nil {
			return err
		}
	}
	if n := len(m.Payload) + len(m.Metadata); n > s.cfg.maxRecordSize {
		return fmt.Errorf("%w: payload and metadata are %d bytes, the limit is %d", ErrTooLarge, n, s.cfg.maxRecordSize)
	}
	if len(m.Payload) == 0 {
		return invalidf("message %s has no payload", m.ID)
	}
	if m.Attempts < 0 {
		return invalidf("negative attempts")
	}
	if m.Pool != "" && m.Queue == "" {
		return invalidf("pools are parts of named queues only")
	}
	m.LastError = clip(m.LastError)
	if !m.Expires.IsZero() {
		if err := checkTime("expiry", m.Expires); err != nil {
			return err
		}
	}
	return checkTime("time", m.Time)
}

func toRecord(m Message) msgRecord {
	r := msgRecord{
		ID: m.ID, Topic: m.Topic, From: m.From, To: m.To, ConversationID: m.ConversationID,
		Payload: m.Payload, Metadata: m.Metadata, Time: m.Time.UnixNano(),
		Attempts: m.Attempts, LastError: m.LastError, Queue: m.Queue, Pool: m.Pool,
	}
	if !m.NextAttempt.IsZero() {
		r.Next = m.NextAttempt.UnixNano()
	}
	if !m.Expires.IsZero() {
		r.Expires = m.Expires.UnixNano()
	}
	if !m.Left.IsZero() {
		r.Left = m.Left.UnixNano()
	}
	return r
}

func (r msgRecord) message() Message {
	m := Message{
		ID: r.ID, Topic: r.Topic, From: r.From, To: r.To, ConversationID: r.ConversationID,
		Payload: r.Payload, Metadata: r.Metadata, Time: time.Unix(0, r.Time).UTC(),
		Attempts: r.Attempts, LastError: r.LastError, Queue: r.Queue, Pool: r.Pool,
	}
	if len(m.Metadata) == 0 {
		m.Metadata = nil
	}
	if r.Next != 0 {
		m.NextAttempt = time.Unix(0, r.Next).UTC()
	}
	if r.Expires != 0 {
		m.Expires = time.Unix(0, r.Expires).UTC()
	}
	if r.Left != 0 {
		m.Left = time.Unix(0, r.Left).UTC()
	}
	return m
}

func (r msgRecord) deadLetter() DeadLetter {
	return DeadLetter{Message: r.message(), Reason: r.Reason, DeadAt: time.Unix(0, r.DeadAt).UTC()}
}

func encode(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("store: encoding record: %w", err)
	}
	return append([]byte{formatVersion}, b...), nil
}

// decodeValue checks the version byte and decodes the JSON that follows,
// refusing unknown fields and trailing data.
func decodeValue(data []byte, v any) error {
	if len(data) == 0 {
		return errors.New("empty value")
	}
	if data[0] != formatVersion {
		return fmt.Errorf("unknown format version %d", data[0])
	}
	dec := json.NewDecoder(bytes.NewReader(data[1:]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after record")
	}
	return nil
}

// decodeMessage decodes a stored message record from bucket at key. It never
// panics; any problem is a *CorruptError.
func decodeMessage(bucket string, key, data []byte) (msgRecord, error) {
	var r msgRecord
	err := decodeValue(data, &r)
	switch {
	case err != nil:
	case r.ID == "":
		err = errors.New("empty id")
	case r.Topic == "":
		err = errors.New("empty topic")
	case !json.Valid(r.Payload):
		err = errors.New("payload is not valid JSON")
	case len(r.Metadata) > 0 && !json.Valid(r.Metadata):
		err = errors.New("metadata is not valid JSON")
	case r.Attempts < 0:
		err = errors.New("negative attempts")
	}
	if err != nil {
		return msgRecord{}, &CorruptError{Bucket: bucket, Key: bytes.Clone(key), Err: err}
	}
	return r, nil
}

func decodeRegistration(bucket string, key, data []byte) (regRecord, error) {
	var r regRecord
	err := decodeValue(data, &r)
	switch {
	case err != nil:
	case r.AgentID == "":
		err = errors.New("empty agent id")
	case len(r.TokenHash) != 32:
		err = fmt.Errorf("token hash is %d bytes, want 32", len(r.TokenHash))
	case len(r.Capabilities) > 0 && !json.Valid(r.Capabilities):
		err = errors.New("capabilities are not valid JSON")
	}
	if err != nil {
		return regRecord{}, &CorruptError{Bucket: bucket, Key: bytes.Clone(key), Err: err}
	}
	return r, nil
}

// timeKey encodes t so that byte order is time order, including before
// 1970: the sign bit of UnixNano is flipped.
func timeKey(t time.Time) []byte {
	return nanoKey(t.UnixNano())
}

func nanoKey(n int64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n)^(1<<63))
	return b[:]
}

func keyNano(b []byte) int64 {
	return int64(binary.BigEndian.Uint64(b) ^ (1 << 63))
}

func seqKey(n uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	return b[:]
}

// concat joins byte slices into a new slice.
func concat(parts ...[]byte) []byte {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	out := make([]byte, 0, n)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// indexKey is value ‖ 0x00 ‖ time ‖ id. Indexed values never contain NUL,
// so the first NUL ends the value and "ab" never matches "abc".
func indexKey(value string, primary []byte) []byte {
	return concat([]byte(value), []byte{0}, primary)
}
