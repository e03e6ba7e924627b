package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

// maxCapabilitiesFile bounds the capabilities file.
const maxCapabilitiesFile = 4 << 20

// HandlerSpec says how a capability from a file is run: either a built-in
// handler by name ("echo") or a command run per request.
type HandlerSpec struct {
	// Builtin names a built-in handler: "echo".
	Builtin string `json:"builtin,omitempty"`
	// Exec is the command and its arguments.
	Exec []string `json:"exec,omitempty"`
	// Timeout bounds one run of Exec, as a Go duration ("10s").
	Timeout string `json:"timeout,omitempty"`
}

// fileCapability is one entry of a capabilities file: seed 000's capability
// object plus a handler.
type fileCapability struct {
	protocol.Capability
	Handler json.RawMessage `json:"handler"`
}

// ParseServices parses a capabilities file: a JSON array of seed 000
// capability objects, or an object {"capabilities": [...]}, where each
// capability also has a "handler": {"exec": ["cmd", "arg"], "timeout": "10s"},
// {"builtin": "echo"} or the shorthand "echo". It is decoded strictly
// (protocol.DecodeStrict): unknown or repeated members are errors, so typos
// do not silently drop settings.
func ParseServices(data []byte) ([]Service, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, errors.New("capabilities: file is empty")
	}
	if data[0] == '{' {
		var wrapper struct {
			Capabilities json.RawMessage `json:"capabilities"`
		}
		if err := protocol.DecodeStrict(data, &wrapper); err != nil {
			return nil, fmt.Errorf("capabilities: %w", err)
		}
		if wrapper.Capabilities == nil {
			return nil, errors.New(`capabilities: object has no "capabilities" array`)
		}
		data = wrapper.Capabilities
	}
	var entries []fileCapability
	if err := protocol.DecodeStrict(data, &entries); err != nil {
		return nil, fmt.Errorf("capabilities: expected an array of capability objects: %w", err)
	}
	services := make([]Service, 0, len(entries))
	for i, e := range entries {
		h, err := parseHandler(e.Handler)
		if err != nil {
			return nil, fmt.Errorf("capabilities[%d] %q: %w", i, e.Name, err)
		}
		if err := e.Capability.Validate(); err != nil {
			return nil, fmt.Errorf("capabilities[%d]: %w", i, err)
		}
		services = append(services, Service{Capability: e.Capability, Handler: h})
	}
	if err := validateServices(services); err != nil {
		return nil, err
	}
	return services, nil
}

// LoadServices reads and parses a capabilities file (see ParseServices).
func LoadServices(path string) ([]Service, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("capabilities: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxCapabilitiesFile+1))
	if err != nil {
		return nil, fmt.Errorf("capabilities: read %s: %w", path, err)
	}
	if len(data) > maxCapabilitiesFile {
		return nil, fmt.Errorf("capabilities: %s is larger than %d bytes", path, maxCapabilitiesFile)
	}
	s, err := ParseServices(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

func parseHandler(raw json.RawMessage) (Handler, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, errors.New(`a "handler" is required: {"exec": ["cmd", "arg"]} or {"builtin": "echo"}`)
	}
	var spec HandlerSpec
	target := any(&spec)
	if raw[0] == '"' {
		target = &spec.Builtin
	}
	if err := protocol.DecodeStrict(raw, target); err != nil {
		return nil, fmt.Errorf("handler: %w", err)
	}
	switch {
	case spec.Builtin != "" && len(spec.Exec) > 0:
		return nil, errors.New("handler: set either builtin or exec, not both")
	case spec.Builtin != "":
		switch spec.Builtin {
		case "echo":
			return EchoHandler(), nil
		default:
			return nil, fmt.Errorf("handler: unknown builtin %q (known: echo)", spec.Builtin)
		}
	case len(spec.Exec) > 0:
		if spec.Exec[0] == "" {
			return nil, errors.New("handler: exec command is empty")
		}
		var timeout time.Duration
		if spec.Timeout != "" {
			d, err := time.ParseDuration(spec.Timeout)
			if err != nil || d <= 0 {
				return nil, fmt.Errorf("handler: timeout %q is not a positive duration like \"10s\"", spec.Timeout)
			}
			timeout = d
		}
		return ExecHandler(spec.Exec, timeout), nil
	default:
		return nil, errors.New(`handler: set {"exec": ["cmd", "arg"]} or {"builtin": "echo"}`)
	}
}
