package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/meshagent/meshagent/protocol"
)

// writeJSONLine writes v as one line of compact JSON: the stable machine
// form every --json output uses (one object per line).
func writeJSONLine(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// writePrettyJSON writes a JSON value indented for people. An empty value
// prints as null.
func writePrettyJSON(w io.Writer, raw []byte) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("null")
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// availableCapabilities returns the "available" list a CAPABILITY_NOT_SUPPORTED
// error carries in its details, joined for people, or "".
func availableCapabilities(pe *protocol.Error) string {
	if pe.Code != protocol.CodeCapabilityNotSupported || len(pe.Details) == 0 {
		return ""
	}
	var d struct {
		Available []string `json:"available"`
	}
	if json.Unmarshal(pe.Details, &d) != nil || len(d.Available) == 0 {
		return ""
	}
	return strings.Join(d.Available, ", ")
}

// orDash returns s, or "-" when s is empty, for table cells.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
