package protocol

import (
	"bytes"
	"encoding/json"
	"testing"
)

// testReceipt returns the receipt the agent of seed 0x02 gives the agent
// of seed 0x01 for request req-123, with the given status and result.
func testReceipt(tb testing.TB, typ MessageType, payload any) []byte {
	tb.Helper()
	e := testEnvelope(tb, typ, &Recipient{AgentID: testSigner(tb, 1).ID().String()}, payload)
	doc, err := SignedJSON(seal(tb, testSigner(tb, 2), e))
	if err != nil {
		tb.Fatal(err)
	}
	return doc
}

func TestOpenReceipt(t *testing.T) {
	provider := testSigner(t, 2).ID()
	doc := testReceipt(t, TypeResponse, Response{CorrelationID: "req-123", Status: StatusSuccess, Result: json.RawMessage(`{"ok":true}`)})
	r, err := OpenReceipt(doc)
	if err != nil {
		t.Fatalf("OpenReceipt: %v", err)
	}
	if r.Provider != provider || r.Response.CorrelationID != "req-123" || string(r.Response.Result) != `{"ok":true}` {
		t.Errorf("receipt = %+v, %+v", r.Provider, r.Response)
	}
	if err := r.Check(provider.String(), "req-123"); err != nil {
		t.Errorf("Check(provider, req-123): %v", err)
	}
	if err := r.Check("", ""); err != nil {
		t.Errorf("Check of nothing: %v", err)
	}
	wantCode(t, r.Check(testSigner(t, 1).ID().String(), ""), CodeInvalidSignature)
	wantCode(t, r.Check("", "req-124"), CodeInvalidMessage)
	wantCode(t, r.Check("not-an-agent", ""), CodeInvalidMessage)

	// A final error status is a receipt too: the provider answered.
	doc = testReceipt(t, TypeResponse, Response{CorrelationID: "req-123", Status: StatusError})
	if _, err := OpenReceipt(doc); err != nil {
		t.Errorf("OpenReceipt(status error): %v", err)
	}
}

func TestOpenReceiptRejections(t *testing.T) {
	good := testReceipt(t, TypeResponse, Response{CorrelationID: "req-123", Status: StatusSuccess, Result: json.RawMessage(`{"n":1}`)})
	for _, tc := range []struct {
		name string
		doc  []byte
		code Code
	}{
		{"progress", testReceipt(t, TypeResponse, Response{CorrelationID: "req-123", Status: StatusInProgress}), CodeInvalidMessage},
		{"request", testReceipt(t, TypeRequest, Request{Action: "x", CorrelationID: "req-123"}), CodeInvalidMessage},
		{"error envelope", testReceipt(t, TypeError, Error{Code: CodeTimeout, CorrelationID: "req-123", Message: "late"}), CodeInvalidMessage},
		{"result altered", bytes.Replace(good, []byte(`"n":1`), []byte(`"n":2`), 1), CodeInvalidSignature},
		{"no signature", bytes.Replace(good, []byte(`"signature":`), []byte(`"signaturX":`), 1), CodeInvalidSignature},
		{"not JSON", good[:len(good)-1], CodeInvalidMessage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := OpenReceipt(tc.doc)
			wantCode(t, err, tc.code)
		})
	}
	// Any one byte changed fails, one way or another.
	for i := range good {
		bad := bytes.Clone(good)
		bad[i] ^= 0x01
		if r, err := OpenReceipt(bad); err == nil && r.Check(testSigner(t, 2).ID().String(), "req-123") == nil &&
			!bytes.Equal(r.Envelope.Payload, []byte(`{"correlationId":"req-123","result":{"n":1},"status":"success"}`)) {
			t.Fatalf("byte %d altered: accepted a receipt with payload %s", i, r.Envelope.Payload)
		}
	}
}
