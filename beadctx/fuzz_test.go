package beadctx

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// FuzzPatches feeds arbitrary payloads and merge patches: decoding never
// panics, a decoded patch is applied, and two documents given the
// accepted patches in opposite orders agree.
func FuzzPatches(f *testing.F) {
	f.Add([]byte(`{"bead":"b1","op":"patch","hlc":{"wall":1700000000000,"counter":2},"value":{"a":{"b":null}}}`), []byte(`{"a":1,"c":[1,null]}`))
	f.Add([]byte(`{"bead":"b1","op":"set","hlc":{"wall":1700000000000,"counter":0},"value":{}}`), []byte(`{"a":null}`))
	f.Add([]byte(`{"bead":"b1","op":"patch","hlc":{"wall":1,"counter":0},"value":{"a":1,"a":2}}`), []byte(`"x"`))
	f.Add([]byte(`{"bead":"b1","op":"set","hlc":{"wall":1700000000000,"counter":0},"value":{},"members":["a0","a1"]}`), []byte(`{"b":2}`))
	f.Add([]byte(`{"bead":"b1","op":"set","hlc":{"wall":1700000000000,"counter":0},"value":{},"members":[1]}`), []byte(`{}`))
	sent := time.UnixMilli(1_700_000_000_000)
	f.Fuzz(func(t *testing.T, payload, patch []byte) {
		if out, err := MergePatch([]byte(`{"a":{"x":1},"b":2}`), patch); err == nil && len(bytes.TrimSpace(patch)) > 0 && !bytesValid(out) {
			t.Fatalf("MergePatch produced invalid JSON %q", out)
		}
		_, p, err := DecodePayload(payload, "a1", sent)
		if err != nil {
			return
		}
		q, err := Patch{At: HLC{Wall: p.At.Wall, Counter: p.At.Counter + 1}, Agent: "a0", Op: OpPatch, Value: patch}.Check()
		if err != nil {
			q = mustPatch(t, p.At.Wall, 0, "a2", OpPatch, `{"z":1}`)
		}
		d1, d2 := NewDoc(), NewDoc()
		for _, x := range []Patch{p, q} {
			_, _ = d1.Add(x)
		}
		for _, x := range []Patch{q, p} {
			_, _ = d2.Add(x)
		}
		if len(d1.JSON()) != sizeOf(d1.cur.doc) {
			t.Fatalf("size %d, encoded %d: %s", sizeOf(d1.cur.doc), len(d1.JSON()), d1.JSON())
		}
		if !bytes.Equal(d1.JSON(), d2.JSON()) {
			t.Fatalf("orders disagree: %s vs %s", d1.JSON(), d2.JSON())
		}
		if h1, h2 := fmt.Sprint(d1.Members(), d1.Refused(), d1.History(MaxHistory)), fmt.Sprint(d2.Members(), d2.Refused(), d2.History(MaxHistory)); h1 != h2 {
			t.Fatalf("orders disagree on members, refusals or history: %s vs %s", h1, h2)
		}
	})
}

func bytesValid(b []byte) bool { _, err := parse(b); return err == nil }
