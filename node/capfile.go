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

// HandlerKind builds the Handler of a capability from the value of its
// handler's one member named after the kind: for a kind "mcp",
// {"handler": {"mcp": {...}}} calls the "mcp" kind with {...}. Kinds beyond
// builtin and exec live outside node (the MCP and A2A handlers), so the
// process that assembles a node registers them with WithHandlerKind. The
// capability is the entry's own, so a kind may check or complete it (an
// input schema taken from the tool it serves); spec is the raw JSON value and
// must be decoded strictly.
type HandlerKind func(c *protocol.Capability, spec json.RawMessage) (Handler, error)

// ParseOption configures ParseServices and LoadServices.
type ParseOption func(*parseConfig)

type parseConfig struct {
	kinds map[string]HandlerKind
}

// WithHandlerKind lets a capabilities file name handlers of kind name
// ({"handler": {name: spec}}), built by k. The names "builtin", "exec" and
// "timeout" are taken.
func WithHandlerKind(name string, k HandlerKind) ParseOption {
	return func(c *parseConfig) {
		if c.kinds == nil {
			c.kinds = make(map[string]HandlerKind)
		}
		c.kinds[name] = k
	}
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
func ParseServices(data []byte, opts ...ParseOption) ([]Service, error) {
	var cfg parseConfig
	for _, o := range opts {
		o(&cfg)
	}
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
	for i := range entries {
		e := &entries[i]
		h, err := cfg.parseHandler(&e.Capability, e.Handler)
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
func LoadServices(path string, opts ...ParseOption) ([]Service, error) {
	data, err := readBoundedFile("capabilities", path, maxCapabilitiesFile)
	if err != nil {
		return nil, err
	}
	s, err := ParseServices(data, opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// readBoundedFile reads a configuration file of at most limit bytes; what
// names the file's kind in errors.
func readBoundedFile(what, path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: read %s: %w", what, path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: %s is larger than %d bytes", what, path, limit)
	}
	return data, nil
}

func (cfg *parseConfig) parseHandler(c *protocol.Capability, raw json.RawMessage) (Handler, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, errors.New(`a "handler" is required: {"exec": ["cmd", "arg"]} or {"builtin": "echo"}`)
	}
	if len(cfg.kinds) > 0 && raw[0] == '{' {
		var members map[string]json.RawMessage
		if err := protocol.DecodeStrict(raw, &members); err != nil {
			return nil, fmt.Errorf("handler: %w", err)
		}
		for name, k := range cfg.kinds {
			spec, ok := members[name]
			if !ok {
				continue
			}
			if len(members) != 1 {
				return nil, fmt.Errorf("handler: %q takes no other member beside it", name)
			}
			h, err := k(c, spec)
			if err != nil {
				return nil, fmt.Errorf("handler: %s: %w", name, err)
			}
			return h, nil
		}
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
