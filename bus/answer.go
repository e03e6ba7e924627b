package bus

import (
	"fmt"

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
	if err := jsonv2.Unmarshal(raw, pr, answerOpts); err != nil {
		*pr = ProcessResult{}
		return fmt.Errorf("rpc: decode result of %s: %w", method, err)
	}
	return nil
}
