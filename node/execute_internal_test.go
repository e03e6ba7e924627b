package node

import (
	"encoding/json"
	"testing"
)

// TestCanonicalResult: a handler's canonical result is sent as it is, not
// copied (the copy was 7% of the bytes a signed call allocates); any other
// result is made canonical.
func TestCanonicalResult(t *testing.T) {
	tests := []struct {
		name, in, want string
		shared         bool
	}{
		{name: "canonical object", in: `{"a":[1,2.5],"b":"x"}`, want: `{"a":[1,2.5],"b":"x"}`, shared: true},
		{name: "canonical string", in: `"hi"`, want: `"hi"`, shared: true},
		{name: "members out of order", in: `{"b":1,"a":2}`, want: `{"a":2,"b":1}`},
		{name: "spaces and a long number", in: `{ "a" : 2.50 }`, want: `{"a":2.5}`},
		{name: "not JSON", in: `{"a":`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := json.RawMessage(tc.in)
			out, _, err := canonicalJSON(in)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("%s made %s, want an error", tc.in, out)
				}
				return
			}
			if err != nil || string(out) != tc.want {
				t.Fatalf("%s made %s (%v), want %s", tc.in, out, err, tc.want)
			}
			if shared := &out[0] == &in[0]; shared != tc.shared {
				t.Errorf("shares the handler's bytes: %v, want %v", shared, tc.shared)
			}
		})
	}
}
