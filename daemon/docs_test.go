package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/meshagent/meshagent/rpc"
)

// methodDocs are the files that document the local API's methods to the
// people who call them.
var methodDocs = []string{"../README.md", "../docs/*.md", "../rpc/doc.go", "../localapi/doc.go", "../bus/doc.go", "../clients/*/README.md"}

// documentedMethod is a method name as the documents write it: mesh.x or
// bus.x, not a call in code (followed by "("), a wildcard ("mesh.context*")
// or a file name.
var documentedMethod = regexp.MustCompile(`\b((?:mesh|bus)\.[a-z][a-zA-Z]*)\b([(*]?)`)

// sentByTheNode are the documented names that are not methods a client
// calls: the node's requests and notifications to its clients, and the
// notifications a serving client sends, which the node reads on the
// connection's read loop.
var sentByTheNode = []string{
	"mesh.handle", "mesh.cancel", "mesh.agentMessage", "mesh.message", "mesh.discovered",
	"mesh.taskEvent", "mesh.taskResolved", // node to client
	"mesh.progress", "mesh.setState", // client to node, notifications
}

// TestDocumentedMethodsServed: every local API method the README, docs/,
// the packages' docs and the client packages' READMEs name is one a
// node's local API serves (called with empty params it may refuse them,
// but never answers -32601, method not found), and every mesh.* and
// bus.* method it serves is named there. A method renamed or added in
// code and not in its documents fails here.
func TestDocumentedMethodsServed(t *testing.T) {
	var names []string
	for _, g := range methodDocs {
		files, err := filepath.Glob(g)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range documentedMethod.FindAllStringSubmatch(string(b), -1) {
				name, after := m[1], m[2]
				if after != "" || filepath.Ext(name) == ".md" || filepath.Ext(name) == ".csv" || slices.Contains(sentByTheNode, name) {
					continue
				}
				if !slices.Contains(names, name) {
					names = append(names, name)
				}
			}
		}
	}
	if len(names) < 30 {
		t.Fatalf("found %d documented methods: the extraction is broken (%v)", len(names), names)
	}
	dir := t.TempDir()
	caps := filepath.Join(dir, "caps.json")
	writeCaps(t, caps, "echo")
	d, err := Start(t.Context(), append(ownOptions(t, 320, dir, caps), WithAPI("127.0.0.1:0"))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cl, err := rpc.Dial(ctx, d.APIAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	slices.Sort(names)
	// And the other way: every mesh.* and bus.* method served is
	// documented.
	for _, m := range d.api.srv.Methods() {
		if documentedMethod.MatchString(m) && !slices.Contains(names, m) && !slices.Contains(sentByTheNode, m) {
			t.Errorf("%s is served but no document names it", m)
		}
	}
	for _, name := range names {
		// Short bounds, so that a method that waits (mesh.discover,
		// mesh.taskWait) answers within the test.
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := cl.Call(cctx, name, map[string]any{}, nil)
		cancel()
		var re *rpc.Error
		if errors.As(err, &re) && re.Code == rpc.CodeMethodNotFound {
			t.Errorf("%s is documented but not served: %v", name, err)
		}
	}
	t.Logf("%d documented methods served: %v", len(names), names)
}
