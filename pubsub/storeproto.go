package pubsub

import (
	"bytes"
	"fmt"
	"math"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

// Bounds of the store protocol (protocol.StoreProtocol).
const (
	// MaxQueryBytes bounds a query frame.
	MaxQueryBytes = 4096
	// DefaultPageSize is a page's size when a query sets no limit;
	// MaxPageSize is the most a keeper returns in one page.
	DefaultPageSize = 256
	MaxPageSize     = 1000
	// MaxPageBytes bounds the signed messages of one page (a page holds
	// at least one message, which the message size bounds).
	MaxPageBytes = 1 << 20
	// maxCursorLen bounds a query's cursor.
	maxCursorLen = 2 * 1100
)

// HistoryQuery asks a history keeper for the kept messages whose topic
// matches Pattern, oldest first (by envelope time, then id). It is the
// request frame of the store protocol:
//
//	{"pattern":"news:*","since":"<RFC 3339>","until":"<RFC 3339>","cursor":"…","limit":256}
//
// Only pattern is required; since is inclusive, until exclusive; cursor
// is the next of the previous page.
type HistoryQuery struct {
	Pattern string    `json:"pattern,required"`
	Since   time.Time `json:"since,omitzero"`
	Until   time.Time `json:"until,omitzero"`
	Cursor  string    `json:"cursor,omitempty"`
	Limit   int       `json:"limit,omitempty"`
}

// pageHeader opens a page: it is followed by Count frames, each a kept
// message as it was signed (signature ‖ canonical envelope), the bytes a
// GossipSub message carries. Next is the cursor of the following page, ""
// at the end. A refused query gets a header with Error and no messages.
type pageHeader struct {
	Count int        `json:"count"`
	Next  string     `json:"next,omitempty"`
	Error *pageError `json:"error,omitempty"`
}

type pageError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Codes of a refused query.
const (
	codeInvalidQuery = "INVALID_MESSAGE"
	codeRateLimited  = "RATE_LIMITED"
	codeInternal     = "INTERNAL_ERROR"
)

// ParseHistoryQuery decodes a query frame strictly (protocol.DecodeStrict:
// one JSON object of the members HistoryQuery names, none twice, each of
// its type, nothing after it), then checks its values: a pattern
// Subscribe would accept, times in RFC 3339, a limit from 0 to
// MaxPageSize. Errors wrap ErrInvalidQuery.
func ParseHistoryQuery(raw []byte) (HistoryQuery, error) {
	var q HistoryQuery
	if len(raw) > MaxQueryBytes {
		return q, fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidQuery, len(raw), MaxQueryBytes)
	}
	if raw = bytes.TrimSpace(raw); len(raw) == 0 || raw[0] != '{' {
		return q, fmt.Errorf("%w: not a JSON object", ErrInvalidQuery)
	}
	if err := protocol.DecodeStrict(raw, &q); err != nil {
		return HistoryQuery{}, fmt.Errorf("%w: %w", ErrInvalidQuery, err)
	}
	if err := q.check(); err != nil {
		return HistoryQuery{}, err
	}
	return q, nil
}

// check validates a query's values.
func (q HistoryQuery) check() error {
	fam := Family(q.Pattern)
	switch {
	case q.Pattern == "" || fam == "" || hasWild(fam) || !validPattern(q.Pattern):
		return fmt.Errorf("%w: pattern %q (the family, before the first ':' or '.', must be literal)", ErrInvalidQuery, q.Pattern)
	case q.Limit < 0 || q.Limit > MaxPageSize:
		return fmt.Errorf("%w: limit %d is not in 0..%d", ErrInvalidQuery, q.Limit, MaxPageSize)
	case len(q.Cursor) > maxCursorLen:
		return fmt.Errorf("%w: cursor of %d bytes", ErrInvalidQuery, len(q.Cursor))
	case !q.Until.IsZero() && !q.Since.IsZero() && !q.Until.After(q.Since):
		return fmt.Errorf("%w: until is not after since", ErrInvalidQuery)
	case outsideStore(q.Since) || outsideStore(q.Until):
		// A store keeps times as Unix nanoseconds: asking outside them is
		// the query's fault, not the keeper's.
		return fmt.Errorf("%w: since and until must be within the years 1678 to 2262", ErrInvalidQuery)
	}
	return nil
}

// outsideStore reports whether t (zero: none) is outside the times a
// store can hold.
func outsideStore(t time.Time) bool {
	return !t.IsZero() && (t.Before(time.Unix(0, math.MinInt64)) || t.After(time.Unix(0, math.MaxInt64)))
}

// queryError is a keeper's refusal of a query, as a fetcher sees it.
type queryError struct {
	Code, Message string
}

func (e *queryError) Error() string { return fmt.Sprintf("history keeper: %s: %s", e.Code, e.Message) }
