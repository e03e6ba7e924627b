package bus

import (
	"fmt"
	"sync"

	jsonv2 "github.com/go-json-experiment/json"
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// answerOpts match names as strings.EqualFold does, as encoding/json
// always has for the clients that answer.
var answerOpts = jsonv2.JoinOptions(jsonv2.MatchCaseInsensitiveNames(true), jsonv1.MatchCaseSensitiveDelimiter(true))

// decodeProcessResult decodes raw, the answer to method, into pr, a zero
// ProcessResult. An empty raw (a connection that answers nothing) leaves
// pr zero. Names match regardless of case (answerOpts); a repeated member or a wrong type is an error,
// worded as rpc.Conn.Call words its errors.
func decodeProcessResult(method string, raw []byte, pr *ProcessResult) error {
	if len(raw) == 0 {
		return nil
	}
	// Decoded into a pooled result and copied out, so that pr, which
	// jsonv2.Unmarshal would move to the heap, stays on its caller's
	// stack: one allocation less for each subscriber's answer.
	tmp := answers.Get().(*ProcessResult)
	err := jsonv2.Unmarshal(raw, tmp, answerOpts)
	if err == nil {
		*pr = *tmp
	}
	*tmp = ProcessResult{}
	answers.Put(tmp)
	if err != nil {
		return fmt.Errorf("rpc: decode result of %s: %w", method, err)
	}
	return nil
}

var answers = sync.Pool{New: func() any { return new(ProcessResult) }}
