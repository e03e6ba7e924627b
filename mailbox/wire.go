package mailbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// Operations of a Request.
const (
	OpDeposit = "deposit"
	OpFetch   = "fetch"
	OpAck     = "ack"
	// OpDefer tells the relay that its agent fetched items and could not
	// take them yet (no handler for them): they keep their place until
	// the mailbox is full, and then lose it first.
	OpDefer = "defer"
)

// Statuses of a Response.
const (
	StatusOK      = "ok"
	StatusFull    = "full"
	StatusRefused = "refused"
	StatusError   = "error"
)

// Wire limits.
const (
	// MaxEnvelopeBytes bounds a deposited envelope. A request larger
	// than this stays in its sender's outbox.
	MaxEnvelopeBytes = 256 << 10
	// MaxPage bounds the items of a fetched page and the ids of an ack.
	MaxPage = 100
	// DefaultPage is a fetch's page size when it names none.
	DefaultPage = 50
	// pageBytes bounds the envelope bytes of a fetched page (one item
	// always fits, however large).
	pageBytes = 1 << 20
	// maxItemID bounds an item id: agent id / agent id / envelope id.
	maxItemID = 2*128 + protocol.MaxIDLen + 2
	// maxRequestFrame and maxResponseFrame bound the frames read.
	maxRequestFrame  = MaxEnvelopeBytes + 4<<10
	maxResponseFrame = pageBytes + MaxEnvelopeBytes + 64<<10
)

// Request is one mailbox request. Which members apply depends on Op.
type Request struct {
	Op string `json:"op,required"`
	// To is the recipient of a deposit, as an agent id.
	To string `json:"to,omitempty"`
	// Envelope is the signed request envelope of a deposit, in its
	// embedded JSON form (with "signature").
	Envelope json.RawMessage `json:"envelope,omitempty"`
	// After is a fetch's cursor: the Next of the previous page, or empty
	// for the first.
	After string `json:"after,omitempty"`
	// Limit is a fetch's page size, at most MaxPage (0: DefaultPage).
	Limit int `json:"limit,omitempty"`
	// IDs are the items an ack deletes, or a defer marks.
	IDs []string `json:"ids,omitempty"`
}

// Item is one envelope held in a mailbox.
type Item struct {
	// ID names the item for an ack.
	ID string `json:"id"`
	// Envelope is the signed envelope, byte for byte as deposited.
	Envelope json.RawMessage `json:"envelope"`
	// Deferred reports that the agent deferred the item before (OpDefer),
	// so that it need not say so again.
	Deferred bool `json:"deferred,omitempty"`
}

// Response is the answer to a Request.
type Response struct {
	Status  string `json:"status,required"`
	Message string `json:"message,omitempty"`
	// Items is a fetched page.
	Items []Item `json:"items,omitempty"`
	// Next is the cursor of the page after this one.
	Next string `json:"next,omitempty"`
	// More reports that the mailbox held more than this page.
	More bool `json:"more,omitempty"`
}

// ParseRequest decodes and checks one request frame: strictly (no member
// the type does not declare, none twice, every JSON type right), with
// the members its operation needs and no others, within the wire limits.
// It checks no signature: the server does, for a deposit.
func ParseRequest(data []byte) (*Request, error) {
	var r Request
	if err := protocol.DecodeStrict(data, &r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	if err := r.check(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	return &r, nil
}

func (r *Request) check() error {
	switch r.Op {
	case OpDeposit:
		if r.After != "" || r.Limit != 0 || r.IDs != nil {
			return errors.New("a deposit takes only to and envelope")
		}
		if _, err := sign.ParseAgentID(r.To); err != nil {
			return fmt.Errorf("to: %v", err)
		}
		if len(r.Envelope) == 0 || r.Envelope[0] != '{' {
			return errors.New("envelope must be a JSON object")
		}
		if len(r.Envelope) > MaxEnvelopeBytes {
			return fmt.Errorf("envelope of %d bytes exceeds %d", len(r.Envelope), MaxEnvelopeBytes)
		}
	case OpFetch:
		if r.To != "" || r.Envelope != nil || r.IDs != nil {
			return errors.New("a fetch takes only after and limit")
		}
		if r.Limit < 0 || r.Limit > MaxPage {
			return fmt.Errorf("limit must be 0 to %d", MaxPage)
		}
		if _, err := parseCursor(r.After); err != nil {
			return err
		}
	case OpAck, OpDefer:
		if r.To != "" || r.Envelope != nil || r.After != "" || r.Limit != 0 {
			return fmt.Errorf("%s takes only ids", r.Op)
		}
		if len(r.IDs) == 0 || len(r.IDs) > MaxPage {
			return fmt.Errorf("ids must name 1 to %d items", MaxPage)
		}
		for _, id := range r.IDs {
			if id == "" || len(id) > maxItemID {
				return fmt.Errorf("an item id must be 1 to %d bytes", maxItemID)
			}
		}
	default:
		return fmt.Errorf("unknown op %.32q", r.Op)
	}
	return nil
}

// parseCursor reads a fetch cursor: empty, or the decimal position after
// which the page starts.
func parseCursor(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || len(s) > 20 {
		return 0, errors.New("after is not a cursor this mailbox gave")
	}
	return n, nil
}

// parseResponse decodes an answer; members a later relay may add are
// skipped.
func parseResponse(data []byte) (*Response, error) {
	var r Response
	if err := protocol.DecodeStrict(data, &r, protocol.AllowUnknown()); err != nil {
		return nil, fmt.Errorf("%w: answer: %v", ErrFailed, err)
	}
	if len(r.Items) > MaxPage {
		return nil, fmt.Errorf("%w: answer holds %d items, at most %d", ErrFailed, len(r.Items), MaxPage)
	}
	return &r, nil
}

// err turns a non-ok answer into the error it means.
func (r *Response) err() error {
	switch r.Status {
	case StatusOK:
		return nil
	case StatusFull:
		return fmt.Errorf("%w: %s", ErrFull, r.Message)
	case StatusRefused:
		return fmt.Errorf("%w: %s", ErrRefused, r.Message)
	default:
		return fmt.Errorf("%w: %s (%s)", ErrFailed, r.Message, r.Status)
	}
}
