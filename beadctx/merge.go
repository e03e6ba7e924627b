package beadctx

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/meshagent/meshagent/protocol"
)

// MergePatch applies the RFC 7396 JSON merge patch patch to the JSON
// value target and returns the result: when patch is an object, each of
// its members removes the target's member of that name (null) or is
// merged into it, recursively, a target that is not an object being taken
// as {}; any other patch replaces the target. An empty target is taken as
// absent. Objects in the result have their members sorted by name and
// no insignificant whitespace; other values are kept as written.
// Duplicate member names and invalid UTF-8 are refused (ErrInvalid).
func MergePatch(target, patch []byte) ([]byte, error) {
	p, isObj, err := object(patch)
	if err != nil {
		return nil, fmt.Errorf("%w: patch: %w", ErrInvalid, err)
	}
	if !isObj {
		return compact(patch)
	}
	t, isObj, err := object(target)
	if err != nil {
		return nil, fmt.Errorf("%w: target: %w", ErrInvalid, err)
	}
	if !isObj {
		t = map[string]json.RawMessage{}
	}
	for name, v := range p {
		if isNull(v) {
			delete(t, name)
			continue
		}
		merged, err := MergePatch(t[name], v)
		if err != nil {
			return nil, err
		}
		t[name] = merged
	}
	return encode(t)
}

// object decodes data as an object of raw members, reporting false for a
// value that is not an object (or empty data).
func object(data []byte) (map[string]json.RawMessage, bool, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		if len(data) > 0 && !json.Valid(data) {
			return nil, false, fmt.Errorf("not JSON")
		}
		return nil, false, nil
	}
	var m map[string]json.RawMessage
	if err := protocol.DecodeStrict(data, &m); err != nil {
		return nil, false, err
	}
	if m == nil {
		m = map[string]json.RawMessage{}
	}
	return m, true, nil
}

func isNull(v json.RawMessage) bool { return string(bytes.TrimSpace(v)) == "null" }

func compact(v []byte) ([]byte, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return b.Bytes(), nil
}

// encode writes an object with sorted member names, without escaping
// HTML characters.
func encode(m map[string]json.RawMessage) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
