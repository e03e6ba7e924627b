package bus

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/meshagent/meshagent/internal/jsonobj"
)

// A subscriber's answer is read from the JSON the connection has already
// validated. The usual answer, a flat object of the ProcessResult members
// with plain values, is read in one walk; anything else (a null, an
// escape, a number that is not a plain integer, a member named in another
// case) goes to encoding/json, so that what is decoded, and every error,
// is what json.Unmarshal makes of it.

// decodeProcessResult decodes raw, the answer to method, into pr, a zero
// ProcessResult, as rpc.Conn.Call would have decoded it. An empty raw
// (a connection that answers nothing) leaves pr zero.
func decodeProcessResult(method string, raw []byte, pr *ProcessResult) error {
	if len(raw) == 0 || readProcessResult(raw, pr) {
		return nil
	}
	// Decoded into a value of its own, so that pr, which the walk above
	// leaves on the caller's stack, does not move to the heap for the
	// rare answer that comes here.
	var q ProcessResult
	err := json.Unmarshal(raw, &q)
	*pr = q
	if err != nil {
		// Worded as rpc.Conn.Call words it, so that acks read the same.
		return fmt.Errorf("rpc: decode result of %s: %w", method, err)
	}
	return nil
}

// processResultKeys are the members of a ProcessResult as encoded.
var processResultKeys = []string{"processed", "should_retry", "retry_seconds", "message", "stopPropagation", "success"}

// readProcessResult is the one-walk reading of raw into pr. It reports
// false, leaving pr to be reset, for anything it does not read exactly as
// encoding/json would.
func readProcessResult(raw []byte, pr *ProcessResult) bool {
	return readMembers(raw, func(k, v []byte) bool {
		switch string(k) {
		case "processed":
			return readBool(v, &pr.Processed)
		case "should_retry":
			return readBool(v, &pr.ShouldRetry)
		case "stopPropagation":
			return readBool(v, &pr.StopPropagation)
		case "success":
			var b bool
			if !readBool(v, &b) {
				return false
			}
			pr.Success = &b
			return true
		case "retry_seconds":
			return readInt(v, &pr.RetrySeconds)
		case "message":
			return readString(v, &pr.Message)
		}
		return !foldsTo(k, processResultKeys)
	})
}

// readMembers walks the members of raw with read until one read reports
// false: the shape of every one-walk reader here. It reports whether raw
// was an object the walk could read and every read succeeded.
func readMembers(raw []byte, read func(k, v []byte) bool) bool {
	ok := true
	walked := jsonobj.Members(raw, func(k, v []byte) {
		if ok {
			ok = read(k, v)
		}
	})
	return walked && ok
}

func readBool(v []byte, out *bool) bool {
	switch string(v) {
	case "true":
		*out = true
	case "false":
		*out = false
	default:
		return false
	}
	return true
}

// readInt reads a plain integer (no fraction, no exponent) that fits.
func readInt(v []byte, out *int) bool {
	if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return false
	}
	for _, c := range v[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	n, err := strconv.Atoi(string(v))
	if err != nil {
		return false
	}
	*out = n
	return true
}

// readString reads a string without escapes and of valid UTF-8 (which
// encoding/json would otherwise repair).
func readString(v []byte, out *string) bool {
	if len(v) < 2 || v[0] != '"' {
		return false
	}
	s := v[1 : len(v)-1]
	for _, c := range s {
		if c == '\\' {
			return false
		}
	}
	if !utf8.Valid(s) {
		return false
	}
	*out = string(s)
	return true
}
