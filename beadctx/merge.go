package beadctx

import (
	"fmt"
)

// MergePatch applies the RFC 7396 JSON merge patch patch to the JSON
// value target and returns the result: when patch is an object, each of
// its members removes the target's member of that name (null) or is
// merged into it, recursively, a target that is not an object being taken
// as {}; any other patch replaces the target. An empty target is taken as
// absent. Objects in the result have their members sorted by name and
// no insignificant whitespace; other values are kept as written, compact.
// Duplicate member names and invalid UTF-8 are refused (ErrInvalid).
func MergePatch(target, patch []byte) ([]byte, error) {
	p, err := parse(patch)
	if err != nil {
		return nil, fmt.Errorf("%w: patch: %w", ErrInvalid, err)
	}
	var t any
	if len(target) > 0 {
		if t, err = parse(target); err != nil {
			return nil, fmt.Errorf("%w: target: %w", ErrInvalid, err)
		}
	}
	return encodeTree(merge(t, p)), nil
}
