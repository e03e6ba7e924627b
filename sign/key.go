package sign

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/libp2p/go-libp2p/core/crypto"
)

// KeyFileMode is the mode key files are created with.
const KeyFileMode fs.FileMode = 0o600

// GenerateKey returns a new random Ed25519 identity.
func GenerateKey() (crypto.PrivKey, error) {
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("sign: generate key: %w", err)
	}
	return k, nil
}

// KeyFromSeed returns the Ed25519 identity for a 32-byte seed. Tests and
// golden vectors use it for deterministic keys.
func KeyFromSeed(seed []byte) (crypto.PrivKey, error) {
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("sign: seed is %d bytes, want %d", len(seed), ed25519.SeedSize)
	}
	return crypto.UnmarshalEd25519PrivateKey(ed25519.NewKeyFromSeed(seed))
}

// LoadKey reads a libp2p-marshalled Ed25519 private key from path. It refuses
// a file that group or others may read or write (*KeyPermissionError).
func LoadKey(path string) (crypto.PrivKey, error) {
	// Refuse pipes and devices before opening: opening a FIFO blocks.
	if st, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("sign: open key: %w", err)
	} else if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("sign: key file %s is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("sign: open key: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("sign: stat key: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("sign: key file %s is not a regular file", path)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, &KeyPermissionError{Path: path, Mode: st.Mode()}
	}
	const maxKeyFile = 4 << 10 // a marshalled Ed25519 key is 68 bytes
	buf := make([]byte, maxKeyFile+1)
	n, err := readFull(f, buf)
	if err != nil {
		return nil, fmt.Errorf("sign: read key %s: %w", path, err)
	}
	if n > maxKeyFile {
		return nil, fmt.Errorf("sign: key file %s is too large to be a key", path)
	}
	k, err := crypto.UnmarshalPrivateKey(buf[:n])
	if err != nil {
		return nil, fmt.Errorf("sign: key file %s is not a libp2p private key: %w", path, err)
	}
	if k.Type() != crypto.Ed25519 {
		return nil, fmt.Errorf("%w: %s holds a %s key", ErrUnsupportedKey, path, k.Type())
	}
	return k, nil
}

func readFull(f *os.File, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := f.Read(buf[n:])
		n += m
		if err != nil {
			if errors.Is(err, io.EOF) {
				return n, nil
			}
			return n, err
		}
	}
	return n, nil
}

// SaveKey writes k to path with mode 0600, creating parent directories with
// mode 0700. It fails if path already exists, so an identity is never
// overwritten by accident.
func SaveKey(path string, k crypto.PrivKey) error {
	if k.Type() != crypto.Ed25519 {
		return ErrUnsupportedKey
	}
	b, err := crypto.MarshalPrivateKey(k)
	if err != nil {
		return fmt.Errorf("sign: marshal key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("sign: create key directory: %w", err)
	}
	// Write a private temporary file and link it into place: the key is
	// never visible half-written, and O_EXCL semantics of Link keep an
	// existing identity.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".identity-*.tmp")
	if err != nil {
		return fmt.Errorf("sign: create key file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(KeyFileMode); err != nil {
		tmp.Close()
		return fmt.Errorf("sign: chmod key file: %w", err)
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("sign: write key file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sign: sync key file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("sign: close key file: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		return fmt.Errorf("sign: install key file: %w", err)
	}
	return nil
}

// LoadOrCreateKey loads the key at path, creating a new identity there if
// the file does not exist. created reports whether it did.
func LoadOrCreateKey(path string) (k crypto.PrivKey, created bool, err error) {
	k, err = LoadKey(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return k, false, err
	}
	k, err = GenerateKey()
	if err != nil {
		return nil, false, err
	}
	if err := SaveKey(path, k); err != nil {
		if errors.Is(err, fs.ErrExist) { // lost a race with another creator: use theirs
			k, err = LoadKey(path)
			return k, false, err
		}
		return nil, false, err
	}
	return k, true, nil
}
