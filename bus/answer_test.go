package bus

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeProcessResult checks the reading of an answer (encoding/json/v2)
// against encoding/json (v1) on every valid JSON value: whatever it
// accepts, v1 decodes to the same result; what it refuses is worded with
// the method's prefix, and is a repeated member, invalid UTF-8 or
// something v1 refuses too.
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
		case err == nil && wantErr != nil:
			t.Fatalf("decodeProcessResult(%s) accepted what json.Unmarshal refuses: %v", raw, wantErr)
		case err == nil && !reflect.DeepEqual(got, want):
			t.Fatalf("decodeProcessResult(%s) = %+v, want %+v", raw, got, want)
		case err != nil && !strings.HasPrefix(err.Error(), "rpc: decode result of processMessage: "):
			t.Fatalf("decodeProcessResult(%s) error %q", raw, err)
		case err != nil && got != (ProcessResult{}):
			t.Fatalf("decodeProcessResult(%s) left %+v after an error", raw, got)
		case err != nil && wantErr == nil && !strings.Contains(err.Error(), "duplicate") && utf8.Valid(raw):
			t.Fatalf("decodeProcessResult(%s) refused what json.Unmarshal reads: %v", raw, err)
		}
	})
}

// TestAllocsAnswer: reading a subscriber's answer allocates
// nothing for a plain answer (one allocation each before its result was
// pooled, ten a round trip of ten subscribers).
func TestAllocsAnswer(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts do not hold under the race detector")
	}
	raw := []byte(`{"processed":true,"should_retry":false,"stopPropagation":false}`)
	n := testing.AllocsPerRun(200, func() {
		var pr ProcessResult
		if err := decodeProcessResult(MethodProcessMessage, raw, &pr); err != nil || !pr.Processed {
			t.Fatalf("%+v %v", pr, err)
		}
	})
	if n != 0 {
		t.Errorf("%.2f allocations an answer, want none", n)
	}
}
