package node_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

func TestParseServicesHandlerKind(t *testing.T) {
	var gotSpec string
	kind := node.WithHandlerKind("fake", func(c *protocol.Capability, spec json.RawMessage) (node.Handler, error) {
		gotSpec = string(spec)
		c.Description = "filled by the kind"
		return node.HandlerFunc(func(context.Context, *node.Call) (json.RawMessage, error) {
			return json.RawMessage(`{"ok":true}`), nil
		}), nil
	})
	tests := []struct {
		name, file, wantErr string
	}{
		{"kind", `[{"name":"x","handler":{"fake":{"a":1}}}]`, ""},
		{"kind beside another member", `[{"name":"x","handler":{"fake":{},"exec":["true"]}}]`, "takes no other member"},
		{"unknown kind", `[{"name":"x","handler":{"nope":{}}}]`, "unknown field"},
		{"exec still works", `[{"name":"x","handler":{"exec":["true"]}}]`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			services, err := node.ParseServices([]byte(tt.file), kind)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.name == "kind" {
				if gotSpec != `{"a":1}` || services[0].Capability.Description != "filled by the kind" {
					t.Fatalf("spec %q, capability %+v", gotSpec, services[0].Capability)
				}
			}
		})
	}
	if _, err := node.ParseServices([]byte(`[{"name":"x","handler":{"fake":{}}}]`)); err == nil {
		t.Fatal("a kind that was not registered was accepted")
	}
}
