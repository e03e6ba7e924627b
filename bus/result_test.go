package bus

import (
	"encoding/json"
	"reflect"
	"testing"
)

// busSendResult names the package's SendResult where the fuzz target's
// own SendResult hides it.
type busSendResult = SendResult

// FuzzSendResult checks SendResult's one-walk decoding against
// encoding/json's decoding of the same struct without UnmarshalJSON, on
// every valid JSON value, into a zero result and into one that holds
// acks: the same result and the same error.
func FuzzSendResult(f *testing.F) {
	for _, s := range []string{
		`{"success":true,"stopPropagation":false,"acks":[{"client_id":"sub-0","processed":true},{"client_id":"sub-1","processed":false,"message":"busy","retrying":true}],"messageId":"m1"}`,
		`{}`, `null`, `[]`, `"x"`, `{"acks":[]}`, `{"acks":null}`, `{"acks":[null]}`, `{"acks":[{}],"acks":[{"queued":true}]}`,
		`{"Success":true}`, `{"acks":[{"Client_ID":"a"}]}`, `{"success":"yes"}`, `{"messageId":7}`, `{"messageId":"a\"b"}`,
		`{"acks":[{"receipt":{"a":[1,2]}},{"receipt":null},{"receipt":"r","receipt":{}}]}`, `{"acks":[{"client_id":"é"}]}`,
		`{"acks":[{"client_id":"\xff"}]}`, `{"other":{"success":true}, "success" : true }`, `{"acks":[1]}`, `{"acks":{}}`,
	} {
		f.Add([]byte(s))
	}
	// SendResult as encoding/json decodes it without the method, named
	// so that errors read the same.
	type SendResult struct {
		Success         bool   `json:"success"`
		StopPropagation bool   `json:"stopPropagation"`
		Acks            []Ack  `json:"acks"`
		MessageID       string `json:"messageId"`
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		for _, start := range []busSendResult{
			{},
			{Success: true, Acks: []Ack{{ClientID: "old", Message: "kept"}}},
		} {
			want := SendResult(start)
			want.Acks = append([]Ack(nil), start.Acks...)
			wantErr := json.Unmarshal(raw, &want)
			got := start
			got.Acks = append([]Ack(nil), start.Acks...)
			err := json.Unmarshal(raw, &got)
			switch {
			case (err == nil) != (wantErr == nil):
				t.Fatalf("Unmarshal(%s) error %v, want %v", raw, err, wantErr)
			case err != nil && err.Error() != wantErr.Error():
				t.Fatalf("Unmarshal(%s) error %q, want %q", raw, err, wantErr)
			case !reflect.DeepEqual(SendResult(got), want):
				t.Fatalf("Unmarshal(%s) = %+v, want %+v", raw, got, want)
			}
		}
	})
}
