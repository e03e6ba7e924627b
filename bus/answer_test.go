package bus

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzDecodeProcessResult checks the one-walk reading of an answer
// against json.Unmarshal on every valid JSON value: the same result and
// the same error.
func FuzzDecodeProcessResult(f *testing.F) {
	for _, s := range []string{
		`{"processed":true}`, `{}`, `null`, `[]`, `"x"`,
		`{"processed":false,"should_retry":true,"retry_seconds":30,"message":"busy","stopPropagation":true,"success":false}`,
		`{"Processed":true}`, `{"PROCESSED":true,"processed":false}`, `{"processed":"yes"}`, `{"processed":null}`,
		`{"retry_seconds":1.5}`, `{"retry_seconds":1e2}`, `{"retry_seconds":-0}`, `{"retry_seconds":99999999999999999999}`,
		`{"message":"a\"b"}`, `{"message":"\u00e9"}`, `{"message":"é"}`, `{"message":"\xff"}`, `{"message":7}`,
		`{"success":true,"success":false}`, `{"other":{"processed":false}}`, `{ "processed" : true , "x":[1,{"y":"}"}] }`,
		`{"pro\u0063essed":true}`, `{"processed":true,"message":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		var want ProcessResult
		wantErr := json.Unmarshal(raw, &want)
		var got ProcessResult
		err := decodeProcessResult(MethodProcessMessage, raw, &got)
		switch {
		case (err == nil) != (wantErr == nil):
			t.Fatalf("decodeProcessResult(%s) error %v, json.Unmarshal's %v", raw, err, wantErr)
		case err != nil && err.Error() != "rpc: decode result of processMessage: "+wantErr.Error():
			t.Fatalf("decodeProcessResult(%s) error %q, want json.Unmarshal's %q", raw, err, wantErr)
		case err == nil && !reflect.DeepEqual(got, want):
			t.Fatalf("decodeProcessResult(%s) = %+v, want %+v", raw, got, want)
		}
	})
}
