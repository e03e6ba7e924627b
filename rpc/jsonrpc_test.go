package rpc

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDecodeFrame(t *testing.T) {
	type want struct {
		fatal string   // the fatal response, or ""
		batch bool     //
		items []string // per item: "req", "note", "resp", "invalid resp", "drop" or the bad response
	}
	tests := []struct {
		name  string
		frame string
		want  want
	}{
		{"request", `{"jsonrpc":"2.0","id":1,"method":"m"}`, want{items: []string{"req"}}},
		{"notification", `{"jsonrpc":"2.0","method":"m","params":[1]}`, want{items: []string{"note"}}},
		{"null id is a request", `{"jsonrpc":"2.0","id":null,"method":"m"}`, want{items: []string{"req"}}},
		{"result response", `{"jsonrpc":"2.0","id":1,"result":null}`, want{items: []string{"resp"}}},
		{"error response", `{"jsonrpc":"2.0","id":"a","error":{"code":-1,"message":"x"}}`, want{items: []string{"resp"}}},
		{"response with both", `{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":""}}`, want{items: []string{"invalid resp"}}},
		{"response without id", `{"jsonrpc":"2.0","result":1}`, want{items: []string{"drop"}}},
		{"response with null id", `{"jsonrpc":"2.0","id":null,"result":1}`, want{items: []string{"drop"}}},
		{"response of version 1", `{"id":1,"result":1}`, want{items: []string{"invalid resp"}}},
		{"error that is not an object", `{"jsonrpc":"2.0","id":1,"error":"x"}`, want{items: []string{"invalid resp"}}},
		{"invalid UTF-8", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}", want{fatal: `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: invalid UTF-8"}}`}},
		{"empty frame", ``, want{fatal: `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: not a JSON value"}}`}},
		{"only whitespace", " \n\t", want{fatal: `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: not a JSON value"}}`}},
		{"vertical tab is not JSON whitespace", "\v{}", want{fatal: `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: not a JSON value"}}`}},
		{"empty batch", `[]`, want{fatal: `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: empty batch"}}`}},
		{"batch over the limit", `[1,2,3,4,5]`, want{fatal: `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: batch of 5 exceeds the limit of 4"}}`}},
		{"mixed batch", `[{"jsonrpc":"2.0","id":1,"method":"m"},{"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","id":2,"result":1},7]`, want{batch: true, items: []string{"req", "note", "resp",
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: not a JSON object"}}`}}},
		{"bad element keeps its id", `[{"jsonrpc":"2.0","id":"k","method":""}]`, want{batch: true, items: []string{
			`{"jsonrpc":"2.0","id":"k","error":{"code":-32600,"message":"invalid request: \"method\" must be a non-empty string"}}`}}},
		{"params null is absent", `{"jsonrpc":"2.0","id":1,"method":"m","params":null}`, want{items: []string{"req"}}},
		{"params true", `{"jsonrpc":"2.0","id":1,"method":"m","params":true}`, want{items: []string{
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"invalid request: \"params\" must be an object or an array"}}`}}},
		{"key case matters", `{"JSONRPC":"2.0","ID":1,"Method":"m"}`, want{items: []string{
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: \"jsonrpc\" must be \"2.0\""}}`}}},
		{"nested batch element", `[[{"jsonrpc":"2.0","id":1,"method":"m"}]]`, want{batch: true, items: []string{
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: not a JSON object"}}`}}},
	}
	kinds := map[msgKind]string{kindRequest: "req", kindNotification: "note", kindResponse: "resp"}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			items, batch, fatal := decodeFrame([]byte(tc.frame), 4)
			if tc.want.fatal != "" {
				if fatal == nil {
					t.Fatalf("no fatal response; items %v", items)
				}
				if got := mustMarshal(t, fatal); got != tc.want.fatal {
					t.Fatalf("fatal\n got %s\nwant %s", got, tc.want.fatal)
				}
				return
			}
			if fatal != nil {
				t.Fatalf("unexpected fatal %s", mustMarshal(t, fatal))
			}
			if batch != tc.want.batch {
				t.Fatalf("batch = %v", batch)
			}
			var got []string
			for _, it := range items {
				switch {
				case it.bad != nil:
					got = append(got, mustMarshal(t, it.bad))
				case it.msg == nil:
					got = append(got, "drop")
				case it.msg.kind == kindResponse && it.msg.Error != nil && strings.HasPrefix(it.msg.Error.Message, "invalid response"):
					// Answers its request as an error: the caller stops waiting.
					got = append(got, "invalid resp")
				default:
					got = append(got, kinds[it.msg.kind])
				}
			}
			if strings.Join(got, "\n") != strings.Join(tc.want.items, "\n") {
				t.Fatalf("items\n got %q\nwant %q", got, tc.want.items)
			}
		})
	}
}

// The id, method and params of a request come through exactly.
func TestDecodeRequestFields(t *testing.T) {
	items, _, _ := decodeFrame([]byte(`{"params" : { "a" : 1 } , "method":"x.y","id": 1.50e1 ,"jsonrpc":"2.0"}`), 1)
	m := items[0].msg
	if m == nil || m.kind != kindRequest || string(m.ID) != "1.50e1" || m.Method != "x.y" || string(m.Params) != `{ "a" : 1 }` {
		t.Fatalf("got %+v", m)
	}
}

func TestMarshalParams(t *testing.T) {
	tests := []struct {
		in      any
		want    string
		wantErr bool
	}{
		{nil, "", false},
		{json.RawMessage(nil), "", false},
		{map[string]int{"a": 1}, `{"a":1}`, false},
		{[]int{1}, `[1]`, false},
		{json.RawMessage(`null`), "", false},
		{"<tag>", "", true},
		{42, "", true},
		{func() {}, "", true},
	}
	for _, tc := range tests {
		got, err := marshalParams(tc.in)
		if (err != nil) != tc.wantErr || string(got) != tc.want {
			t.Errorf("marshalParams(%#v) = %s, %v", tc.in, got, err)
		}
	}
}

func TestMarshalKeepsHTML(t *testing.T) {
	b, err := marshal(map[string]string{"s": "<a&b>"})
	if err != nil || string(b) != `{"s":"<a&b>"}` {
		t.Fatalf("%s %v", b, err)
	}
}

func mustMarshal(t *testing.T, v any) string {
	t.Helper()
	b, err := marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// outRequest is what encodeRequest builds by hand, as encoding/json
// would encode it.
type outRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
}

func TestEncodeRequestAsMarshal(t *testing.T) {
	for _, id := range []string{"", "1", "12345678901"} {
		for _, method := range []string{"processMessage", "", "a\"b", "x\\y", "tab\there", "<&>", "é", "\u2028", "\x7f"} {
			for _, params := range []json.RawMessage{nil, json.RawMessage(`{"topic":"t","payload":{"a":[1,2]}}`), json.RawMessage(`[]`)} {
				want, err := marshal(outRequest{JSONRPC: "2.0", ID: json.RawMessage(id), Method: method, Params: params})
				if err != nil {
					t.Fatal(err)
				}
				got, err := encodeRequest(id, method, params)
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != string(want) {
					t.Errorf("encodeRequest(%q, %q, %s) = %s, want %s", id, method, params, got, want)
				}
			}
		}
	}
}

func TestEncodedParamsSentAsIs(t *testing.T) {
	p, err := marshalParams(Encoded(`{"a":1}`))
	if err != nil || string(p) != `{"a":1}` {
		t.Fatalf("marshalParams(Encoded) = %s, %v", p, err)
	}
	b, err := marshal(map[string]any{"params": Encoded(`{"a":1}`)})
	if err != nil || string(b) != `{"params":{"a":1}}` {
		t.Fatalf("marshal of a value holding Encoded = %s, %v", b, err)
	}
}

// TestEncodeResponseAsMarshal checks the one-pass framing of a result
// against what marshal writes, for ids and results of every shape.
func TestEncodeResponseAsMarshal(t *testing.T) {
	ids := []string{`1`, `-7`, `1.5e3`, `"a"`, `"x\"y"`, `"<&>"`, `"\u2028 ü"`, `null`}
	results := []any{true, nil, 0, "<b>&\u2028", map[string]any{"processed": true}, json.RawMessage(`{ "a" : [1, 2] }`), Encoded(`{"a":1}`), []int{}}
	for _, id := range ids {
		for _, res := range results {
			r := resultResponse(json.RawMessage(id), res)
			want, err := marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if got := encodeResponse(r); string(got) != string(want) {
				t.Errorf("encodeResponse(%s, %v) = %s, want %s", id, res, got, want)
			}
		}
		r := errorResponse(json.RawMessage(id), Errorf(CodeInvalidParams, "bad <params>"))
		want, _ := marshal(r)
		if got := encodeResponse(r); string(got) != string(want) {
			t.Errorf("encodeResponse of an error = %s, want %s", got, want)
		}
	}
}

// TestEncodeResult checks the framing in place against the response
// encodeResponse writes, for flat maps and for results it leaves to
// encodeResponse.
func TestEncodeResult(t *testing.T) {
	long := strings.Repeat("x", 300)
	for _, tc := range []struct {
		id     string
		result any
	}{
		{`1`, map[string]any{"processed": true}},
		{`"a-b"`, map[string]any{"processed": true, "message": "ok", "retry_seconds": 3, "z": nil, "f": 1.5}},
		{`7`, map[string]any{}},
		{`7`, map[string]any{"long": long}},
		{`7`, map[string]any{"html": "<&>"}},
		{`7`, map[string]any{"nested": map[string]any{"a": 1}}},
		{`7`, map[string]any(nil)},
		{`7`, struct{}{}},
		{`null`, map[string]any{"processed": false}},
		{``, map[string]any{"processed": true}},
		{`8`, map[string]any{"bad": make(chan int)}},
	} {
		want := encodeResponse(resultResponse(json.RawMessage(tc.id), tc.result))
		if tc.id == "" {
			// No id is answered as null; a response without one does
			// not encode.
			want = encodeResponse(resultResponse(nullID, tc.result))
		}
		if got := encodeResult(json.RawMessage(tc.id), tc.result); string(got) != string(want) {
			t.Errorf("encodeResult(%s, %v) = %s, want %s", tc.id, tc.result, got, want)
		}
	}
}

// upper is a result with a decoder of its own.
type upper string

func (u *upper) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*u = upper(strings.ToUpper(s))
	return nil
}

// TestDecodeResultUnmarshaler checks that a result with its own decoder
// decodes, and fails, as json.Unmarshal would have it.
func TestDecodeResultUnmarshaler(t *testing.T) {
	for _, raw := range []string{`"abc"`, `null`, `7`, `{"a":1}`} {
		var want upper
		wantErr := json.Unmarshal([]byte(raw), &want)
		var got upper
		err := (&message{Result: json.RawMessage(raw)}).decodeResult("m", &got)
		if got != want || (err == nil) != (wantErr == nil) || (err != nil && err.Error() != "rpc: decode result of m: "+wantErr.Error()) {
			t.Errorf("decodeResult(%s) = %q, %v; want %q, %v", raw, got, err, want, wantErr)
		}
		var nilPtr *upper
		wantErr = json.Unmarshal([]byte(raw), nilPtr)
		err = (&message{Result: json.RawMessage(raw)}).decodeResult("m", nilPtr)
		if err == nil || err.Error() != "rpc: decode result of m: "+wantErr.Error() {
			t.Errorf("decodeResult(%s) into a nil pointer: %v, want %v", raw, err, wantErr)
		}
	}
}

// TestDecodeResultRaw checks that a raw result is the result's exact
// bytes, and that growing it never writes into the frame it came in.
func TestDecodeResultRaw(t *testing.T) {
	const in = `{"jsonrpc":"2.0","id":1,"result":{"a":1}}`
	frame := []byte(in)
	items, _, fatal := decodeFrame(frame, 10)
	if fatal != nil || len(items) != 1 || items[0].msg == nil {
		t.Fatalf("decodeFrame = %+v, fatal %v", items, fatal)
	}
	var raw json.RawMessage
	if err := items[0].msg.decodeResult("m", &raw); err != nil || string(raw) != `{"a":1}` {
		t.Fatalf("result = %s, %v", raw, err)
	}
	_ = append(raw, 'X')
	if string(frame) != in {
		t.Fatalf("the frame after the result grew = %s", frame)
	}
}

// fuzzResult is a typed result with the shapes a Go caller decodes into:
// strings, numbers, bools, a pointer, a slice of structs and a raw member.
type fuzzResult struct {
	Success bool    `json:"success"`
	ID      string  `json:"messageId"`
	N       int     `json:"n"`
	F       float64 `json:"f,omitempty"`
	P       *bool   `json:"p"`
	Acks    []struct {
		ClientID  string `json:"client_id"`
		Processed bool   `json:"processed"`
	} `json:"acks"`
	Raw json.RawMessage `json:"raw"`
	Any any             `json:"any"`
}

// FuzzDecodeResult drives a response frame through decodeFrame and
// decodeResult into a typed result and a raw one, and holds both to
// encoding/json: what it accepts, the value it makes, what it refuses.
func FuzzDecodeResult(f *testing.F) {
	for _, s := range []string{`{"success":true,"messageId":"m","acks":[{"client_id":"a","processed":true}]}`, `{"n":1.5}`, `{"N":2,"Success":true}`, `{"p":null,"raw":[1, 2]}`, `[1]`, `"s"`, `null`, `{"any":{"a":[1,"x",null]}}`, `{"n":"1"}`, `{"success":true,"success":false}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, result []byte) {
		frame := append(append([]byte(`{"jsonrpc":"2.0","id":1,"result":`), result...), '}')
		items, _, fatal := decodeFrame(frame, 1)
		if fatal != nil || len(items) != 1 || items[0].msg == nil {
			return // not a response: decodeFrame's own fuzzing covers it
		}
		m := items[0].msg
		var raw json.RawMessage
		if err := m.decodeResult("m", &raw); err != nil || !json.Valid(raw) {
			t.Fatalf("raw result of %s = %s, %v", frame, raw, err)
		}
		var got, want fuzzResult
		err := m.decodeResult("m", &got)
		wantErr := json.Unmarshal(raw, &want)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("decodeResult(%s): %v; encoding/json: %v", raw, err, wantErr)
		}
		if err == nil {
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			if string(g) != string(w) {
				t.Fatalf("decodeResult(%s) = %s; encoding/json made %s", raw, g, w)
			}
		}
	})
}
