package protocol

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/meshagent/meshagent/sign"
)

func TestFrameRoundTrip(t *testing.T) {
	// Sizes around the one-, two- and three-byte prefix boundaries.
	sizes := []int{0, 1, 2, 127, 128, 129, 300, 4095, 4096, 4097, 16383, 16384, 70000}
	var stream []byte
	var want [][]byte
	for i, n := range sizes {
		body := bytes.Repeat([]byte{byte('a' + i%26)}, n)
		want = append(want, body)
		stream = AppendFrame(stream, body)
	}
	for _, tc := range []struct {
		name string
		wrap func(io.Reader) io.Reader
	}{
		{"bufio reader", func(r io.Reader) io.Reader { return bufio.NewReaderSize(r, 16) }},
		{"plain reader", func(r io.Reader) io.Reader { return r }},
		{"one byte at a time", iotest.OneByteReader},
		{"half reads", iotest.HalfReader},
		{"data with EOF", iotest.DataErrReader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fr := NewFrameReader(tc.wrap(bytes.NewReader(stream)), 0)
			for i, w := range want {
				got, err := fr.Next()
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				if !bytes.Equal(got, w) {
					t.Fatalf("frame %d: got %d bytes, want %d", i, len(got), len(w))
				}
			}
			if _, err := fr.Next(); err != io.EOF {
				t.Fatalf("after the last frame: %v, want io.EOF", err)
			}
		})
	}
}

func TestSignedFrameRoundTrip(t *testing.T) {
	s := testSigner(t, 1)
	var stream []byte
	var bodies, sigs [][]byte
	for i := range 50 {
		e := testRequest(t)
		e.ID = fmt.Sprintf("id-%d", i)
		body, sig := seal(t, s, e)
		bodies, sigs = append(bodies, body), append(sigs, sig)
		stream = AppendSignedFrame(stream, sig, body)
	}
	fr := NewFrameReader(bufio.NewReader(bytes.NewReader(stream)), 4096)
	for i := range bodies {
		frame, err := fr.Next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		sig, body, err := SplitSigned(frame)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(sig, sigs[i]) || !bytes.Equal(body, bodies[i]) {
			t.Fatalf("frame %d differs", i)
		}
		e, err := Open(body, sig, s.ID())
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if e.ID != fmt.Sprintf("id-%d", i) {
			t.Fatalf("frame %d has id %s", i, e.ID)
		}
	}
	if _, err := fr.Next(); err != io.EOF {
		t.Fatalf("got %v, want io.EOF", err)
	}
}

func TestAppendFrameEncoding(t *testing.T) {
	for _, tc := range []struct {
		n      int
		prefix []byte
	}{
		{0, []byte{0x00}},
		{1, []byte{0x01}},
		{127, []byte{0x7f}},
		{128, []byte{0x80, 0x01}},
		{300, []byte{0xac, 0x02}},
		{16384, []byte{0x80, 0x80, 0x01}},
	} {
		body := bytes.Repeat([]byte{'x'}, tc.n)
		got := AppendFrame([]byte("keep"), body)
		want := append(append([]byte("keep"), tc.prefix...), body...)
		if !bytes.Equal(got, want) {
			t.Errorf("AppendFrame(%d bytes) prefix %x, want %x", tc.n, got[4:4+len(tc.prefix)], tc.prefix)
		}
	}
	sig := bytes.Repeat([]byte{1}, sign.SignatureSize)
	if got, want := AppendSignedFrame(nil, sig, []byte("{}")), AppendFrame(nil, append(bytes.Clone(sig), "{}"...)); !bytes.Equal(got, want) {
		t.Errorf("AppendSignedFrame = %x, want %x", got, want)
	}
}

// prefixOnlyReader hands out the prefix in one read and records any read
// after that: a reader that refuses a frame must not touch its body.
type prefixOnlyReader struct {
	prefix    []byte
	done      bool
	readsPast int
}

func (r *prefixOnlyReader) Read(p []byte) (int, error) {
	if r.done {
		r.readsPast++
		return 0, errors.New("read past the length prefix")
	}
	r.done = true
	return copy(p, r.prefix), nil
}

func TestFrameTooLargeDoesNotReadBody(t *testing.T) {
	for _, tc := range []struct {
		name      string
		announced uint64
		max       int
	}{
		{"one over", 1025, 1024},
		{"default limit", DefaultMaxFrameSize + 1, 0},
		{"huge", 1 << 62, 1024},
		{"max uint64", ^uint64(0), 1024},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &prefixOnlyReader{prefix: binary.AppendUvarint(nil, tc.announced)}
			fr := NewFrameReader(r, tc.max)
			got, err := fr.Next()
			if !errors.Is(err, ErrFrameTooLarge) {
				t.Fatalf("Next() = %d bytes, %v; want ErrFrameTooLarge", len(got), err)
			}
			if r.readsPast != 0 {
				t.Errorf("read %d times past the prefix", r.readsPast)
			}
			if !strings.Contains(err.Error(), fmt.Sprint(tc.announced)) {
				t.Errorf("error %q does not say how large the frame was", err)
			}
		})
	}
}

func TestFrameAtLimit(t *testing.T) {
	body := bytes.Repeat([]byte{'x'}, 1024)
	fr := NewFrameReader(bytes.NewReader(AppendFrame(nil, body)), 1024)
	if got, err := fr.Next(); err != nil || len(got) != 1024 {
		t.Fatalf("Next() = %d bytes, %v", len(got), err)
	}
}

func TestFrameReaderErrors(t *testing.T) {
	errReset := errors.New("stream reset")
	tests := []struct {
		name  string
		input io.Reader
		want  error
	}{
		{"empty stream", bytes.NewReader(nil), io.EOF},
		{"truncated prefix", bytes.NewReader([]byte{0x80}), io.ErrUnexpectedEOF},
		{"truncated long prefix", bytes.NewReader([]byte{0xff, 0xff, 0xff}), io.ErrUnexpectedEOF},
		{"truncated body", bytes.NewReader(append([]byte{0x05}, "abc"...)), io.ErrUnexpectedEOF},
		{"body missing", bytes.NewReader([]byte{0x05}), io.ErrUnexpectedEOF},
		{"uvarint longer than 10 bytes", bytes.NewReader(bytes.Repeat([]byte{0x80}, 11)), ErrBadFrame},
		{"uvarint overflowing 64 bits", bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}), ErrBadFrame},
		{"non-minimal zero", bytes.NewReader([]byte{0x80, 0x00}), ErrBadFrame},
		{"non-minimal one", bytes.NewReader([]byte{0x81, 0x80, 0x00, 'x'}), ErrBadFrame},
		{"read error in prefix", io.MultiReader(bytes.NewReader([]byte{0x80}), iotest.ErrReader(errReset)), errReset},
		{"read error before prefix", iotest.ErrReader(errReset), errReset},
		{"deadline before prefix", iotest.ErrReader(os.ErrDeadlineExceeded), os.ErrDeadlineExceeded},
		{"read error in body", io.MultiReader(bytes.NewReader([]byte{0x05, 'a'}), iotest.ErrReader(errReset)), errReset},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NewFrameReader(tc.input, 1024).Next()
			if !errors.Is(err, tc.want) {
				t.Fatalf("Next() = %q, %v; want %v", got, err, tc.want)
			}
			if got != nil {
				t.Errorf("Next() returned %q with an error", got)
			}
		})
	}
}

func TestFrameReaderKeepsWrappedBufio(t *testing.T) {
	br := bufio.NewReader(bytes.NewReader(AppendFrame(AppendFrame(nil, []byte("one")), []byte("two"))))
	fr := NewFrameReader(br, 0)
	if got, err := fr.Next(); err != nil || string(got) != "one" {
		t.Fatalf("Next() = %q, %v", got, err)
	}
	// The caller's bufio.Reader is used directly, so nothing is stranded
	// in a second buffer.
	if rest, _ := io.ReadAll(br); !bytes.Equal(rest, AppendFrame(nil, []byte("two"))) {
		t.Errorf("underlying reader holds %q", rest)
	}
}

func TestSplitSigned(t *testing.T) {
	sig := bytes.Repeat([]byte{7}, sign.SignatureSize)
	for _, tc := range []struct {
		name string
		body []byte
		ok   bool
	}{
		{"empty", nil, false},
		{"short", sig[:10], false},
		{"signature only", sig, false},
		{"signature and one byte", append(bytes.Clone(sig), '{'), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, env, err := SplitSigned(tc.body)
			if !tc.ok {
				if !errors.Is(err, ErrBadFrame) {
					t.Fatalf("SplitSigned = %v, want ErrBadFrame", err)
				}
				return
			}
			if err != nil || !bytes.Equal(s, sig) || string(env) != "{" {
				t.Fatalf("SplitSigned = %x, %q, %v", s, env, err)
			}
		})
	}
}
