package node

import (
	"slices"
	"testing"

	"github.com/meshagent/meshagent/protocol"
)

// TestRegistryBuiltins: the built-ins answer before a registered service
// of the same name, are not announced, and do not run as tasks; every
// other action, unknown ones included, does.
func TestRegistryBuiltins(t *testing.T) {
	n := &Node{}
	r := newRegistry(n.builtins()...)
	if err := r.set([]Service{{Capability: protocol.Capability{Name: "echo", Description: "echo"}, Handler: EchoHandler()}}); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{protocol.TaskStatusCapability, protocol.TaskCancelCapability, protocol.MessageCapability} {
		svc := r.lookup(b)
		if svc == nil || svc.admit == nil || svc.task || r.runsAsTask(b) || !r.serves(b) {
			t.Errorf("built-in %s: %+v, runs as task %v", b, svc, r.runsAsTask(b))
		}
	}
	if !r.runsAsTask("echo") || !r.runsAsTask("unknown") || r.serves("unknown") {
		t.Error("a registered or unknown action must run as a task; an unknown one is not served")
	}
	if names := r.capabilityNames(); !slices.Equal(names, []string{"echo"}) {
		t.Errorf("announced %q, want only echo", names)
	}
	if caps := r.capabilities(); len(caps) != 1 || caps[0].Name != "echo" {
		t.Errorf("capabilities %+v, want only echo", caps)
	}
	seq := r.version()
	if err := r.set(nil); err != nil || r.version() <= seq {
		t.Errorf("set: %v; seq %d after %d, want it to grow", err, r.version(), seq)
	}
}
