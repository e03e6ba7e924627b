package lobby

import "errors"

var (
	// ErrNoMesh is returned by New without a Mesh.
	ErrNoMesh = errors.New("lobby: New needs a Mesh")
	// ErrNoStore is returned by New without a store for registrations.
	ErrNoStore = errors.New("lobby: New needs a store for registrations")
)

// errDuplicateMember is wrapped by the error that refuses a JSON object
// with a member name given twice.
var errDuplicateMember = errors.New("duplicate member")
