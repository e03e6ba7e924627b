package protocol

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/meshagent/meshagent/sign"
)

// DefaultMaxFrameSize is the largest frame a stream accepts unless
// configured otherwise.
const DefaultMaxFrameSize = 1 << 20

// ErrFrameTooLarge is returned when a frame's length prefix exceeds the
// maximum; the body is not read.
var ErrFrameTooLarge = errors.New("protocol: frame too large")

// ErrBadFrame is returned for a frame whose prefix or layout is malformed.
var ErrBadFrame = errors.New("protocol: malformed frame")

// A frame on a direct stream is
//
//	uvarint(len(body)) ‖ body
//
// and the body of a signed frame is
//
//	signature (64 bytes) ‖ canonical envelope JSON
//
// so a receiver checks the size from the prefix, reads the body, and
// verifies the signature over the exact bytes before parsing them.

// AppendFrame appends a length-prefixed frame holding body to dst.
func AppendFrame(dst, body []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(body)))
	return append(dst, body...)
}

// AppendSignedFrame appends a frame whose body is sig ‖ env to dst.
func AppendSignedFrame(dst, sig, env []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(sig)+len(env)))
	dst = append(dst, sig...)
	return append(dst, env...)
}

// FrameReader reads length-prefixed frames from a stream.
type FrameReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// NewFrameReader returns a reader that refuses frames larger than max
// bytes (DefaultMaxFrameSize if max <= 0).
func NewFrameReader(r io.Reader, max int) *FrameReader {
	if max <= 0 {
		max = DefaultMaxFrameSize
	}
	br, ok := r.(*bufio.Reader)
	if !ok {
		br = bufio.NewReaderSize(r, 4096)
	}
	return &FrameReader{r: br, max: max}
}

// Next returns the next frame's body. The slice is valid until the next
// call. A frame larger than the maximum yields ErrFrameTooLarge without
// reading its body; the stream must then be reset, since it is out of sync.
func (f *FrameReader) Next() ([]byte, error) {
	n, err := f.readLen()
	if err != nil {
		return nil, err
	}
	if n > uint64(f.max) {
		return nil, fmt.Errorf("%w: %d bytes announced, limit %d", ErrFrameTooLarge, n, f.max)
	}
	if cap(f.buf) < int(n) {
		f.buf = make([]byte, n)
	}
	f.buf = f.buf[:n]
	if _, err := io.ReadFull(f.r, f.buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return f.buf, nil
}

// readLen reads the uvarint length prefix. It returns io.EOF if the stream
// ends before the prefix, io.ErrUnexpectedEOF if it ends inside it, the
// transport's own error (a reset, a deadline) unchanged, and ErrBadFrame
// for a prefix that overflows 64 bits or is not minimally encoded (so
// that each length has exactly one encoding, as multiformats varints
// require).
func (f *FrameReader) readLen() (uint64, error) {
	var x uint64
	for i := range binary.MaxVarintLen64 {
		b, err := f.r.ReadByte()
		if err != nil {
			if i > 0 && errors.Is(err, io.EOF) {
				return 0, io.ErrUnexpectedEOF
			}
			return 0, err
		}
		if b < 0x80 {
			switch {
			case i == binary.MaxVarintLen64-1 && b > 1:
				return 0, fmt.Errorf("%w: length prefix overflows 64 bits", ErrBadFrame)
			case i > 0 && b == 0:
				return 0, fmt.Errorf("%w: length prefix is not minimally encoded", ErrBadFrame)
			}
			return x | uint64(b)<<(7*i), nil
		}
		x |= uint64(b&0x7f) << (7 * i)
	}
	return 0, fmt.Errorf("%w: length prefix longer than %d bytes", ErrBadFrame, binary.MaxVarintLen64)
}

// SplitSigned splits a signed frame body into signature and envelope bytes.
func SplitSigned(body []byte) (sig, env []byte, err error) {
	if len(body) <= sign.SignatureSize {
		return nil, nil, fmt.Errorf("%w: %d bytes is too short for a signed envelope", ErrBadFrame, len(body))
	}
	return body[:sign.SignatureSize], body[sign.SignatureSize:], nil
}
