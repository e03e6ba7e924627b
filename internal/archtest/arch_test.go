package archtest

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/meshagent/meshagent/"

// forbidden maps each package to import-path prefixes it must not depend
// on, directly or transitively.
var forbidden = map[string][]string{
	"sign":            {mod, "github.com/libp2p/go-libp2p/p2p/", "github.com/libp2p/go-libp2p-pubsub", "github.com/libp2p/go-libp2p-kad-dht", "net/http"},
	"protocol":        {mod + "node", mod + "dht", mod + "pubsub", mod + "rpc", mod + "bus", mod + "lobby", mod + "cli", mod + "store", "github.com/libp2p/go-libp2p/p2p/", "net/http"},
	"dht":             {mod + "pubsub", mod + "node", mod + "rpc", mod + "bus", mod + "lobby", mod + "cli"},
	"pubsub":          {mod + "dht", mod + "node", mod + "rpc", mod + "bus", mod + "lobby", mod + "cli"},
	"metrics":         {mod},
	"ui":              {mod},
	"internal/wsconn": {mod},
	"store":           {mod + "node", mod + "rpc", mod + "bus", mod + "lobby", mod + "cli", mod + "dht", mod + "pubsub"},
	"node":            {mod + "rpc", mod + "bus", mod + "lobby", mod + "cli"},
	// Mailboxes are a relay service and the agent's client of it: below
	// node, beside dht and pubsub.
	"mailbox": {mod + "node", mod + "rpc", mod + "bus", mod + "lobby", mod + "cli", mod + "dht", mod + "pubsub"},
	"rpc":     {mod + "node", mod + "dht", mod + "pubsub", mod + "cli", mod + "bus", mod + "lobby", "github.com/libp2p/go-libp2p/p2p/"},
	"bus":     {mod + "node", mod + "dht", mod + "pubsub", mod + "cli", mod + "lobby", "github.com/libp2p/go-libp2p/p2p/"},
	"lobby":   {mod + "node", mod + "dht", mod + "pubsub", mod + "cli", mod + "rpc", mod + "bus", "github.com/libp2p/go-libp2p/p2p/"},

	// The test helpers every package's tests share import nothing of the
	// project, so that no package's tests import a package above it.
	"internal/p2ptest": {mod},
	"internal/testlog": {mod},
	"internal/wait":    {mod},
	// The fake mesh speaks only the shared vocabulary, so that the tests
	// of every listener (rpc, bus, lobby) can use it.
	"internal/fakemesh": {mod + "node", mod + "dht", mod + "pubsub", mod + "store", mod + "cli", mod + "rpc", mod + "bus", mod + "lobby", "github.com/libp2p/go-libp2p/p2p/"},
	// The raw WebSocket client imports nothing of the project, so that the
	// in-package tests of rpc and bus can use it without a cycle.
	"internal/wstest": {mod},
	// The local API server builder stands on rpc and bus alone: the tests
	// of cli, cmd/meshagent and the examples use it beside real nodes.
	"internal/rpctest": {mod + "node", mod + "dht", mod + "pubsub", mod + "cli", mod + "lobby", "github.com/libp2p/go-libp2p/p2p/"},
	// The example clients' exchange runs a real node's local API, built
	// as a node serves it, without the command line.
	"internal/clienttest": {mod + "cli", mod + "lobby"},
	// The scale harness's rows and plots import nothing of the project;
	// its measuring, which starts nodes, is in its tests.
	"internal/scale": {mod},
	// The goroutines that run a connection's jobs (under wsconn and rpc's
	// client) import nothing of the project.
	"internal/workers": {mod},
}

// allowed are the exceptions to forbidden: packages of the project a
// package may depend on although a prefix above forbids them.
var allowed = map[string][]string{
	// The goroutines that run a connection's jobs.
	"internal/wsconn": {mod + "internal/workers"},
}

// testHelpers are the packages only tests may import.
var testHelpers = []string{"internal/clienttest", "internal/fakemesh", "internal/meshtest", "internal/p2ptest", "internal/rpctest", "internal/scale", "internal/testlog", "internal/wait", "internal/wstest"}

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list %v: %v\n%s", args, err, stderr)
	}
	return strings.Fields(string(out))
}

// TestRulesNamePackages fails when a package named in forbidden or
// testHelpers does not exist: after a rename its rules would otherwise
// check nothing. Rename the rule with the package.
func TestRulesNamePackages(t *testing.T) {
	named := append([]string(nil), testHelpers...)
	for pkg := range forbidden {
		named = append(named, pkg)
	}
	for _, pkg := range named {
		if out, err := exec.Command("go", "list", "../../"+pkg).CombinedOutput(); err != nil {
			t.Errorf("the rules name %s, which is not a package: %v\n%s", pkg, err, out)
		}
	}
}

func TestImportRules(t *testing.T) {
	for pkg, bad := range forbidden {
		t.Run(pkg, func(t *testing.T) {
			for _, dep := range goList(t, "-deps", "-f", "{{.ImportPath}}", "../../"+pkg) {
				if dep == mod+pkg || slices.Contains(allowed[pkg], dep) {
					continue
				}
				for _, b := range bad {
					if strings.HasPrefix(dep, b) {
						t.Errorf("%s must not depend on %s", pkg, dep)
					}
				}
			}
		})
	}
}

// TestNoTestingInProduction checks direct imports: production packages
// never import testing or the test helpers, and nothing imports cli.
func TestNoTestingInProduction(t *testing.T) {
	for _, line := range goList(t, "-f", "{{.ImportPath}}:{{join .Imports \",\"}}", "../../...") {
		pkg, imports, _ := strings.Cut(line, ":")
		if isTestHelper(pkg) {
			continue
		}
		for _, imp := range strings.Split(imports, ",") {
			switch {
			case imp == "testing":
				t.Errorf("%s imports testing in production code", pkg)
			case isTestHelper(imp):
				t.Errorf("%s imports the test helper %s", pkg, imp)
			case imp == mod+"cli" && pkg != mod+"cmd/meshagent":
				t.Errorf("%s imports cli; only main may", pkg)
			}
		}
	}
}

func isTestHelper(imp string) bool {
	for _, h := range testHelpers {
		if imp == mod+h {
			return true
		}
	}
	return false
}

// TestPackageDocs checks that every package says what it is for.
func TestPackageDocs(t *testing.T) {
	for _, line := range goList(t, "-f", "{{.ImportPath}}|{{if .Doc}}ok{{end}}", "../../...") {
		pkg, doc, _ := strings.Cut(line, "|")
		if doc != "ok" && !strings.Contains(pkg, "/examples/") {
			t.Errorf("%s has no package doc comment", pkg)
		}
	}
}
