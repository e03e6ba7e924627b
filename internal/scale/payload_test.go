package scale

import (
	"encoding/json"
	"testing"
)

// TestPayloadSize: -scale.payload pads a published message to that many
// bytes of valid JSON whose "m" is still the sequence number receivers
// read; 0, or a size below the bare payload's, leaves it bare.
func TestPayloadSize(t *testing.T) {
	defer func(was int) { *size = was }(*size)
	for _, tc := range []struct {
		size, want int
	}{
		{0, len(`{"m":"42"}`)},
		{12, len(`{"m":"42"}`)},
		{256, 256},
		{4096, 4096},
	} {
		*size = tc.size
		b := payload("42")
		var m struct {
			M string `json:"m"`
		}
		if err := json.Unmarshal(b, &m); err != nil || m.M != "42" {
			t.Fatalf("-scale.payload %d: %q does not read as m=42: %v", tc.size, b, err)
		}
		if len(b) != tc.want {
			t.Errorf("-scale.payload %d: %d bytes, want %d", tc.size, len(b), tc.want)
		}
	}
}
