package pubsub

import (
	"context"
	"time"
)

// KeptMessage is a signed topic message in an Archive.
type KeptMessage struct {
	// Family is the topic's family: an archive is read one family at a
	// time.
	Family string
	// Topic is the message's topic.
	Topic string
	// Key is unique to the message in its family ("<id> <author>") and
	// orders messages of equal Time.
	Key string
	// Time is the envelope's time.
	Time time.Time
	// Data is the message as signed: signature ‖ canonical envelope.
	Data []byte
}

// ArchiveQuery reads an Archive: the messages of Family in [Since, Until)
// whose topic Match accepts, oldest first, from the cursor After on.
type ArchiveQuery struct {
	Family       string
	Since, Until time.Time
	After        string
	Limit        int
	MaxBytes     int
	Match        func(topic string) bool
}

// ArchivePage is one page of an ArchiveQuery; Next is "" at the end.
type ArchivePage struct {
	Messages []KeptMessage
	Next     string
}

// Archive keeps a history keeper's messages (node adapts its store to
// it). Keep must be idempotent: the same message may be kept twice.
type Archive interface {
	Keep(ctx context.Context, m KeptMessage) error
	Page(ctx context.Context, q ArchiveQuery) (ArchivePage, error)
}

// Positions remembers durable subscriptions' positions (node adapts its
// store to it). Position returns nil, nil for a name never saved.
// SavePosition of a name not saved before returns an error wrapping
// ErrTooManyDurables when it keeps as many names as it may.
// ForgetPosition deletes a name's position and reports whether there was
// one. ListPositions lists the names kept, sorted, with the size of each
// position.
type Positions interface {
	SavePosition(ctx context.Context, name string, v []byte) error
	Position(ctx context.Context, name string) ([]byte, error)
	ForgetPosition(ctx context.Context, name string) (bool, error)
	ListPositions(ctx context.Context) ([]SavedPosition, error)
}

// SavedPosition is a name whose position Positions keeps, and the
// position's size in bytes.
type SavedPosition struct {
	Name  string
	Bytes int
}
