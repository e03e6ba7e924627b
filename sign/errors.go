package sign

import (
	"errors"
	"fmt"
	"io/fs"
)

var (
	// ErrInvalidSignature is returned when a signature does not verify, has
	// the wrong length, or is not valid base64.
	ErrInvalidSignature = errors.New("sign: invalid signature")
	// ErrInvalidAgentID is returned for a string that is neither an Ed25519
	// peer ID nor a base64 Ed25519 public key.
	ErrInvalidAgentID = errors.New("sign: invalid agent id")
	// ErrNotCanonical is returned by CheckCanonical for bytes that are not
	// RFC 8785 canonical JSON; the wrapping error says where and why.
	ErrNotCanonical = errors.New("sign: not canonical JSON")
	// ErrInvalidJSON is returned when input is not a single well-formed
	// JSON value.
	ErrInvalidJSON = errors.New("sign: invalid JSON")
	// ErrStale is returned by the replay guard for a timestamp outside the
	// allowed clock skew.
	ErrStale = errors.New("sign: timestamp outside the allowed window")
	// ErrReplay is returned by the replay guard for a message id already
	// seen from the same sender inside the window.
	ErrReplay = errors.New("sign: message replayed")
	// ErrUnsupportedKey is returned when a key file holds a key that is not
	// Ed25519.
	ErrUnsupportedKey = errors.New("sign: key is not Ed25519")
)

// KeyPermissionError is returned when a key file is readable or writable by
// group or others. Like ssh, meshagent refuses to use such a key.
type KeyPermissionError struct {
	// Path is the key file.
	Path string
	// Mode is its permission bits, which give group or others access.
	Mode fs.FileMode
}

var _ error = (*KeyPermissionError)(nil)

// Error implements error.
func (e *KeyPermissionError) Error() string {
	return fmt.Sprintf("sign: key file %s has permissions %04o, which let other users read it; "+
		"run `chmod 600 %s` (or delete it to create a new identity)", e.Path, e.Mode.Perm(), e.Path)
}
