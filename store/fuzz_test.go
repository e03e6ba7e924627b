package store

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzDecodeRecord feeds arbitrary bytes to the stored-record decoders.
// They must never panic, must fail only with a *CorruptError, and what they
// accept must encode and decode to the same record.
func FuzzDecodeRecord(f *testing.F) {
	for _, g := range goldenRecords {
		if b, err := os.ReadFile(filepath.Join("testdata", "golden", g.file)); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte{})
	f.Add([]byte{formatVersion})
	f.Add([]byte{formatVersion, '{', '}'})
	f.Add(append([]byte{formatVersion}, `{"id":"i","topic":"t","payload":"MQ==","time":-1,"attempts":3}`...))
	f.Fuzz(func(t *testing.T, data []byte) {
		key := []byte("k")
		r, err := decodeMessage("b", key, data)
		if err != nil {
			if _, ok := err.(*CorruptError); !ok {
				t.Fatalf("decodeMessage error %T is not a *CorruptError", err)
			}
		} else {
			_ = r.message()
			_ = r.deadLetter()
			again, err := encode(r)
			if err != nil {
				t.Fatal(err)
			}
			r2, err := decodeMessage("b", key, again)
			if err != nil {
				t.Fatalf("re-encoded record does not decode: %v", err)
			}
			if !reflect.DeepEqual(normalize(r), normalize(r2)) {
				t.Fatalf("round trip changed the record:\n%+v\n%+v", r, r2)
			}
		}
		g, err := decodeRegistration("b", key, data)
		if err != nil {
			if _, ok := err.(*CorruptError); !ok {
				t.Fatalf("decodeRegistration error %T is not a *CorruptError", err)
			}
			return
		}
		_ = g.registration()
	})
}

// normalize makes empty and nil byte slices equal.
func normalize(r msgRecord) msgRecord {
	if len(r.Metadata) == 0 {
		r.Metadata = nil
	}
	if len(r.Payload) == 0 {
		r.Payload = nil
	}
	r.Payload, r.Metadata = bytes.Clone(r.Payload), bytes.Clone(r.Metadata)
	return r
}
