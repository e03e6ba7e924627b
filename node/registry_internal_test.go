package node

import (
	"errors"
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

// TestRegistrySources: each source's services are replaced on their own;
// a name another source offers is refused, except that the node's own
// set always applies and shadows it.
func TestRegistrySources(t *testing.T) {
	r := newRegistry()
	svc := func(name, desc string) Service {
		return Service{Capability: protocol.Capability{Name: name, Description: desc}, Handler: EchoHandler()}
	}
	if err := r.set([]Service{svc("echo", "own")}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.offer("api", []Service{svc("summarize", "api"), svc("translate", "api")}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.offer("lobby", []Service{svc("price", "lobby")}); err != nil {
		t.Fatal(err)
	}
	if got := r.capabilityNames(); !slices.Equal(got, []string{"echo", "price", "summarize", "translate"}) {
		t.Fatalf("names %q", got)
	}
	// Replacing the node's own set leaves the other sources alone.
	if err := r.set([]Service{svc("echo2", "own")}); err != nil {
		t.Fatal(err)
	}
	if got := r.capabilityNames(); !slices.Equal(got, []string{"echo2", "price", "summarize", "translate"}) {
		t.Fatalf("after set: names %q", got)
	}
	seq := r.version()
	if _, err := r.offer("lobby", []Service{svc("summarize", "lobby")}); !errors.Is(err, ErrCapabilityTaken) {
		t.Fatalf("a name another source offers: %v, want ErrCapabilityTaken", err)
	}
	if _, err := r.offer("api", []Service{svc("echo2", "api")}); !errors.Is(err, ErrCapabilityTaken) {
		t.Fatalf("a name the node offers: %v, want ErrCapabilityTaken", err)
	}
	if r.version() != seq || r.lookup("price") == nil {
		t.Fatal("a refused offer changed the registry")
	}
	shadowed, err := r.offer(ownSource, []Service{svc("summarize", "own")})
	if err != nil || !slices.Equal(shadowed, []string{"summarize"}) {
		t.Fatalf("own set over a source's name: shadowed %q, %v", shadowed, err)
	}
	if d := r.lookup("summarize").Capability.Description; d != "own" {
		t.Errorf("summarize answered by %q, want the node's own", d)
	}
	// An empty offer withdraws the source; the node's own stays.
	if _, err := r.offer("api", nil); err != nil {
		t.Fatal(err)
	}
	if got := r.capabilityNames(); !slices.Equal(got, []string{"price", "summarize"}) {
		t.Errorf("after withdrawing api: names %q", got)
	}
}
