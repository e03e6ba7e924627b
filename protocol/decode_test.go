package protocol

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/meshagent/meshagent/sign"
)

func jsonDecode(body []byte) (*Envelope, error) {
	var e Envelope
	if err := json.Unmarshal(body, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// checkDecodeAgrees asserts that decodeEnvelope and encoding/json read the
// same envelope from bytes that pass the receiver's pre-checks.
func checkDecodeAgrees(t *testing.T, body []byte) {
	t.Helper()
	if sign.CheckCanonical(body) != nil || len(body) == 0 || body[0] != '{' {
		return
	}
	fast, ferr := decodeEnvelope(body)
	if errors.Is(ferr, ErrUnknownMember) {
		return // stricter than encoding/json by design
	}
	slow, serr := jsonDecode(body)
	if serr != nil {
		if ferr == nil && fast.Validate() == nil {
			t.Fatalf("encoding/json refused %s (%v) but the fast decoder accepted a valid envelope", body, serr)
		}
		return
	}
	if ferr != nil {
		if slow.Validate() == nil {
			t.Fatalf("fast decoder refused %s (%v) but encoding/json read a valid envelope", body, ferr)
		}
		return
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("decoders disagree on %s:\n fast %+v\n json %+v", body, fast, slow)
	}
}

func TestDecodeEnvelopeMatchesJSON(t *testing.T) {
	for _, g := range readGolden(t) {
		checkDecodeAgrees(t, []byte(g.Canonical))
	}
	for _, body := range []string{
		`{"from":{"agentId":"A","capabilities":["a","b\\"c"],"name":"n\\u0001"},"id":"i","payload":{},"protocol":"p","timestamp":"t","to":{"agentId":"B","broadcast":true,"topic":"x"},"type":"request"}`,
		`{"from":{"agentId":"A"},"id":"i","metadata":{"k":[1,{"a":null}]},"payload":{"s":"}"},"protocol":"p","timestamp":"t","to":null,"type":"notify"}`,
		`{"from":null,"id":null,"payload":null,"protocol":"p","timestamp":"t","type":"notify"}`,
		`{"from":{"agentId":5},"id":"i","payload":{},"protocol":"p","timestamp":"t","type":"notify"}`,
		`{"from":{"agentId":"A"},"id":"i","payload":{},"protocol":"p","timestamp":"t","to":{"broadcast":"yes"},"type":"notify"}`,
		`{"from":{"agentId":"A","capabilities":[1]},"id":"i","payload":{},"protocol":"p","timestamp":"t","type":"notify"}`,
		`{"from":[],"id":"i","payload":{},"protocol":"p","timestamp":"t","type":"notify"}`,
	} {
		checkDecodeAgrees(t, []byte(body))
	}
}

func FuzzDecodeEnvelopeMatchesJSON(f *testing.F) {
	for _, g := range readGolden(f) {
		f.Add([]byte(g.Canonical))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkDecodeAgrees(t, body) })
}
