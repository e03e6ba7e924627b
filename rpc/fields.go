package rpc

import (
	"bytes"
	"errors"
	"io"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
)

// envelope is the members of a JSON-RPC object the codec looks at, as
// written (nil when absent): slices of the frame, which the reader hands
// over and never reuses.
type envelope struct {
	Version, ID, Method, Params, Result, Error jsontext.Value
}

// frameOpts reads a frame as JSON-RPC peers have always been read: a
// repeated member replaces the earlier one (params are decoded strictly,
// duplicates refused, by the method's own decoder).
var frameOpts = jsontext.AllowDuplicateNames(true)

// frameDecoder is a jsontext.Decoder over a frame, kept in frameDecoders
// between frames.
type frameDecoder struct {
	buf bytes.Buffer
	dec jsontext.Decoder
}

var frameDecoders = sync.Pool{New: func() any { return new(frameDecoder) }}

var errNotObject = errors.New("rpc: not a JSON object")

// objectEnvelope reads raw, which must be one JSON object, into its
// members in one pass of jsontext, which checks the syntax and UTF-8 of
// the whole of it. It reports a *jsontext.SyntacticError for malformed
// JSON or invalid UTF-8, and errNotObject for another value.
func objectEnvelope(raw []byte) (e envelope, err error) {
	fd := frameDecoders.Get().(*frameDecoder)
	fd.buf = *bytes.NewBuffer(raw) // the decoder reads it in place
	fd.dec.Reset(&fd.buf, frameOpts)
	e, err = readEnvelope(&fd.dec, raw)
	fd.buf = bytes.Buffer{}
	fd.dec.Reset(&fd.buf) // holds nothing of raw
	frameDecoders.Put(fd)
	return e, err
}

func readEnvelope(dec *jsontext.Decoder, raw []byte) (e envelope, err error) {
	if dec.PeekKind() != '{' {
		if _, err := dec.ReadValue(); err != nil {
			return e, err
		}
		return e, errNotObject
	}
	if _, err := dec.ReadToken(); err != nil {
		return e, err
	}
	for dec.PeekKind() != '}' {
		name, err := dec.ReadValue()
		if err != nil {
			return e, err
		}
		key := name
		if bytes.IndexByte(name, '\\') >= 0 {
			key, _ = jsontext.AppendQuote(nil, string(mustUnquote(name)))
		}
		v, err := dec.ReadValue()
		if err != nil {
			return e, err
		}
		end := int(dec.InputOffset())
		v = raw[end-len(v) : end : end] // the frame's own bytes, capped
		switch string(key) {
		case `"jsonrpc"`:
			e.Version = v
		case `"id"`:
			e.ID = v
		case `"method"`:
			e.Method = v
		case `"params"`:
			e.Params = v
		case `"result"`:
			e.Result = v
		case `"error"`:
			e.Error = v
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return e, err
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		if err == nil {
			err = errNotObject
		}
		return envelope{}, err
	}
	return e, nil
}

// mustUnquote unquotes a string the decoder has validated.
func mustUnquote(s []byte) []byte {
	out, _ := jsontext.AppendUnquote(nil, s)
	return out
}

// jsonString decodes raw, a value the frame's decoding validated, as a
// JSON string; null is "", as encoding/json reads it.
func jsonString(raw []byte) (string, error) {
	if string(raw) == "null" {
		return "", nil
	}
	if len(raw) < 2 || raw[0] != '"' {
		return "", errors.New("rpc: not a JSON string")
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), nil
	}
	s, err := jsontext.AppendUnquote(nil, raw)
	return string(s), err
}
